"""One event stream for everything that watches a run: the CLI, the store, the service.

Events are frozen records. :class:`EventBus` hands each one to its subscribers in order; a
subscriber that raises is logged and the run goes on, so a broken display can never change
how a run ends. With a :class:`~taskdecomp.redact.Redactor`, every subscriber (the journal,
the CLI, the service, telemetry) gets the event with its secrets replaced.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from taskdecomp.plan import Plan, Step
from taskdecomp.stops import LlmPhase

if TYPE_CHECKING:
    from taskdecomp.approvals import ApprovalRequest
    from taskdecomp.redact import Redactor
    from taskdecomp.run import RunId, RunResult, TraceEntry

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class RunStarted:
    """A run began."""

    run_id: RunId
    goal: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelProgress:
    """A model call is under way: it started, its model file is loading, or it wrote tokens.

    Live only: it feeds displays and is never stored. ``ModelCalled`` follows when the call
    ends, however it ends.
    """

    run_id: RunId
    phase: LlmPhase
    model: str
    """The model's name (``local``, ``openai:gpt-4.1-mini``)."""
    stage: Literal["started", "loading", "generating"]
    tokens_out: int = 0
    """Tokens written so far, when the provider streams."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelCalled:
    """A model call finished (successfully or not)."""

    run_id: RunId
    phase: LlmPhase
    ok: bool
    tokens_in: int
    tokens_out: int
    seconds: float
    estimated: bool = False
    """The token counts are estimated: the server sent none."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AnswerDelta:
    """A piece of the answer, as a streaming model writes it in the combine call.

    The pieces of one ``attempt`` concatenate to that attempt's answer text; a repaired
    answer starts again at ``attempt`` 2, whose pieces replace the first attempt's.
    Stored with the run (the service's event stream carries them), the pieces that arrive
    between two checkpoints as one record.
    """

    run_id: RunId
    text: str
    attempt: int = 1
    """From 1; a new attempt replaces the text of the one before."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanCreated:
    """The plan passed the policy boundary."""

    run_id: RunId
    plan: Plan


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanRepaired:
    """A model answer failed the policy boundary and was sent back with the rule it broke.

    The model is asked again in the same phase (one more model call); ``attempt`` counts
    the repairs of this answer, from 1.
    """

    run_id: RunId
    phase: LlmPhase
    """The call whose answer was refused (``plan``, ``replan``, ``execute``, ...)."""
    rule: str
    """The stop reason the answer would have ended the run with, e.g. ``invalid_plan:cycle``."""
    message: str
    """What broke it and what is allowed, as the model was told."""
    attempt: int


@dataclass(frozen=True, kw_only=True, slots=True)
class StepStarted:
    """A step is about to call its tool."""

    run_id: RunId
    step_no: int
    step: Step


@dataclass(frozen=True, kw_only=True, slots=True)
class StepFinished:
    """A step's tool call ended; ``entry.ok`` says how."""

    run_id: RunId
    entry: TraceEntry
    observation: Any = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplanDecided:
    """The replanner answered after a wave: ``respond`` (the answer) or a revised ``plan``."""

    run_id: RunId
    iteration: int
    """The execute/replan round, from 1."""
    kind: str
    """``respond`` or ``plan``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanRevised:
    """A revised plan (the remaining steps) passed the policy boundary."""

    run_id: RunId
    iteration: int
    plan: Plan
    changed: bool
    """Whether it differs from the steps that were left."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentTurn:
    """The executor agent chose an action for an instruction step."""

    run_id: RunId
    step_no: int
    step_id: str
    turn: int
    """From 1; at most the agent's turn limit."""
    action: str
    """``call``, ``finish`` or ``decompose`` (a ``tree`` leaf asks to be split)."""
    tool: str | None = None
    """The tool of a ``call``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeStarted:
    """A node of a plan tree started: a leaf's executor, or an inner node's children."""

    run_id: RunId
    node_id: int
    name: str
    parent_id: int | None
    leaf: bool
    """Whether the node is executed itself (``False``: its children are)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeFinished:
    """A node of a plan tree ended: ``ok`` with its result, or ``failed``."""

    run_id: RunId
    node_id: int
    status: str
    """``ok`` or ``failed``."""
    result: Any = None
    """The leaf's result or the inner node's roll-up; ``None`` when it failed."""
    reason: str | None = None
    """Why it failed (a stop reason)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeDecomposed:
    """A node was split as needed: its children were written into the stored tree."""

    run_id: RunId
    node_id: int
    children: tuple[int, ...]
    reason: str
    """Why it was split: the executor asked, or how its attempt failed."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalRequested:
    """The run paused: a plan or a tool call waits for a human."""

    run_id: RunId
    request: ApprovalRequest


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalDecided:
    """A human approved or rejected what was pending."""

    run_id: RunId
    digest: str
    approved: bool
    reason: str | None = None
    edited: bool = False
    """Whether the human replaced the plan with an edited one."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunStopped:
    """The run ended (any stop reason, including success)."""

    run_id: RunId
    result: RunResult


Event = (
    RunStarted
    | ModelProgress
    | ModelCalled
    | AnswerDelta
    | PlanCreated
    | PlanRepaired
    | StepStarted
    | StepFinished
    | ReplanDecided
    | PlanRevised
    | AgentTurn
    | NodeStarted
    | NodeFinished
    | NodeDecomposed
    | ApprovalRequested
    | ApprovalDecided
    | RunStopped
)
"""Every event type."""

Subscriber = Callable[[Event], None]


class EventBus:
    """Delivers events to subscribers, synchronously and in order.

    Args:
        subscribers: receive every event.
        redactor: replaces secrets in each event before any subscriber sees it.
    """

    def __init__(
        self, subscribers: list[Subscriber] | None = None, *, redactor: Redactor | None = None
    ) -> None:
        self._subscribers: list[Subscriber] = list(subscribers or [])
        self._redact = redactor.value if redactor else None

    def subscribe(self, subscriber: Subscriber) -> None:
        """Add a subscriber; it receives every later event."""
        self._subscribers.append(subscriber)

    def emit(self, event: Event) -> None:
        """Hand ``event`` to every subscriber; a failing subscriber is logged, not raised."""
        if self._redact is not None:
            event = self._redact(event)
        for subscriber in self._subscribers:
            try:
                subscriber(event)
            except Exception:
                logger.exception("event subscriber %r failed on %s", subscriber, type(event))
