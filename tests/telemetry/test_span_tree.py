"""The span tree of a run of each strategy, caught by the SDK's in-memory exporter."""

from __future__ import annotations

from typing import Any

from taskdecomp import ScriptedModel, run_sync, tool
from tests.support import plan_of, step
from tests.telemetry.conftest import Catching
from tests.telemetry.spantree import drawn, one

GOAL = "Count the letters of two words and say which is longer"


def tools() -> list[Any]:
    @tool(side_effects="read_only")
    def count(word: str) -> dict[str, int]:
        """Count the letters of a word."""
        return {"letters": len(word)}

    return [count]


def test_a_plan_execute_run_is_one_tree_of_model_and_tool_spans(spans: Catching) -> None:
    plan = plan_of(
        step(1, "count", {"word": "apple"}),
        step(2, "count", {"word": "fig"}),
        step(3, "count", {"word": "kiwi"}),
    )
    model = ScriptedModel(responses=[plan, "apple is longer"])
    result = run_sync(GOAL, tools=tools(), model=model)
    assert result.status == "ok"
    caught = spans.get_finished_spans()
    print(drawn(caught))
    top = one(caught, "invoke_agent")
    assert top.attributes["taskdecomp.stop_reason"] == "success"
