"""What the MCP tools take and give back: their typed inputs and strict-JSON outputs.

The SDK derives each tool's ``inputSchema`` from its parameters and its ``outputSchema``
from the model it returns, so a client sees these types, and every answer is also sent as
``structuredContent``. Values that come from a run (answers, typed outputs, tree nodes)
pass :mod:`taskdecomp.jsonsafe` first: no NaN or infinity reaches a client.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from taskdecomp import jsonsafe
from taskdecomp.run import RunResult
from taskdecomp.store.base import StoredRun


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BudgetIn(BaseModel):
    """Limits of one run; a field left out keeps the server's default."""

    model_config = ConfigDict(extra="forbid")

    max_plan_steps: int | None = Field(default=None, ge=1, le=1000)
    max_execute_steps: int | None = Field(default=None, ge=1, le=10_000)
    max_tool_calls: int | None = Field(default=None, ge=1, le=10_000)
    max_seconds: float | None = Field(default=None, gt=0, le=86_400)
    max_llm_calls: int | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, ge=0)
    max_cost_usd: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    max_parallel: int | None = Field(default=None, ge=1, le=64)
    min_plan_steps: int | None = Field(default=None, ge=1, le=1000)

    def given(self) -> dict[str, Any]:
        """The fields the client set."""
        return {name: value for name, value in self.model_dump().items() if value is not None}


class StepOut(_Out):
    """One step of a run's plan and how far it got."""

    id: str
    title: str
    tool: str | None
    status: Literal["done", "failed", "pending"]
    """``done``: its result is stored; ``failed``: its last call failed; else ``pending``."""


class ApprovalOut(_Out):
    """What a paused run waits for."""

    approval_id: str
    """Identifies the plan or the call; ``approve`` and ``reject`` may name it."""
    kind: Literal["plan", "tool"]
    """A plan to approve before it runs, or one tool call."""
    subject: dict[str, Any]
    """``{"plan": [...]}`` or ``{"step_id", "tool", "args"}`` (secrets replaced)."""


class UsageOut(_Out):
    """What a run spent."""

    llm_calls: int
    tool_calls: int
    tokens_in: int
    tokens_out: int
    cost_usd: float | None
    seconds: float


class RunOut(_Out):
    """A run: its state, its answer when it ended, what it waits for while paused."""

    run_id: str
    goal: str | None = None
    status: Literal["queued", "running", "ok", "stopped", "paused"]
    """``ok``, ``stopped`` or ``paused`` once it ended or waits; ``running`` meanwhile."""
    stop_reason: str | None
    """Why it ended (``success``, ``tool_error:fetch``, ``awaiting_approval``, ...)."""
    answer: str | None = None
    output: Any = None
    """The typed answer, when the run was given an ``answer_schema``."""
    message: str | None = None
    """More about the stop, when there is more to say."""
    steps: list[StepOut] = Field(default_factory=list)
    approval: ApprovalOut | None = None
    usage: UsageOut | None = None

    @classmethod
    def of(cls, result: RunResult, *, goal: str | None = None) -> RunOut:
        """The view of a run's result."""
        done = {entry.plan_step.id for entry in result.history}
        failed = {entry.step_id for entry in result.trace if not entry.ok} - done
        steps = [
            StepOut(
                id=step.id,
                title=step.title,
                tool=step.tool,
                status="done" if step.id in done else "failed" if step.id in failed else "pending",
            )
            for step in (result.plan.steps if result.plan is not None else ())
        ]
        return cls(
            run_id=result.run_id,
            goal=goal,
            status=result.status,
            stop_reason=result.stop_reason,
            answer=result.answer,
            output=strict(result.to_dict()["output"]),
            message=result.message,
            steps=steps,
            approval=_approval(result.approval),
            usage=UsageOut.model_validate(result.usage, from_attributes=True),
        )

    @classmethod
    def stored(cls, stored: StoredRun) -> RunOut:
        """The view of a stored run, ended or not."""
        summary = stored.summary
        if summary.stop_reason is not None:
            return cls.of(stored.result(), goal=summary.goal)
        return cls(
            run_id=summary.run_id,
            goal=summary.goal,
            status=summary.status,
            stop_reason=None,
            steps=[
                StepOut(
                    id=step.id,
                    title=step.title,
                    tool=step.tool,
                    status="done" if step.id in stored.finished_steps() else "pending",
                )
                for step in (stored.plan.steps if stored.plan is not None else ())
            ],
        )


def _approval(raw: dict[str, Any] | None) -> ApprovalOut | None:
    if not raw or raw.get("kind") not in ("plan", "tool"):
        return None
    return ApprovalOut(
        approval_id=str(raw.get("digest")), kind=raw["kind"], subject=strict(raw["subject"])
    )


class TreeOut(_Out):
    """A stored plan tree: its nodes in walk order, each with its depth."""

    plan_id: int
    title: str
    nodes: list[dict[str, Any]]
    """``id``, ``parent_id``, ``name``, ``instruction``, ``leaf``, ``depth``, ..."""


class DecomposeOut(_Out):
    """A new plan tree and how its decomposition went."""

    plan_id: int
    tree: TreeOut
    created: int
    """Nodes the decomposition created."""
    failed_nodes: list[int]
    """Nodes it could not decompose."""
    stopped_reason: str | None
    """Why it stopped early (``max_seconds``, a node budget), if it did."""
    summary: str | None
    """One line in plain words."""


def strict(value: Any) -> Any:
    """``value`` as strict JSON data: a NaN or an infinity is refused, not sent.

    Raises:
        StrictJSONError: ``value`` has no strict JSON form.
    """
    return json.loads(jsonsafe.dumps(value))
