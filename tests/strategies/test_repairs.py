"""Refused answers are sent back with the rule they broke, up to ``Budget.repairs`` times."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskdecomp import (
    Budget,
    Event,
    PlanRepaired,
    RunResult,
    ScriptedModel,
    SqlStore,
    open_store,
    resume_sync,
    run_sync,
    tool,
)
from taskdecomp.engine import run
from taskdecomp.run import RunId
from taskdecomp.runconfig import stored_config
from taskdecomp.strategies.replan import ReplanOptions

ANSWER = "All done."


def step(n: int, name: str = "a", **extra: Any) -> dict[str, Any]:
    return {"id": f"s{n}", "title": f"Step {n}", "tool": name, "args": {"x": n}, **extra}


def plan(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "plan", "steps": list(steps)}


GOOD = plan(step(1), step(2, "b"), step(3))


class Desk:
    """Tools ``a`` and ``b`` that record their calls, and every event of the run."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.events: list[Event] = []

    def tools(self) -> list[Any]:
        @tool(side_effects="read_only")
        def a(x: int = 0) -> dict[str, int]:
            """Read a."""
            self.calls.append(("a", x))
            return {"x": x}

        @tool(side_effects="read_only")
        def b(x: int = 0) -> dict[str, int]:
            """Read b."""
            self.calls.append(("b", x))
            return {"x": x * 2}

        return [a, b]

    def repaired(self) -> list[PlanRepaired]:
        return [event for event in self.events if isinstance(event, PlanRepaired)]


def go(desk: Desk, *responses: Any, **kwargs: Any) -> tuple[RunResult, ScriptedModel]:
    model = ScriptedModel(responses=list(responses), stream_ms=kwargs.pop("stream_ms", 0))
    result = run_sync(
        "Read a and b.", tools=desk.tools(), model=model, on_event=desk.events.append, **kwargs
    )
    return result, model


BROKEN_ONCE = [
    ("not json", "invalid_plan:non_json", "not strict JSON"),
    ({"kind": "plans", "steps": GOOD["steps"]}, "invalid_plan:bad_kind", "kind must be 'plan'"),
    ({**GOOD, "why": "x"}, "invalid_plan:extra_keys", "remove: why"),
    ({"kind": "plan", "steps": []}, "invalid_plan:missing_steps", "non-empty list"),
    (plan(step(1), step(2)), "invalid_plan:min_steps", "from 3 to 6 steps"),
    (plan(*(step(n) for n in range(1, 8))), "invalid_plan:max_steps", "has 7 steps"),
    (plan(step(1), step(2, "rm_rf"), step(3)), "invalid_plan:tool_not_allowed:rm_rf", "a, b"),
    (plan(step(1), step(1), step(3)), "invalid_plan:duplicate_step_id", "reuses the id 's1'"),
    (
        plan(step(1), step(2, depends_on=["s9"]), step(3)),
        "invalid_plan:unknown_dependency:s9",
        "known: s1, s2, s3",
    ),
    (
        plan(step(1, depends_on=["s2"]), step(2, depends_on=["s1"]), step(3)),
        "invalid_plan:cycle",
        "s1 -> s2",
    ),
    (
        plan(step(1, depends_on=[]), {**step(2, depends_on=[]), "args": {"x": {"$ref": "s1/x"}}}),
        "bad_ref:s2",
        "'s1'",
    ),
    (plan(step(1), {**step(2), "args": [1]}, step(3)), "invalid_plan:step_2_bad_args", "step 2"),
]


@pytest.mark.parametrize(("bad", "rule", "told"), BROKEN_ONCE)
def test_a_plan_that_breaks_a_rule_once_is_repaired(bad: Any, rule: str, told: str) -> None:
    desk = Desk()
    result, model = go(
        desk, bad, GOOD, ANSWER, budget=Budget(min_plan_steps=3 if "ref" not in rule else 2)
    )
    assert result.stop_reason == "success", result.message
    assert result.usage.repairs == 1 and result.usage.llm_calls == 3
    assert desk.calls == [("a", 1), ("b", 2), ("a", 3)]  # only the repaired plan ran
    [repair] = desk.repaired()
    assert (repair.phase, repair.rule, repair.attempt) == ("plan", rule, 1)
    asked = model.calls[1]
    assert [m["role"] for m in asked.messages] == ["system", "user", "assistant", "user"]
    assert asked.messages[:2] == model.calls[0].messages  # the same question, then the answer
    raw = bad if isinstance(bad, str) else json.dumps(bad)
    assert asked.messages[2]["content"] == raw
    assert rule in asked.messages[3]["content"] and told in asked.messages[3]["content"]
    assert model.calls[1].phase == "plan"


@pytest.mark.parametrize("repairs", [0, 1, 2])
def test_a_plan_broken_every_time_stops_with_its_rule_after_the_repairs(repairs: int) -> None:
    desk = Desk()
    short = plan(step(1), step(2))
    result, model = go(desk, *[short] * (repairs + 1), budget=Budget(repairs=repairs))
    assert result.stop_reason == "invalid_plan:min_steps"
    assert result.usage.repairs == repairs and len(model.calls) == repairs + 1
    assert [event.attempt for event in desk.repaired()] == list(range(1, repairs + 1))
    assert desk.calls == [] and result.plan is None


def test_the_run_stops_with_the_last_rule_broken() -> None:
    desk = Desk()
    unknown_tool = plan(step(1), step(2, "rm_rf"), step(3))
    result, _ = go(desk, "not json", unknown_tool)
    assert result.stop_reason == "invalid_plan:tool_not_allowed:rm_rf"
    assert "allowed: a, b" in (result.message or "")


def test_the_allowlist_never_grows_through_a_repair() -> None:
    desk = Desk()
    uses_b = plan(step(1), step(2, "b"), step(3))
    model = ScriptedModel(responses=[uses_b, uses_b])
    result = run_sync("Read a and b.", tools=desk.tools(), model=model, allow=["a"])
    assert result.stop_reason == "invalid_plan:tool_not_allowed:b"
    assert "tool 'b' is not allowed; allowed: a" in model.calls[1].messages[3]["content"]
    assert desk.calls == []


def test_a_budget_spent_by_a_repair_stops_with_the_budget() -> None:
    desk = Desk()
    result, model = go(desk, "not json", GOOD, ANSWER, budget=Budget(max_llm_calls=1))
    assert result.stop_reason == "max_llm_calls" and result.llm_phase == "plan"
    assert len(model.calls) == 1 and result.usage.repairs == 1


@pytest.mark.parametrize("least", [1, 2])
def test_a_two_step_plan_runs_when_the_minimum_allows_it(least: int) -> None:
    desk = Desk()
    result, model = go(
        desk, plan(step(1), step(2, "b")), ANSWER, budget=Budget(min_plan_steps=least)
    )
    assert result.stop_reason == "success" and result.usage.repairs == 0
    assert f"Create {least} to 6 steps" in model.calls[0].messages[0]["content"]


def test_a_minimum_above_the_maximum_is_refused_with_both_named() -> None:
    with pytest.raises(ValueError, match=r"min_plan_steps \(4\) is above max_plan_steps \(3\)"):
        Budget(min_plan_steps=4, max_plan_steps=3)
    with pytest.raises(ValueError, match="repairs must be 0 or more"):
        Budget(repairs=-1)


# --- replan ----------------------------------------------------------------------------


def replan(desk: Desk, *responses: Any, **kwargs: Any) -> tuple[RunResult, ScriptedModel]:
    return go(desk, *responses, strategy="replan", replan=ReplanOptions(), **kwargs)


RESPOND = {"kind": "respond", "response": ANSWER}


def test_a_replanner_answer_is_repaired() -> None:
    desk = Desk()
    result, model = replan(desk, plan(step(1)), {"kind": "maybe"}, RESPOND)
    assert result.stop_reason == "success" and result.answer == ANSWER
    [repair] = desk.repaired()
    assert (repair.phase, repair.rule) == ("replan", "invalid_replan:bad_kind")
    assert "invalid_replan:bad_kind" in model.calls[2].messages[3]["content"]


def test_an_executor_action_is_repaired() -> None:
    desk = Desk()
    instruction = {
        "kind": "plan",
        "steps": [{"id": "s1", "title": "Read", "instruction": "Read a"}],
    }
    bad = {"kind": "call", "tool": "rm", "args": {}}
    good = {"kind": "call", "tool": "a", "args": {"x": 7}}
    finish = {"kind": "finish", "result": "read"}
    result, model = replan(desk, instruction, bad, good, finish, RESPOND)
    assert result.stop_reason == "success", result.message
    assert desk.calls == [("a", 7)]
    [repair] = desk.repaired()
    assert (repair.phase, repair.rule) == ("execute", "invalid_action:tool_not_allowed:rm")
    assert "allowed: a, b" in model.calls[2].messages[3]["content"]


def test_a_replan_plan_is_repaired_and_then_stops_when_broken_again() -> None:
    desk = Desk()
    bad = {"kind": "plan", "steps": [step(1, "nope")]}
    result, _ = replan(desk, bad, bad, budget=Budget(repairs=1))
    assert result.stop_reason == "invalid_plan:tool_not_allowed:nope"
    assert result.usage.repairs == 1


def test_plain_step_strings_are_instruction_steps() -> None:
    desk = Desk()
    result, _ = replan(
        desk,
        {"steps": ["Read a with x 5", "Then answer"]},  # Eino's default Plan
        {"kind": "call", "tool": "a", "args": {"x": 5}},
        {"kind": "finish", "result": "5"},
        {"response": ANSWER},  # Eino's Response, no kind
    )
    assert result.stop_reason == "success", result.message
    assert desk.repaired() == []
    assert result.answer == ANSWER and desk.calls == [("a", 5)]
    assert [(s.id, s.title, s.instruction) for s in result.plan.steps] == [  # type: ignore[union-attr]
        ("step_1", "Read a with x 5", "Read a with x 5"),
        ("step_2", "Then answer", "Then answer"),
    ]


def test_a_revision_in_plain_strings_gets_new_ids() -> None:
    desk = Desk()
    first = {"kind": "plan", "steps": [{**step(1), "id": "step_1"}]}
    revision = {"steps": ["Say it is done"]}
    result, _ = replan(desk, first, revision, {"kind": "finish", "result": "said"}, RESPOND)
    assert result.stop_reason == "success", result.message
    assert [s.id for s in result.plan.steps] == ["step_1", "step_2"]  # type: ignore[union-attr]


# --- streamed plans ---------------------------------------------------------------------

FIVE = [step(n, depends_on=[]) for n in range(1, 6)]


def test_a_repaired_streamed_plan_keeps_the_steps_that_started_early() -> None:
    desk = Desk()
    bad = {"kind": "plan", "steps": FIVE, "why": "x"}
    result, _ = go(desk, bad, plan(*FIVE), ANSWER, stream_ms=300, stream_plan=True)
    assert result.stop_reason == "success", result.message
    assert sorted(desk.calls) == [("a", n) for n in range(1, 6)]  # each once
    assert result.usage.repairs == 1


def test_a_repair_may_not_change_a_step_that_started() -> None:
    desk = Desk()
    bad = {"kind": "plan", "steps": FIVE, "why": "x"}
    changed = plan({**FIVE[0], "args": {"x": 99}}, *FIVE[1:])
    result, _ = go(desk, bad, changed, stream_ms=300, stream_plan=True)
    assert result.stop_reason == "invalid_plan:started_step_changed"
    assert "keep it unchanged as step 1" in (result.message or "")
    assert ("a", 99) not in desk.calls


# --- the store, resume -----------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    opened = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    yield opened
    opened.close()


def test_a_run_stopped_mid_repair_resumes_with_its_budget(store: SqlStore) -> None:
    desk = Desk()
    short = plan(step(1))
    answers = [short, short, plan(step(1), step(2, "b")), ANSWER]
    slow = ScriptedModel(responses=answers, latency_ms=1000)  # the deadline cuts the repair
    budget = Budget(min_plan_steps=2, repairs=2, max_seconds=1.5)
    stopped = asyncio.run(
        run("Read a and b.", tools=desk.tools(), model=slow, budget=budget, store=store,
            run_id=RunId("r1"))
    )  # fmt: skip
    assert stopped.stop_reason == "max_seconds" and stopped.usage.repairs == 1
    events = [record for record in store.load_events(RunId("r1")) if record.kind == "PlanRepaired"]
    assert [record.data["rule"] for record in events] == ["invalid_plan:min_steps"]
    kept = stored_config(store.load_run(RunId("r1"))).budget
    assert (kept.min_plan_steps, kept.repairs) == (2, 2)
    again = ScriptedModel(responses=answers)  # goes on after the two answers the run used
    done = resume_sync(
        "r1", store=store, tools=desk.tools(), model=again,
        budget=dataclasses.replace(kept, max_seconds=60),
    )  # fmt: skip
    assert done.stop_reason == "success", done.message
    assert done.usage.repairs == 1 and done.usage.llm_calls == 4
    assert desk.calls == [("a", 1), ("b", 2)]


# --- the command line -------------------------------------------------------------------


def test_repairs_and_min_plan_steps_through_the_command_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from tests.clitools import cli

    tools = tmp_path / "tools.py"
    tools.write_text("def a(x: int = 0) -> dict[str, int]:\n    return {'x': x}\n")
    two = {"kind": "plan", "steps": [step(1), step(2)]}
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["not json", {**two, "why": 1}, two, ANSWER]))
    args = ["run", "Read a.", "--tools", str(tools), "--model", f"scripted:{script}"]
    code, out, err = cli(capsys, *args, "--repairs", "2", "--min-plan-steps", "1")
    assert code == 0, err
    assert "repair plan answer 1: invalid_plan:non_json" in out + err
    assert "repair plan answer 2: invalid_plan:extra_keys (a plan has only" in out + err
    assert "2 repaired" in out + err
    code, out, _ = cli(capsys, *args, "--repairs", "0", "--json")
    assert code == 1
    assert json.loads(out)["stop_reason"] == "invalid_plan:non_json"
    assert json.loads(out)["usage"]["repairs"] == 0
    code, _, err = cli(capsys, *args, "--min-plan-steps", "7", "--json")
    assert code == 2 and "min_plan_steps (7) is above max_plan_steps (6)" in err


def test_post_runs_takes_the_new_budget_fields() -> None:
    from pydantic import TypeAdapter, ValidationError

    from taskdecomp.server.schemas import BudgetIn

    budget = TypeAdapter(BudgetIn)
    assert budget.validate_python({"repairs": 2, "min_plan_steps": 1}) == {
        "repairs": 2,
        "min_plan_steps": 1,
    }
    with pytest.raises(ValidationError):
        budget.validate_python({"repairs": -1})
