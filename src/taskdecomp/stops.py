"""Stop reasons: the one list of ways a run can end.

Every run ends with exactly one stop reason, a string of the form ``family`` or
``family:detail`` (``success``, ``max_tool_calls``, ``tool_denied:fetch_sales``,
``invalid_plan:step_2_missing_tool``). The seed's codes are kept verbatim; new codes
follow the same form. :data:`CODES` documents every family, and :func:`is_known`
tells whether a string is one of them.

:class:`StopRun` is the signal that carries a stop reason from deep inside the engine to
the strategy that turns it into a result. It is not an error: it lives outside the
exception tree in :mod:`taskdecomp.errors` and never escapes a public entry point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NewType

StopReason = NewType("StopReason", str)
"""A stop reason such as ``success`` or ``tool_error:fetch_sales_data``."""

LlmPhase = Literal["plan", "finalize", "decompose", "replan", "execute", "rollup", "chat"]
"""The model call a model failure happened in (the seed's ``llm_phase``): ``replan`` is the
replanner, ``execute`` a turn of the executor agent, ``rollup`` the combination of a plan
tree node's children, ``chat`` the service's chat agent."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StopCode:
    """One family of stop reasons, as listed in the docs."""

    family: str
    """The part before the first colon, e.g. ``tool_denied``."""
    detail: str | None
    """What follows the colon (``<name>``, ``<kind>``), or ``None`` for a bare code."""
    meaning: str
    """One sentence for the docs table."""


CODES: tuple[StopCode, ...] = (
    StopCode(family="success", detail=None, meaning="The plan ran and the answer was combined."),
    StopCode(
        family="invalid_plan",
        detail="<rule>",
        meaning="The model's plan failed the policy boundary; see `raw_plan`.",
    ),
    StopCode(
        family="max_execute_steps",
        detail=None,
        meaning="The plan has more steps than the execution budget allows.",
    ),
    StopCode(family="max_tool_calls", detail=None, meaning="The tool-call budget is spent."),
    StopCode(
        family="max_seconds",
        detail=None,
        meaning="The run's deadline passed; in-flight work was cancelled.",
    ),
    StopCode(family="max_llm_calls", detail=None, meaning="The model-call budget is spent."),
    StopCode(
        family="max_tokens",
        detail=None,
        meaning="A model call would exceed, or did exceed, the token budget.",
    ),
    StopCode(
        family="max_cost",
        detail=None,
        meaning="A model call would exceed, or did exceed, the cost budget (USD).",
    ),
    StopCode(
        family="llm_timeout",
        detail=None,
        meaning="The model did not answer in time; see `llm_phase`.",
    ),
    StopCode(
        family="llm_empty",
        detail=None,
        meaning="The model returned an empty answer; see `llm_phase`.",
    ),
    StopCode(
        family="llm_error",
        detail="<kind>",
        meaning="The model call failed for another reason (auth, bad request, exhausted script).",
    ),
    StopCode(family="tool_denied", detail="<name>", meaning="The tool is not on the allowlist."),
    StopCode(
        family="tool_missing",
        detail="<name>",
        meaning="The tool is allowed but no toolset provides it.",
    ),
    StopCode(
        family="tool_bad_args",
        detail="<name>",
        meaning="The step's arguments do not match the tool's signature.",
    ),
    StopCode(family="tool_error", detail="<name>", meaning="The tool raised; see the trace."),
    StopCode(
        family="tool_timeout",
        detail="<name>",
        meaning="The tool ran longer than its `@tool(timeout=...)`.",
    ),
    StopCode(
        family="loop_detected",
        detail=None,
        meaning="The same tool was called twice with the same arguments.",
    ),
    StopCode(family="cancelled", detail=None, meaning="The caller cancelled the run."),
    StopCode(
        family="interrupted_unknown_outcome",
        detail="<step>",
        meaning="On resume, an `unsafe` step had started but left no result; it is not "
        "called again, a human decides.",
    ),
    StopCode(
        family="max_nodes",
        detail=None,
        meaning="Decomposition: the node budget is spent; nodes were left undecomposed.",
    ),
    StopCode(
        family="max_depth",
        detail=None,
        meaning="Decomposition: nodes at the depth limit were left undecomposed.",
    ),
    StopCode(
        family="invalid_children",
        detail="<rule>",
        meaning="Decomposition: a node's answer failed the policy boundary (the node fails).",
    ),
    StopCode(
        family="store_error",
        detail="<kind>",
        meaning="Decomposition: writing a node's children failed; none of them was kept.",
    ),
    StopCode(
        family="max_iterations",
        detail=None,
        meaning="Replan: the execute/replan rounds (`max_iterations`) are spent; workflow: "
        "the phase runs are.",
    ),
    StopCode(
        family="max_agent_turns",
        detail="<step>",
        meaning="Replan: the executor agent used all its turns on this step without finishing.",
    ),
    StopCode(
        family="invalid_replan",
        detail="<rule>",
        meaning="Replan: the replanner's answer is neither a valid respond nor a valid plan.",
    ),
    StopCode(
        family="invalid_action",
        detail="<rule>",
        meaning="Replan: an executor agent's action failed the policy boundary.",
    ),
    StopCode(
        family="invalid_answer",
        detail="<rule>",
        meaning="The answer does not match the run's answer type (`output_type`, "
        "`--answer-schema`); see `message`.",
    ),
    StopCode(
        family="bad_ref",
        detail="<step>",
        meaning="A step's `$ref` argument names a step it does not depend on, or does not "
        "resolve; the tool was not called.",
    ),
    StopCode(
        family="awaiting_approval",
        detail=None,
        meaning="The run is paused until a human approves the plan or a tool call "
        "(`taskdecomp approve` / `reject`).",
    ),
    StopCode(
        family="approval_rejected",
        detail=None,
        meaning="A human rejected the plan or the tool call; see `message`.",
    ),
    StopCode(
        family="workflow_stuck",
        detail="<phase>",
        meaning="Workflow: no transition of this phase holds, or it has no task to work on.",
    ),
    StopCode(
        family="task_failed",
        detail="<task>",
        meaning="Workflow: the task failed its spec check more often than `max_task_retries`.",
    ),
    StopCode(
        family="commit_failed",
        detail="<task>",
        meaning="Workflow: git refused to commit the passed task's files; see `message`.",
    ),
    StopCode(
        family="out_of_scope_write",
        detail="<phase>",
        meaning="Workflow: a phase outside the task loop changed files it may not write "
        "(the paths are in `message`).",
    ),
    StopCode(
        family="poisoned",
        detail=None,
        meaning="Queue: the run's workers died running it more often than `max_recoveries`; "
        "it was parked instead of taking more of them down.",
    ),
    StopCode(
        family="unavailable",
        detail="<name>",
        meaning="Queue: the worker has no toolset or model registered under this name.",
    ),
    StopCode(
        family="invalid_tree",
        detail="<rule>",
        meaning="Tree: the plan tree cannot be worked through (`cycle`: nodes wait for each "
        "other; `unknown_dependency`: a dependency names no node of the plan; `empty`, "
        "`no_plan`, `no_node`); nothing ran.",
    ),
    StopCode(
        family="node_failed",
        detail="<node>",
        meaning="Tree: this node failed after its retries and splits, and so did every "
        "node above it up to the run's root; finished nodes keep their results.",
    ),
    StopCode(
        family="lease_lost",
        detail=None,
        meaning="Another process took the run over after this one's lease expired; this "
        "process stopped without writing, and the store keeps the new owner's outcome.",
    ),
)
"""Every family of stop reasons, in the order the docs list them."""

_FAMILIES = {code.family: code for code in CODES}

SUCCESS = StopReason("success")
MAX_EXECUTE_STEPS = StopReason("max_execute_steps")
MAX_TOOL_CALLS = StopReason("max_tool_calls")
MAX_SECONDS = StopReason("max_seconds")
MAX_LLM_CALLS = StopReason("max_llm_calls")
MAX_TOKENS = StopReason("max_tokens")
MAX_COST = StopReason("max_cost")
LLM_TIMEOUT = StopReason("llm_timeout")
LLM_EMPTY = StopReason("llm_empty")
LOOP_DETECTED = StopReason("loop_detected")
CANCELLED = StopReason("cancelled")
MAX_ITERATIONS = StopReason("max_iterations")
AWAITING_APPROVAL = StopReason("awaiting_approval")
APPROVAL_REJECTED = StopReason("approval_rejected")
LEASE_LOST = StopReason("lease_lost")
POISONED = StopReason("poisoned")


def with_detail(family: str, detail: str) -> StopReason:
    """Build ``family:detail``, checking that the family takes a detail.

    Raises:
        ValueError: if ``family`` is unknown or is a bare code.
    """
    code = _FAMILIES.get(family)
    if code is None or code.detail is None:
        raise ValueError(f"stop family {family!r} does not take a detail")
    return StopReason(f"{family}:{detail}")


def invalid_plan(rule: str) -> StopReason:
    """``invalid_plan:<rule>``, e.g. ``invalid_plan:min_steps``."""
    return with_detail("invalid_plan", rule)


def interrupted_unknown_outcome(step_id: str) -> StopReason:
    """``interrupted_unknown_outcome:<step>``: an unsafe step's outcome is unknown."""
    return with_detail("interrupted_unknown_outcome", step_id)


def is_known(reason: str) -> bool:
    """Whether ``reason`` belongs to one of the families in :data:`CODES`."""
    family, sep, detail = reason.partition(":")
    code = _FAMILIES.get(family)
    if code is None:
        return False
    return bool(detail) if code.detail is not None else not sep


class StopRun(Exception):
    """Signal that ends the current run with ``reason``.

    Args:
        reason: the stop reason.
        llm_phase: the model call that failed, for ``llm_*`` and model budget stops.
        message: a human-readable explanation, kept in the trace.
    """

    def __init__(
        self, reason: StopReason, *, llm_phase: LlmPhase | None = None, message: str = ""
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.llm_phase = llm_phase
        self.message = message
