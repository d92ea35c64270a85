"""Replan runs with a store: approvals and agent turns survive a pause, budgets hold."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from taskdecomp import ConfigError, ScriptedModel, approve, open_store, run_sync, tool
from taskdecomp.budget import Budget
from taskdecomp.strategies.replan import ReplanOptions

RESPOND = {"kind": "respond", "response": "done"}


class Ledger:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def tools(self) -> list[Any]:
        def lookup(key: str) -> dict[str, Any]:
            self.calls.append(("lookup", key))
            return {"key": key}

        @tool(side_effects="unsafe", needs_approval=True)
        def send(to: str) -> str:
            self.calls.append(("send", to))
            return "sent"

        @tool(side_effects="unsafe")
        async def charge(amount: int) -> str:
            await asyncio.sleep(0.2)
            self.calls.append(("charge", amount))
            return "charged"

        return [lookup, send, charge]


def step(step_id: str, tool_name: str, args: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "title": f"Run {tool_name}", "tool": tool_name, "args": args, **extra}


@pytest.fixture
def store(tmp_path: Path) -> Any:
    opened = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    yield opened
    opened.close()


def rules(*pairs: tuple[str, Any]) -> ScriptedModel:
    return ScriptedModel(rules=list(pairs))


def test_an_agent_goes_on_after_its_recorded_turns_when_approved(store: Any) -> None:
    ledger = Ledger()
    plan = {
        "kind": "plan",
        "steps": [{"id": "s1", "title": "Notify", "instruction": "Charge, tell"}],
    }
    model = rules(
        ("remaining_steps", RESPOND),
        ('"turns": \\[\\]', {"kind": "call", "tool": "charge", "args": {"amount": 5}}),
        ('"turns_left": 19', {"kind": "call", "tool": "send", "args": {"to": "ann"}}),
        ("turns_left", {"kind": "finish", "result": "charged and told"}),
        ("max_plan_steps", plan),
    )
    paused = run_sync(
        "g", tools=ledger.tools(), model=model, store=store, strategy="replan", run_id="r1"
    )
    assert paused.stop_reason == "awaiting_approval"
    assert ledger.calls == [("charge", 5)]
    stored = store.load_run("r1")
    assert stored.state["replan"]["agent_turns"]["s1"][0]["result"] == "charged"
    done = asyncio.run(approve("r1", store=store, tools=ledger.tools(), model=model))
    assert done.stop_reason == "success", done.message
    assert ledger.calls == [("charge", 5), ("send", "ann")]  # turn 1 was not made again
    assert done.history[0].observation == "charged and told"


def test_a_pause_in_a_wave_starts_none_of_its_steps(store: Any) -> None:
    ledger = Ledger()
    plan = {
        "kind": "plan",
        "steps": [
            step("s1", "send", {"to": "ann"}, depends_on=[]),
            step("s2", "charge", {"amount": 5}, depends_on=[]),
        ],
    }
    model = rules(("remaining_steps", RESPOND), ("max_plan_steps", plan))
    paused = run_sync(
        "g", tools=ledger.tools(), model=model, store=store, strategy="replan", run_id="r1"
    )
    assert paused.stop_reason == "awaiting_approval" and ledger.calls == []
    assert store.load_run("r1").attempts == ()
    done = asyncio.run(approve("r1", store=store, tools=ledger.tools(), model=model))
    assert done.stop_reason == "success", done.message
    assert sorted(ledger.calls) == [("charge", 5), ("send", "ann")]


def test_a_dag_pause_lets_running_steps_finish_first(store: Any) -> None:
    ledger = Ledger()
    plan = {
        "kind": "plan",
        "steps": [
            step("s1", "charge", {"amount": 5}, depends_on=[]),
            step("s2", "send", {"to": "ann"}, depends_on=[]),
            step("s3", "lookup", {"key": "z"}, depends_on=[]),
        ],
    }
    model = rules(("history", "done"), ("max_plan_steps", plan))
    paused = run_sync("g", tools=ledger.tools(), model=model, store=store, run_id="r1")
    assert paused.stop_reason == "awaiting_approval"
    assert ledger.calls == [("charge", 5)]  # started before the pause, finished, not cut short
    done = asyncio.run(approve("r1", store=store, tools=ledger.tools(), model=model))
    assert done.stop_reason == "success", done.message
    assert ledger.calls[0] == ("charge", 5)  # then the other two, together, in either order
    assert sorted(ledger.calls[1:]) == [("lookup", "z"), ("send", "ann")]


def test_an_edited_plan_must_fit_the_step_budget(store: Any) -> None:
    ledger = Ledger()
    plan = {"kind": "plan", "steps": [step("s1", "lookup", {"key": "a"})]}
    model = rules(("remaining_steps", RESPOND), ("max_plan_steps", plan))
    run_sync(
        "g",
        tools=ledger.tools(),
        model=model,
        store=store,
        strategy="replan",
        replan=ReplanOptions(approve_plan=True),
        budget=Budget(max_execute_steps=2),
        run_id="r1",
    )
    edited = [step(f"e{n}", "lookup", {"key": "k" * n}) for n in range(1, 4)]
    with pytest.raises(ConfigError, match="max_execute_steps"):
        asyncio.run(approve("r1", store=store, plan=edited, tools=ledger.tools(), model=model))
    assert store.load_run("r1").summary.status == "paused" and ledger.calls == []


def test_a_decision_stores_the_model_calls_spent_so_far(store: Any) -> None:
    seen: list[int] = []

    def peek(key: str) -> str:
        seen.append(store.load_run("r1").usage.llm_calls)  # what a crash here would keep (sync)
        return key

    plan = {"kind": "plan", "steps": [step("s1", "peek", {"key": "a"})]}
    more = {"kind": "plan", "steps": [step("s2", "peek", {"key": "b"})]}
    model = rules(('"id": "s2"', RESPOND), ("remaining_steps", more), ("max_plan_steps", plan))
    done = run_sync(
        "g",
        tools=[peek],
        model=model,
        store=store,
        strategy="replan",
        run_id="r1",
        durability="sync",
    )
    assert done.stop_reason == "success", done.message
    assert seen == [1, 2]  # the plan call, then the plan call and the first decision


def test_a_ref_as_the_whole_args_must_resolve_to_an_object() -> None:
    ledger = Ledger()
    plan = {
        "kind": "plan",
        "steps": [
            step("s1", "lookup", {"key": "a"}),
            {"id": "s2", "title": "t", "tool": "lookup", "args": {"$ref": "s1/key"}},
        ],
    }
    model = ScriptedModel(responses=[plan, {"kind": "plan", "steps": [plan["steps"][1]]}])
    result = run_sync("g", tools=ledger.tools(), model=model, strategy="replan")
    assert result.stop_reason == "bad_ref:s2"
    assert ledger.calls == [("lookup", "a")]
