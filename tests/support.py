"""Builders shared by the engine tests."""

from __future__ import annotations

from typing import Any

from taskdecomp import ModelRequest, ModelResponse

SEED_GOAL = (
    "Prepare an April 2026 monthly sales summary for manager_id=42 in USD. "
    "Use step-by-step decomposition. Include gross sales, refunds, net sales, refund rate, "
    "and one risk note."
)

SEED_TOOLS = (
    "fetch_sales_data",
    "fetch_refund_data",
    "calculate_monthly_kpis",
    "detect_risk_signals",
    "get_manager_profile",
)


def step(n: int, tool: str, args: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """One planner step in the seed's JSON shape."""
    return {"id": f"step_{n}", "title": f"Step {n}", "tool": tool, "args": args or {}, **extra}


def seed_plan(manager_id: int = 42) -> dict[str, Any]:
    """The seed's sample plan for April 2026."""
    month = {"month": "2026-04"}
    return {
        "kind": "plan",
        "steps": [
            step(1, "fetch_sales_data", month),
            step(2, "fetch_refund_data", month),
            step(3, "calculate_monthly_kpis", month),
            step(4, "detect_risk_signals", month),
            step(5, "get_manager_profile", {"manager_id": manager_id}),
        ],
    }


def plan_of(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "plan", "steps": list(steps)}


class FixedModel:
    """A model that always returns one response object (for finish_reason and cost)."""

    def __init__(self, *responses: ModelResponse) -> None:
        self._responses = list(responses)
        self.calls: list[ModelRequest] = []

    @property
    def name(self) -> str:
        return "fixed"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls.append(request)
        return self._responses.pop(0)
