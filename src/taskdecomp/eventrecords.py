"""What a stored event keeps of an event: its type name, the time, and a few JSON fields.

The store keeps every event of a run with the checkpoint it describes; the command line,
the event stream and the web page read them back. An event's record holds what a reader
needs (a step's number and tool, a model call's tokens), not the whole event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, assert_never

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
    """The JSON fields a stored record of ``event`` keeps."""
    if isinstance(event, RunStarted):
        return {}
    if isinstance(event, ModelProgress):
        return {"phase": event.phase, "stage": event.stage, "tokens_out": event.tokens_out}
    if isinstance(event, ModelCalled):
        return {
            "phase": event.phase,
            "ok": event.ok,
            "tokens_in": event.tokens_in,
            "tokens_out": event.tokens_out,
            "seconds": round(event.seconds, 6),
            **({"estimated": True} if event.estimated else {}),
        }
    if isinstance(event, AnswerDelta):
        return {"text": event.text, "attempt": event.attempt}
    if isinstance(event, PlanCreated):
        return {"steps": len(event.plan.steps)}
    if isinstance(event, PlanRepaired):
        return {
            "phase": event.phase,
            "rule": event.rule,
            "message": _cut(event.message),
            "attempt": event.attempt,
        }
    if isinstance(event, StepStarted):
        return {"step_no": event.step_no, "step_id": event.step.id, "tool": event.step.tool}
    if isinstance(event, StepFinished):
        return _short(event.entry.to_dict())
    return _replan_event_data(event)


def _replan_event_data(
    event: ReplanDecided
    | PlanRevised
    | AgentTurn
    | NodeStarted
    | NodeFinished
    | NodeDecomposed
    | ApprovalRequested
    | ApprovalDecided
    | RunStopped,
) -> Mapping[str, Any]:
    if isinstance(event, NodeStarted | NodeFinished | NodeDecomposed):
        return _node_event_data(event)
    if isinstance(event, ReplanDecided):
        return {"iteration": event.iteration, "kind": event.kind}
    if isinstance(event, PlanRevised):
        return {
            "iteration": event.iteration,
            "steps": len(event.plan.steps),
            "changed": event.changed,
        }
    if isinstance(event, AgentTurn):
        return {
            "step_no": event.step_no,
            "step_id": event.step_id,
            "turn": event.turn,
            "action": event.action,
            "tool": event.tool,
        }
    if isinstance(event, ApprovalRequested):
        return {"kind": event.request.kind, "digest": event.request.digest}
    if isinstance(event, ApprovalDecided):
        return {
            "digest": event.digest,
            "approved": event.approved,
            "reason": event.reason,
            "edited": event.edited,
        }
    if isinstance(event, RunStopped):
        return {"status": event.result.status, "stop_reason": event.result.stop_reason}
    assert_never(event)


def _node_event_data(event: NodeStarted | NodeFinished | NodeDecomposed) -> Mapping[str, Any]:
    if isinstance(event, NodeStarted):
        return {
            "node_id": event.node_id,
            "name": event.name,
            "parent_id": event.parent_id,
            "leaf": event.leaf,
        }
    if isinstance(event, NodeFinished):
        return _short(
            {
                "node_id": event.node_id,
                "status": event.status,
                "result": _cut(event.result),
                "error": event.reason,
            }
        )
    return {"node_id": event.node_id, "children": list(event.children), "reason": event.reason}


def _cut(value: Any) -> Any:
    """``value`` as a stored event keeps it: long text is cut (the run keeps it whole)."""
    if isinstance(value, str) and len(value) > MAX_STORED_ERROR_CHARS:
        return value[:MAX_STORED_ERROR_CHARS] + " [cut]"
    return value


def _short(data: dict[str, Any]) -> dict[str, Any]:
    if "error" in data:
        data["error"] = _cut(data["error"])
    return data
