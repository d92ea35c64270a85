"""Non-finite numbers never get through a run: not from the planner, not from a tool.

A plan argument such as ``1e400`` (which Python's json reads as ``inf``) fails the policy
boundary before any tool runs; a tool that returns a NaN or an infinity anywhere in its
result stops the run with ``tool_error:<name>``; what the run returns is strict JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from taskdecomp import Budget, RunResult, ScriptedModel, SqlStore, run_sync

PLAN_TEMPLATE = (
    '{"kind": "plan", "steps": ['
    '{"id": "s1", "title": "Scale", "tool": "scale", "args": {"x": %s}},'
    '{"id": "s2", "title": "Scale again", "tool": "scale", "args": {"x": 2}},'
    '{"id": "s3", "title": "Scale once more", "tool": "scale", "args": {"x": 3}}]}'
)
FINE_PLAN = PLAN_TEMPLATE % "1"


def refuse(name: str) -> Any:
    raise AssertionError(f"not strict JSON: {name}")


def strict(value: Any) -> Any:
    """``value`` through a strict writer and a strict reader (independent of taskdecomp's)."""
    return json.loads(json.dumps(value, allow_nan=False), parse_constant=refuse)


class Scales:
    """A float tool that records its calls, and whatever it is told to return."""

    def __init__(self, returns: Any = None) -> None:
        self.calls: list[float] = []
        self.returns = returns

    def scale(self, x: float) -> Any:
        """Scale by ``x``."""
        self.calls.append(x)
        return {"scaled": x} if self.returns is None else self.returns


def go(plan_text: str, tools: Scales, **kwargs: Any) -> RunResult:
    model = ScriptedModel(responses=[plan_text, "the answer"])
    return run_sync("scale things", tools=[tools.scale], model=model, **kwargs)


@pytest.mark.parametrize("number", ["1e400", "-1e400", "1e309", "NaN", '[1, {"y": -1e999}]'])
def test_a_non_finite_plan_argument_is_an_invalid_plan(number: str) -> None:
    tools = Scales()
    result = go(PLAN_TEMPLATE % number, tools, budget=Budget(repairs=0))
    assert result.stop_reason == "invalid_plan:non_json"
    assert "non-finite number" in (result.message or "")
    assert tools.calls == [] and result.usage.tool_calls == 0 and result.trace == ()
    assert strict(result.to_dict())["stop_reason"] == "invalid_plan:non_json"


def test_the_largest_finite_float_passes_where_the_next_power_of_ten_does_not() -> None:
    tools = Scales()
    assert go(PLAN_TEMPLATE % "1.7976931348623157e308", tools).stop_reason == "success"
    assert go(PLAN_TEMPLATE % "1e309", tools).stop_reason == "invalid_plan:non_json"
    assert tools.calls == [1.7976931348623157e308, 2, 3]


@pytest.mark.parametrize(
    ("returns", "where"),
    [
        (float("nan"), "value is nan"),
        (float("inf"), "value is inf"),
        ({"rows": [{"total": 1.0}, {"total": float("-inf")}]}, "'/rows/1/total' is -inf"),
    ],
)
def test_a_tool_returning_a_non_finite_number_stops_with_tool_error(
    returns: Any, where: str
) -> None:
    tools = Scales(returns)
    result = go(FINE_PLAN, tools)
    assert result.stop_reason == "tool_error:scale"
    assert tools.calls == [1.0]  # the first step, and no further
    [entry] = result.trace
    assert not entry.ok and where in (entry.error or "")
    assert result.history == ()
    assert strict(result.to_dict())["trace"][0]["stop_reason"] == "tool_error:scale"


def test_a_stored_run_with_a_non_finite_result_is_strict_json_everywhere(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        result = go(FINE_PLAN, Scales({"ok": [float("nan")]}), store=store)
        assert result.stop_reason == "tool_error:scale"
        stored = store.load_run(result.run_id)
        assert strict(stored.to_dict())["stop_reason"] == "tool_error:scale"
        events = store.load_events(result.run_id)
        assert [e.kind for e in events][-1] == "RunStopped"
        assert all(strict(dict(e.data)) == dict(e.data) for e in events)
    finally:
        store.close()
