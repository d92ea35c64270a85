"""Property tests: whatever the model says, the engine ends cleanly and never acts on a bad plan."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taskdecomp import Budget, ScriptedModel, StopRun, is_known, run_sync, validate_plan_action
from tests.support import SEED_GOAL, SEED_TOOLS, seed_plan

scalars = st.none() | st.booleans() | st.integers(-5, 50) | st.text(max_size=6)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)
keys = st.sampled_from(["kind", "steps", "id", "title", "tool", "args", "depends_on", "month", "x"])


@st.composite
def mutated_plans(draw: st.DrawFn) -> Any:
    """The seed plan with a few random edits: set, delete, or duplicate somewhere inside."""
    plan: Any = seed_plan()
    for _ in range(draw(st.integers(0, 4))):
        containers = _containers(plan)
        target = draw(st.sampled_from(containers))
        action = draw(st.sampled_from(["set", "delete", "dup"]))
        if isinstance(target, dict):
            key = draw(keys | st.sampled_from(sorted(target) or ["x"]))
            if action == "delete":
                target.pop(key, None)
            else:
                target[key] = draw(json_values | st.sampled_from([*SEED_TOOLS, ["step_1"]]))
        elif target:
            index = draw(st.integers(0, len(target) - 1))
            if action == "delete":
                del target[index]
            elif action == "dup":
                target.append(copy.deepcopy(target[index]))
            else:
                target[index] = draw(json_values)
    return plan


def _containers(value: Any) -> list[Any]:
    found = [value] if isinstance(value, dict | list) else []
    children = (
        value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    )
    for child in children:
        found.extend(_containers(child))
    return found


def _recording_tools(calls: list[str]) -> list[Any]:
    def fetch_sales_data(month: str) -> dict[str, str]:
        calls.append("fetch_sales_data")
        return {"month": month}

    def fetch_refund_data(month: str) -> dict[str, str]:
        calls.append("fetch_refund_data")
        return {"month": month}

    def calculate_monthly_kpis(month: str) -> dict[str, str]:
        calls.append("calculate_monthly_kpis")
        return {"month": month}

    def detect_risk_signals(month: str) -> dict[str, str]:
        calls.append("detect_risk_signals")
        return {"month": month}

    def get_manager_profile(manager_id: int) -> dict[str, int]:
        calls.append("get_manager_profile")
        return {"manager_id": manager_id}

    return [
        fetch_sales_data,
        fetch_refund_data,
        calculate_monthly_kpis,
        detect_risk_signals,
        get_manager_profile,
    ]


CANCELLED = "cancelled before it finished"


def _is_valid(raw: Any) -> bool:
    try:
        validate_plan_action(raw, max_plan_steps=6, allowed_tools=SEED_TOOLS)
    except StopRun:
        return False
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_plans() | json_values | st.text(max_size=40), st.booleans())
def test_engine_never_raises_and_never_acts_on_an_invalid_plan(raw: Any, as_text: bool) -> None:
    calls: list[str] = []
    answer = raw if isinstance(raw, str) else json.dumps(raw) if as_text else raw
    model = ScriptedModel(responses=[answer, "done"])
    result = run_sync(
        SEED_GOAL, tools=_recording_tools(calls), model=model, budget=Budget(max_seconds=10)
    )
    assert is_known(result.stop_reason), result.stop_reason
    assert result.status == ("ok" if result.stop_reason == "success" else "stopped")
    parsed = raw
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
    if (isinstance(raw, str) and parsed is None) or not _is_valid(parsed):
        assert calls == [], (raw, calls)
        blank = isinstance(answer, str) and not answer.strip()
        assert (
            result.stop_reason == "llm_empty"
            if blank
            else result.stop_reason.startswith("invalid_plan:")
        )
    else:
        # these tools never fail: every ok trace entry is a call. A DAG sibling that was
        # already running when the first failure cancelled it also ran (a thread cannot be
        # stopped); it is traced as cancelled, never as ok.
        assert result.plan is not None
        ok = sum(1 for entry in result.trace if entry.ok)
        cancelled = sum(1 for entry in result.trace if entry.error == CANCELLED)
        assert ok <= len(calls) <= ok + cancelled
        assert len(result.history) == ok
        if not result.plan.is_dag:
            assert len(calls) == ok
