"""Runs: one execution of a plan, and its result.

The result keeps the seed's JSON contract (``status``, ``stop_reason``, ``answer``,
``plan``, ``raw_plan``, ``llm_phase``, ``trace``, ``history``) plus ``run_id`` and
``usage``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Literal, NewType

from taskdecomp.budget import Usage
from taskdecomp.plan import Plan, Step, TaskId
from taskdecomp.stops import LlmPhase, StopReason

RunId = NewType("RunId", str)
"""The id of a run."""

RunStatus = Literal["ok", "stopped", "paused"]
"""``ok`` when the stop reason is ``success``, ``paused`` while the run waits for a human
(``awaiting_approval``), else ``stopped`` (the seed's values, plus ``paused``)."""


def new_run_id() -> RunId:
    """A fresh, unique run id (32 hex characters)."""
    return RunId(uuid.uuid4().hex)


@dataclass(frozen=True, kw_only=True, slots=True)
class TraceEntry:
    """What happened when a step ran (the seed's trace entry, plus timing and errors)."""

    step_no: int
    """1-based position of the step in the plan."""
    step_id: TaskId
    tool: str
    args_hash: str
    """Short hash of the arguments (loop detection uses tool + this)."""
    ok: bool
    stop_reason: StopReason | None = None
    """Why the step stopped the run, when ``ok`` is false."""
    error: str | None = None
    """The tool's error message or the validation error, when there is one."""
    seconds: float = 0.0
    """How long the tool call took."""
    attempt: int = 1
    """Which attempt at the call this is, from 1: a tool with retries may make several, one
    entry each (written only when above 1, so a call made once keeps the seed's shape)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form; keys that do not apply are left out, as the seed does."""
        data: dict[str, Any] = {
            "step_no": self.step_no,
            "step_id": self.step_id,
            "tool": self.tool,
            "args_hash": self.args_hash,
            "ok": self.ok,
        }  # built by hand: asdict's deep copy is most of a checkpoint's encoding time
        if self.stop_reason is not None:
            data["stop_reason"] = self.stop_reason
        if self.error is not None:
            data["error"] = self.error
        data["seconds"] = self.seconds
        if self.attempt != 1:
            data["attempt"] = self.attempt
        return data


@dataclass(frozen=True, kw_only=True, slots=True)
class HistoryEntry:
    """A finished step and the tool's observation (the seed's history entry)."""

    step_no: int
    plan_step: Step
    observation: Any
    """The tool's return value, made JSON-safe."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "step_no": self.step_no,
            "plan_step": self.plan_step.to_dict(),
            "observation": self.observation,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class RunResult:
    """How a run ended. Every run ends with one of these, never with an exception."""

    run_id: RunId
    status: RunStatus
    stop_reason: StopReason
    answer: str | None = None
    """The combined answer, on success (with an answer type: its JSON text)."""
    output: Any = None
    """The typed answer, on success of a run with an answer type (``output_type=``): an
    instance of the pydantic model class given, else the JSON value. ``None`` without one."""
    plan: Plan | None = None
    """The validated plan, when planning got that far."""
    raw_plan: Any = None
    """What the model returned, when the plan was invalid."""
    llm_phase: LlmPhase | None = None
    """Which model call failed, for model failures and model budgets."""
    message: str | None = None
    """A human-readable explanation of the stop, when there is more to say."""
    trace: tuple[TraceEntry, ...] = ()
    history: tuple[HistoryEntry, ...] = ()
    usage: Usage = field(default_factory=Usage)
    approval: dict[str, Any] | None = None
    """What waits for a human (``kind``, ``digest``, ``subject``), while ``paused``."""

    @property
    def ok(self) -> bool:
        """Whether the run succeeded."""
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """The seed's result JSON plus ``run_id``, ``usage``, ``message`` and ``output``."""
        return {
            "run_id": self.run_id,
            "status": self.status,
            "stop_reason": self.stop_reason,
            "answer": self.answer,
            "output": json_output(self.output),
            "plan": self.plan.to_list() if self.plan is not None else None,
            "raw_plan": self.raw_plan,
            "llm_phase": self.llm_phase,
            "message": self.message,
            "trace": [entry.to_dict() for entry in self.trace],
            "history": [entry.to_dict() for entry in self.history],
            "usage": self.usage.to_dict(),
            "approval": self.approval,
        }


def json_output(output: Any) -> Any:
    """A typed answer as JSON: a pydantic instance dumped, a JSON value as it is."""
    dump = getattr(output, "model_dump", None)
    return dump(mode="json") if callable(dump) else output
