"""What a stored event keeps of an event: its type name, the time, and a few JSON fields.

The store keeps every event of a run with the checkpoint it describes; the command line,
the event stream and the web page read them back. An event's record holds what a reader
needs (a step's number and tool, a model call's tokens), not the whole event.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from taskdecomp.events import (
    AgentTurn,
    AnswerDelta,
    ApprovalDecided,
    ApprovalRequested,
    Event,
    ModelCalled,
    ModelProgress,
    NodeDecomposed,
    NodeFinished,
    NodeStarted,
    PlanCreated,
    PlanRepaired,
    PlanRevised,
    ReplanDecided,
    RunStarted,
    RunStopped,
    StepFinished,
    StepStarted,
)

MAX_STORED_ERROR_CHARS = 100_000
"""A stored error message longer than this is cut (the run's own result keeps it whole)."""


def event_data(event: Event) -> Mapping[str, Any]:
    """The JSON fields a stored record of ``event`` keeps.

    Raises:
        TypeError: ``event`` is not an :data:`~taskdecomp.events.Event` (nor a subclass of one).
    """
    fields = _DATA.get(type(event))
    if fields is None:  # a subclass of an event type
        kinds = (kind for kind in type(event).__mro__ if kind in _DATA)
        fields = _DATA.get(next(kinds, object))
        if fields is None:
            raise TypeError(f"not an event: {type(event).__name__}")
    return fields(event)


def _model_called(event: ModelCalled) -> Mapping[str, Any]:
    return {
        "phase": event.phase,
        "ok": event.ok,
        "tokens_in": event.tokens_in,
        "tokens_out": event.tokens_out,
        "seconds": round(event.seconds, 6),
        **({"estimated": True} if event.estimated else {}),
    }


def _plan_repaired(event: PlanRepaired) -> Mapping[str, Any]:
    return {
        "phase": event.phase,
        "rule": event.rule,
        "message": _cut(event.message),
        "attempt": event.attempt,
    }


def _plan_revised(event: PlanRevised) -> Mapping[str, Any]:
    return {"iteration": event.iteration, "steps": len(event.plan.steps), "changed": event.changed}


def _picked(*names: str) -> Callable[[Any], Mapping[str, Any]]:
    """The record of an event type that keeps these fields of the event as they are."""
    return lambda event: {name: getattr(event, name) for name in names}


def _node_finished(event: NodeFinished) -> Mapping[str, Any]:
    return _short(
        {
            "node_id": event.node_id,
            "status": event.status,
            "result": _cut(event.result),
            "error": event.reason,
        }
    )


_DATA: dict[type[Any], Callable[[Any], Mapping[str, Any]]] = {
    RunStarted: lambda event: {},
    ModelProgress: _picked("phase", "stage", "tokens_out"),
    ModelCalled: _model_called,
    AnswerDelta: _picked("text", "attempt"),
    PlanCreated: lambda event: {"steps": len(event.plan.steps)},
    PlanRepaired: _plan_repaired,
    StepStarted: lambda e: {"step_no": e.step_no, "step_id": e.step.id, "tool": e.step.tool},
    StepFinished: lambda event: _short(event.entry.to_dict()),
    ReplanDecided: _picked("iteration", "kind"),
    PlanRevised: _plan_revised,
    AgentTurn: _picked("step_no", "step_id", "turn", "action", "tool"),
    NodeStarted: _picked("node_id", "name", "parent_id", "leaf"),
    NodeFinished: _node_finished,
    NodeDecomposed: lambda e: {
        "node_id": e.node_id,
        "children": list(e.children),
        "reason": e.reason,
    },
    ApprovalRequested: lambda e: {"kind": e.request.kind, "digest": e.request.digest},
    ApprovalDecided: _picked("digest", "approved", "reason", "edited"),
    RunStopped: lambda e: {"status": e.result.status, "stop_reason": e.result.stop_reason},
}
"""What each event type's record keeps, looked up by type: an event is recorded many times
a run, and a chain of ``isinstance`` checks cost more than the record. Every type of
:data:`~taskdecomp.events.Event` has an entry (a test checks)."""


def _cut(value: Any) -> Any:
    """``value`` as a stored event keeps it: long text is cut (the run keeps it whole)."""
    if isinstance(value, str) and len(value) > MAX_STORED_ERROR_CHARS:
        return value[:MAX_STORED_ERROR_CHARS] + " [cut]"
    return value


def _short(data: dict[str, Any]) -> dict[str, Any]:
    if "error" in data:
        data["error"] = _cut(data["error"])
    return data
