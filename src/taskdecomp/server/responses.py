"""Response bodies: the JSON the API answers, as pydantic models, for the OpenAPI document.

The routes build their answers as dicts (a run's stored form, a plan tree's JSON); these
models only describe and check them. Each route serves its model with
``response_model_exclude_unset``, so an answer keeps exactly the keys the route gave it: a
key that does not apply (a trace entry's ``error``, an instruction step's ``tool``) stays
out rather than turning into ``null``. Every known field is typed; fields whose shape is
open (a tool's observation, an event's data, a strategy's state) are plain JSON.

A field added to an answer is added here too, in the model of that answer, or it is dropped
from the response (the tests compare every answer with the dict the route built).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from taskdecomp.approvals import ApprovalKind
from taskdecomp.decomposition import Mode
from taskdecomp.server.plans import JobState
from taskdecomp.stops import LlmPhase
from taskdecomp.store.base import RunState
from taskdecomp.strategies.tree.state import NodeStatus

Status = Literal["queued", "running", "interrupted", "paused", "ok", "stopped"]
"""A run's status as the API shows it: the stored one, or ``interrupted`` (see
:data:`taskdecomp.server.runs.STATUSES`)."""

Json = Any
"""Any JSON value."""


class _Out(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)


class Usage(_Out):
    """What a run spent."""

    llm_calls: int
    """Model calls made (including failed ones)."""
    tool_calls: int
    """Tool calls made."""
    tokens_in: int
    """Prompt tokens."""
    tokens_out: int
    """Completion tokens."""
    cost_usd: float | None
    """Model spend in USD; ``null`` when a model's price is unknown."""
    seconds: float
    """Wall time of the run."""
    repairs: int = 0
    """Refused answers sent back to the model to be repaired."""
    estimated: bool = False
    """Some token counts are estimates: a server sent no usage for a call."""


class Step(_Out):
    """One step of a plan: a tool step (``tool``, ``args``) or an instruction step."""

    id: str
    title: str
    tool: str | None = None
    """The tool to call (tool steps only)."""
    args: dict[str, Json] | None = None
    """The tool's arguments (tool steps only)."""
    instruction: str | None = None
    """What the executor agent does (instruction steps only)."""
    depends_on: list[str] | None = None
    """Steps that must finish first, when the plan declares them."""


class TraceEntry(_Out):
    """What happened when a step ran."""

    step_no: int
    """1-based position of the step in the plan."""
    step_id: str
    tool: str
    args_hash: str
    """Short hash of the arguments."""
    ok: bool
    stop_reason: str | None = None
    """Why the step stopped the run (failed steps only)."""
    error: str | None = None
    """The tool's error or the validation error, when there is one."""
    seconds: float
    """How long the tool call took."""
    attempt: int = 1
    """Which attempt of a retried tool call this is (1 for a call made once)."""


class HistoryEntry(_Out):
    """A finished step and what the tool returned."""

    step_no: int
    plan_step: Step
    observation: Json
    """The tool's return value, as JSON."""


class Approval(_Out):
    """What a paused run waits for a human to approve."""

    kind: ApprovalKind
    digest: str
    """Identifies the plan or the call."""
    subject: dict[str, Json]
    """``{"plan": [...]}``, or ``{"step_id", "tool", "args"}`` of one call."""


class Lease(_Out):
    """Who holds a run now."""

    owner: str
    epoch: int
    expires_at: float
    """Unix time."""


class WorkflowPhase(_Out):
    """One phase of a workflow, with where a run stands at it."""

    name: str
    type: str | None
    description: str
    next: list[str]
    runs: int | None = None
    """How many phase runs it had (in a run's view)."""
    state: Literal["current", "visited", "pending"] | None = None
    """Where the run stands at it (in a run's view)."""


class WorkflowState(_Out):
    """Where a workflow run stands: its phases, their runs and its task list."""

    name: str | None
    """The name the server registers the workflow under; ``null`` if it does not."""
    workflow: str
    phase: str | None
    """The phase the run is at."""
    phases: list[WorkflowPhase]
    history: list[dict[str, Json]]
    """Every phase run, in order."""
    in_flight: Json
    tasks: list[dict[str, Json]] | None
    status_fields: dict[str, Json]


class Workflow(_Out):
    """A workflow clients may run by name."""

    name: str
    workflow: str
    """The workflow definition's own name."""
    start: str
    """Its first phase."""
    phases: list[WorkflowPhase]
    needs_tasks: bool
    """Whether a run must be given a task list."""
    template: bool
    """Whether each run starts from the operator's template folder."""


class WorkflowList(_Out):
    """The workflows this server runs."""

    workflows: list[Workflow]


class RunTreeNode(_Out):
    """A node of a tree run's plan tree, with where the run stands at it."""

    id: int
    parent_id: int | None
    """``null`` for a root of the plan."""
    name: str
    instruction: str
    dependencies: list[int]
    """Nodes this one waits for (with their subtrees)."""
    leaf: bool
    """Whether the run executes the node itself (``false``: its children are)."""
    depth: int
    """0 for the run's root."""
    status: NodeStatus
    """``pending``, ``running``, ``ok``, ``failed``, or ``decomposed`` while a split's
    children run."""
    result: Json
    """The leaf's result or the inner node's roll-up, once ``ok``."""
    reason: str | None
    """Why it failed, or why its last attempt did (a stop reason)."""
    message: str | None
    attempts: int
    """Attempts at it as a leaf that ended without a result."""
    step_no: int | None
    """Its step's number in the run, once it has one."""
    split: str | None
    """Why the run split it, when it did."""


class RunTree(_Out):
    """The plan tree a ``tree`` run works through, below the run's root, in walk order."""

    plan_id: int
    root: int | None
    """The node the run executes; ``null``: every root of the plan."""
    title: str
    """The plan's title."""
    nodes: list[RunTreeNode]


class RunView(_Out):
    """One run: the run result JSON plus what the store knows about it."""

    run_id: str
    status: Status
    stored_status: RunState
    """The status as stored (``status`` adds ``interrupted``)."""
    stop_reason: str | None
    """Why the run ended (``success``, ``max_seconds``, ...); ``null`` while it runs."""
    answer: str | None
    output: Json = None
    """The typed answer, for a run posted with an ``answer_schema``."""
    plan: list[Step] | None
    raw_plan: Json
    """What the model returned, when its plan was invalid."""
    llm_phase: LlmPhase | None
    """Which model call failed, for model failures and model budgets."""
    message: str | None
    """More about the stop, when there is more to say."""
    trace: list[TraceEntry]
    history: list[HistoryEntry]
    usage: Usage
    approval: Approval | None
    """What waits for a human, while the run is paused."""
    goal: str
    model: str | None
    config: dict[str, Json]
    """The run's stored configuration (strategy, options, budget, allow list)."""
    segments: int
    """How many times the run was started (1 + resumes)."""
    started_at: float
    """Unix time."""
    finished_at: float | None
    """Unix time, once ended."""
    queued_at: float | None = None
    """Unix time the run was accepted, when it waited to start."""
    queued_seconds: float | None = None
    """How long the run waited before it started executing."""
    queue_position: int | None = None
    """1 for the next run to start, while the run waits in this server; else ``null``."""
    state: dict[str, Json]
    """The strategy's own checkpointed state."""
    lease: Lease | None
    toolset: str | None
    """The registered name of the run's toolset."""
    active: bool
    """Whether this server executes the run now."""
    workflow: WorkflowState | None = None
    """A workflow run's phases and tasks; ``null`` for other runs."""
    tree: RunTree | None = None
    """A ``tree`` run's plan tree with each node's status and result; ``null`` for other
    runs, and for a tree run until it has started."""


class RunSummary(_Out):
    """One line of the run list."""

    run_id: str
    goal: str
    status: Status
    stored_status: RunState
    stop_reason: str | None
    started_at: float
    finished_at: float | None
    seconds: float | None
    """Wall time from start to finish, once finished."""
    queued_at: float | None = None
    queued_seconds: float | None = None


class RunList(_Out):
    """A page of runs, newest first."""

    runs: list[RunSummary]
    next_cursor: str | None
    """Pass it as ``cursor`` for the next page; ``null`` on the last page."""
    limit: int


class NodeContext(_Out):
    """What a node knows beyond its instruction."""

    combined: str | None
    sections: list[Json]
    meta: dict[str, Json]


class PlanNode(_Out):
    """A stored node of a plan tree."""

    id: int
    plan_id: int
    parent_id: int | None
    """``null`` for a root."""
    position: int
    """0-based order among its siblings."""
    name: str
    instruction: str
    dependencies: list[int]
    """Nodes of the same plan this one needs first."""
    context: NodeContext
    leaf: bool
    """True when the node needs no further decomposition."""


class TreeNode(PlanNode):
    """A node of a plan tree in walk order, with its depth."""

    depth: int
    """0 for a root."""


class Decomposition(_Out):
    """How a decomposition went."""

    plan_id: int
    mode: Mode
    root_node_id: int | None
    """The node decomposed in single-node mode."""
    processed_nodes: list[int]
    created_tasks: list[PlanNode]
    failed_nodes: list[int]
    stopped_reason: str | None
    """``null`` when the decomposition finished, else why it stopped."""
    stats: dict[str, Json]
    """``llm_calls``, ``retries``, ``tokens_in``, ``tokens_out``, ``seconds``, ``failures``..."""


class DecompositionJob(_Out):
    """One decomposition the service runs or ran."""

    job_id: int
    plan_id: int
    mode: Mode
    node_id: int | None
    state: JobState
    started_at: float
    finished_at: float | None
    summary: str | None
    """The result in one sentence."""
    result: Decomposition | None


class PlanTree(_Out):
    """A plan tree: its nodes in walk order and its decompositions."""

    id: int
    title: str
    nodes: list[TreeNode]
    jobs: list[DecompositionJob]


class PlanCreated(PlanTree):
    """A new plan tree, and its decomposition when one started."""

    job: DecompositionJob | None


class PlanSummary(_Out):
    """One line of the plan list."""

    id: int
    title: str
    nodes: int
    """How many nodes the plan has."""
    decomposing: bool


class PlanList(_Out):
    """Plan trees, newest first."""

    plans: list[PlanSummary]
    next_cursor: str | None
    """Pass it as ``cursor`` for the next page; ``null`` on the last page."""
    limit: int


class ChatAction(_Out):
    """What one action of a chat turn did."""

    action: str
    args: dict[str, Json]
    status: Literal["done", "refused", "failed"]
    message: str
    """One sentence about it, also in the reply."""
    reason: str | None = None
    """Why it was refused (``unknown_action``, ``bad_args:<field>``, ...)."""
    result: Json = None
    """What it returned (a run, a plan tree, a decomposition), when done."""


class ChatTurn(_Out):
    """One turn of the chat agent."""

    conversation_id: str
    reply: str
    actions: list[ChatAction]


class Tool(_Out):
    """One tool of a toolset."""

    name: str
    description: str
    args: dict[str, Json]
    """The JSON schema of its arguments."""


class Toolset(_Out):
    """A toolset runs may use."""

    name: str
    tools: list[Tool]


class ToolsetList(_Out):
    """The toolsets runs may use."""

    toolsets: list[Toolset]


class ModelList(_Out):
    """The models runs may use."""

    models: list[str]
    default: str
    """The model a run gets when it names none."""
    chat: bool
    """Whether the chat agent is on."""


class Health(_Out):
    """Whether the server takes work."""

    ok: bool


class RunEvent(_Out):
    """A message of a run's event stream: one stored event (the SSE ``id`` is ``seq``)."""

    seq: int
    """The event's per-run sequence number."""
    kind: str
    """``RunStarted``, ``ModelCalled``, ``StepFinished``, ``RunStopped``, ... (the SSE event)."""
    at: float
    """Unix time."""
    data: dict[str, Json]
    """What the event says; its keys depend on its kind."""


class RunStreamEnd(_Out):
    """The ``end`` message of a run's event stream: the run ended, every event was sent."""

    status: RunState
    last_seq: int
    """The sequence number of the run's last event."""


class NodesRemoved(_Out):
    """The ``removed`` message of a plan's event stream."""

    node_ids: list[int]


class PlanStreamEnd(_Out):
    """The ``end`` message of a plan's event stream."""

    reason: str


class FieldError(_Out):
    """One invalid field of a request."""

    loc: list[str]
    """Where: ``body``, ``query`` or ``path``, then the field's path."""
    msg: str


class ProblemDocument(_Out):
    """An error (RFC 9457 problem details), sent as ``application/problem+json``."""

    model_config = ConfigDict(title="Problem", extra="allow")

    type: str
    """``about:blank``: the status says what kind of problem it is."""
    title: str
    """The status's phrase."""
    status: int
    detail: str
    """What went wrong and how to fix it, on one line."""
    errors: list[FieldError] | None = None
    """Every invalid field (422 from request validation only)."""
