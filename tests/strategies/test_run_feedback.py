"""The library side of a first run: live model progress, a model call cut off by the
deadline, empty goals, untyped functions in a toolset, and list scripts across a resume."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from taskdecomp import (
    Budget,
    ConfigError,
    Event,
    ModelCalled,
    ModelProgress,
    ScriptedModel,
    TreeRepository,
    load_toolset,
    open_store,
    resume,
    run_sync,
)
from taskdecomp.strategies.decompose import PlanDecomposer
from tests.conftest import SALES_TOOLS
from tests.support import SEED_GOAL, seed_plan


def scripted(*responses: Any, latency_ms: float = 0) -> ScriptedModel:
    return ScriptedModel(responses=list(responses), latency_ms=latency_ms)


def test_every_model_call_says_it_started_before_it_ends() -> None:
    events: list[Event] = []
    result = run_sync(
        SEED_GOAL, tools=SALES_TOOLS, model=scripted(seed_plan(), "done"), on_event=events.append
    )
    assert result.stop_reason == "success"
    calls = [e for e in events if isinstance(e, ModelProgress | ModelCalled)]
    assert [(type(e).__name__, e.phase) for e in calls] == [
        ("ModelProgress", "plan"),
        ("ModelCalled", "plan"),
        ("ModelProgress", "finalize"),
        ("ModelCalled", "finalize"),
    ]
    started = calls[0]
    assert isinstance(started, ModelProgress)
    assert (started.stage, started.model, started.run_id) == ("started", "scripted", result.run_id)


def test_a_model_call_cut_off_by_the_deadline_is_reported_and_stored(tmp_path: Path) -> None:
    events: list[Event] = []
    store = open_store(str(tmp_path / "runs.db"))
    result = run_sync(
        SEED_GOAL,
        tools=SALES_TOOLS,
        model=scripted(seed_plan(), latency_ms=600_000),  # only the deadline ends the call
        budget=Budget(max_seconds=1),
        on_event=events.append,
        store=store,
    )
    assert result.stop_reason == "max_seconds"
    [called] = [e for e in events if isinstance(e, ModelCalled)]
    assert (called.phase, called.ok) == ("plan", False)
    kinds = [e.kind for e in store.load_events(result.run_id)]
    assert "ModelCalled" in kinds and "ModelProgress" not in kinds  # progress is live only
    store.close()


@pytest.mark.parametrize("goal", ["", "  \n\t"])
def test_an_empty_goal_is_refused_before_anything_runs(goal: str, tmp_path: Path) -> None:
    model = scripted(seed_plan(), "done")
    with pytest.raises(ConfigError, match="the goal is empty"):
        run_sync(goal, tools=SALES_TOOLS, model=model)
    assert model.calls == []
    store = open_store(str(tmp_path / "trees.db"))
    decomposer = PlanDecomposer(TreeRepository(store), scripted({"children": []}))
    with pytest.raises(ConfigError, match="the goal is empty"):
        asyncio.run(decomposer.create_plan(goal))
    assert TreeRepository(store).list_plans() == []
    store.close()


UNTYPED = """
def typed(n: int) -> int:
    return n


def untyped(n):
    return n


def _private(n):
    return n
"""


def test_untyped_functions_are_listed_as_skipped_and_named_when_a_plan_uses_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tools.py"
    path.write_text(UNTYPED)
    toolset = load_toolset(path)
    assert list(toolset) == ["typed"]
    assert list(toolset.skipped) == ["untyped"]
    assert "no type hints" in toolset.skipped["untyped"]

    plan = {
        "kind": "plan",
        "steps": [
            {"id": f"s{i}", "title": "t", "tool": tool, "args": {"n": i}}
            for i, tool in enumerate(["typed", "untyped", "typed"])
        ],
    }
    result = run_sync("g", tools=toolset, model=scripted(plan), budget=Budget(repairs=0))
    assert result.stop_reason == "invalid_plan:tool_not_allowed:untyped"
    assert result.message is not None
    assert result.message.startswith("tool 'untyped' is not allowed; allowed: typed; ")
    assert "'untyped' is a function in the toolset but not a tool: it has no type hints" in (
        result.message
    )


def test_a_toolset_of_only_untyped_functions_says_which(tmp_path: Path) -> None:
    path = tmp_path / "tools.py"
    path.write_text("def a(x):\n    return x\n")
    with pytest.raises(ConfigError, match=r"no tools found \(skipped, without type hints: a\)"):
        load_toolset(path)


def test_a_list_script_resumes_where_the_run_left_off(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([seed_plan(), "The answer."]))
    store = open_store(str(tmp_path / "runs.db"))
    slow = tmp_path / "slow_tools.py"
    slow.write_text(
        "import time\n"
        "from pathlib import Path\n"
        "MARK = Path(__file__).with_name('slept')\n"
        + "".join(
            f"def {name}(month: str = '', manager_id: int = 0) -> dict:\n"
            f"    return {{'tool': '{name}'}}\n"
            for name in ("fetch_sales_data", "fetch_refund_data", "calculate_monthly_kpis")
        )
        + "def detect_risk_signals(month: str) -> dict:\n"
        "    if not MARK.exists():\n"
        "        MARK.touch()\n"
        "        time.sleep(3)\n"
        "    return {'risk': 'none'}\n"
        "def get_manager_profile(manager_id: int) -> dict:\n"
        "    return {'name': 'Anna'}\n"
    )
    first = run_sync(
        SEED_GOAL,
        tools=slow,
        model=f"scripted:{script}",
        budget=Budget(max_seconds=1),
        store=store,
    )
    assert (first.stop_reason, first.usage.llm_calls) == ("max_seconds", 1)

    again = asyncio.run(resume(first.run_id, store=store))
    assert (again.stop_reason, again.answer) == ("success", "The answer.")
    store.close()


def test_skip_drops_answers_from_a_list_script_only() -> None:
    listed = scripted("a", "b", "c")
    listed.skip(2)
    assert listed.in_order and asyncio.run(_text(listed)) == "c"
    ruled = ScriptedModel(rules=[("x", "ruled")], default="ruled")
    ruled.skip(5)
    assert not ruled.in_order and asyncio.run(_text(ruled)) == "ruled"


async def _text(model: ScriptedModel) -> str:
    from taskdecomp import ModelRequest

    request = ModelRequest(phase="plan", messages=({"role": "user", "content": "x"},))
    return (await model.complete(request)).text
