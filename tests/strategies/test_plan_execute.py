"""The plan -> execute -> combine strategy, driven through the public API.

One test per stop reason the seed lists, one per extension, and the seed's
"what to try next" list.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from taskdecomp import (
    Budget,
    Event,
    ModelResponse,
    RunResult,
    RunStopped,
    ScriptedModel,
    StepFinished,
    is_known,
    run,
    run_sync,
    tool,
)
from tests.conftest import EXAMPLES, SALES_TOOLS
from tests.support import SEED_GOAL, SEED_TOOLS, FixedModel, plan_of, seed_plan, step

ANSWER = "Summary written from history."
NO_REPAIRS = Budget(repairs=0)
"""The boundary's own rules: a refused plan stops the run (repairs: test_repairs.py)."""


def run_seed(
    *responses: Any, tools: Any = SALES_TOOLS, **kwargs: Any
) -> tuple[RunResult, ScriptedModel]:
    model = ScriptedModel(responses=list(responses))
    kwargs.setdefault("budget", NO_REPAIRS)
    return run_sync(SEED_GOAL, tools=tools, model=model, **kwargs), model


class Recorder:
    """Tools that record every call, so a test can see what ran."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def tools(self) -> list[Any]:
        def a(x: int = 0) -> dict[str, int]:
            self.calls.append(("a", {"x": x}))
            return {"x": x}

        def b(x: int = 0) -> dict[str, int]:
            self.calls.append(("b", {"x": x}))
            return {"x": x * 2}

        def boom(x: int = 0) -> dict[str, int]:
            self.calls.append(("boom", {"x": x}))
            raise RuntimeError("database is down")

        return [a, b, boom]


# --- success and the seed's sample run -------------------------------------------------


def test_seed_example_succeeds_with_the_seed_figures() -> None:
    result, model = run_seed(seed_plan(), ANSWER)
    assert result.stop_reason == "success"
    assert result.status == "ok"
    assert result.answer == ANSWER
    assert [s.tool for s in result.plan.steps] == list(SEED_TOOLS)  # type: ignore[union-attr]
    assert [e.ok for e in result.trace] == [True] * 5
    kpis = result.history[2].observation
    assert kpis["gross_sales_usd"] == 28195.0
    assert kpis["refunds_usd"] == 1370.0
    assert kpis["net_sales_usd"] == 26825.0
    assert kpis["refund_rate"] == 0.0486
    assert "2026-04-04" in result.history[3].observation["risk_warnings"][0]
    assert result.usage.llm_calls == 2
    assert result.usage.tool_calls == 5
    # the combiner saw the observations, not the model's imagination
    combine_request = model.calls[1].text()
    assert "reporting assistant" in combine_request
    assert "28195.0" in combine_request


def test_result_json_has_the_seed_keys_plus_run_id_and_usage() -> None:
    result, _ = run_seed(seed_plan(), ANSWER)
    data = json.loads(json.dumps(result.to_dict()))
    for key in ("status", "stop_reason", "answer", "plan", "raw_plan", "llm_phase", "trace"):
        assert key in data
    assert {"history", "run_id", "usage"} <= data.keys()
    assert data["plan"][0] == {
        "id": "step_1",
        "title": "Step 1",
        "tool": "fetch_sales_data",
        "args": {"month": "2026-04"},
    }
    assert data["trace"][0]["step_no"] == 1 and len(data["trace"][0]["args_hash"]) == 12
    assert data["history"][4]["observation"]["manager"]["name"] == "Anna"
    assert set(data["usage"]) == {
        "llm_calls",
        "tool_calls",
        "tokens_in",
        "tokens_out",
        "cost_usd",
        "seconds",
        "repairs",
        "estimated",
    }


def test_manager_7_gives_max_in_the_synthesis() -> None:
    script = ScriptedModel.from_file(EXAMPLES / "sales_report" / "script.json")
    goal = SEED_GOAL.replace("manager_id=42", "manager_id=7")
    result = run_sync(goal, tools=SALES_TOOLS, model=script)
    assert result.ok
    assert result.history[4].observation["manager"]["name"] == "Max"
    assert "Max" in result.answer  # type: ignore[operator]
    assert '"name": "Max"' in script.calls[1].text()


def test_example_script_for_manager_42_names_anna() -> None:
    script = ScriptedModel.from_file(EXAMPLES / "sales_report" / "script.json")
    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=script)
    assert result.ok and "Anna" in result.answer  # type: ignore[operator]


# --- the seed's "what to try next" -----------------------------------------------------


def test_removing_detect_risk_signals_from_the_allowlist_stops_before_any_tool() -> None:
    allow = [t for t in SEED_TOOLS if t != "detect_risk_signals"]
    result, _ = run_seed(seed_plan(), ANSWER, allow=allow)
    assert result.stop_reason == "invalid_plan:tool_not_allowed:detect_risk_signals"
    assert result.trace == () and result.usage.tool_calls == 0
    assert result.raw_plan == seed_plan()
    assert "allowed: calculate_monthly_kpis" in (result.message or "")


def test_allowed_but_unregistered_tool_is_tool_missing() -> None:
    plan = seed_plan()
    plan["steps"][3]["tool"] = "send_report_email"
    result, _ = run_seed(plan, ANSWER, allow=[*SEED_TOOLS, "send_report_email"])
    assert result.stop_reason == "tool_missing:send_report_email"
    assert [e.ok for e in result.trace] == [True, True, True, False]
    assert len(result.history) == 3
    assert result.answer is None


def test_max_plan_steps_3_rejects_the_five_step_plan() -> None:
    result, _ = run_seed(seed_plan(), ANSWER, budget=Budget(max_plan_steps=3, repairs=0))
    assert result.stop_reason == "invalid_plan:max_steps"
    assert result.usage.tool_calls == 0


# --- invalid plans (policy boundary) ---------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("this is not json", "invalid_plan:non_json"),
        ('{"kind": "plan", "steps": [NaN]}', "invalid_plan:non_json"),
        ('{"kind": "plan", "kind": "plan", "steps": []}', "invalid_plan:non_json"),
        ("[" * 40 + "]" * 40, "invalid_plan:non_json"),
        ('{"kind": "plan\\u0000", "steps": []}', "invalid_plan:bad_kind"),
        ('"\x00"', "invalid_plan:non_json"),
        ([1, 2, 3], "invalid_plan:not_object"),
        ({"kind": "invalid"}, "invalid_plan:non_json"),
        ({"kind": "todo", "steps": []}, "invalid_plan:bad_kind"),
        ({"kind": "plan", "steps": [], "why": "x"}, "invalid_plan:extra_keys"),
        ({"kind": "plan", "steps": []}, "invalid_plan:missing_steps"),
        ({"kind": "plan"}, "invalid_plan:missing_steps"),
        (plan_of(step(1, "a"), step(2, "b")), "invalid_plan:min_steps"),
        (plan_of(*(step(i, "a", {"x": i}) for i in range(7))), "invalid_plan:max_steps"),
        (plan_of(step(1, "a"), "b", step(3, "a")), "invalid_plan:step_2_not_object"),
        (
            plan_of(step(1, "a"), step(2, "b", why=1), step(3, "a")),
            "invalid_plan:step_2_extra_keys",
        ),
        (
            plan_of(step(1, "a"), step(2, "b"), {"title": "t", "tool": "a"}),
            "invalid_plan:step_3_missing_id",
        ),
        (plan_of(step(1, "a"), step(1, "b"), step(3, "a")), "invalid_plan:duplicate_step_id"),
        (
            plan_of(step(1, "a"), {**step(2, "b"), "title": " "}, step(3, "a")),
            "invalid_plan:step_2_missing_title",
        ),
        (
            plan_of(step(1, "a"), {**step(2, "b"), "tool": 7}, step(3, "a")),
            "invalid_plan:step_2_missing_tool",
        ),
        (
            plan_of(step(1, "a"), step(2, "rm_rf"), step(3, "a")),
            "invalid_plan:tool_not_allowed:rm_rf",
        ),
        (
            plan_of(step(1, "a"), {**step(2, "b"), "args": [1]}, step(3, "a")),
            "invalid_plan:step_2_bad_args",
        ),
        (
            plan_of(step(1, "a"), step(2, "b", depends_on=["step_9"]), step(3, "a")),
            "invalid_plan:unknown_dependency:step_9",
        ),
        (
            plan_of(
                step(1, "a", depends_on=["step_3"]),
                step(2, "b"),
                step(3, "a", depends_on=["step_1"]),
            ),
            "invalid_plan:cycle",
        ),
        (
            plan_of(step(1, "a", depends_on=["step_1"]), step(2, "b"), step(3, "a")),
            "invalid_plan:cycle",
        ),
        (
            plan_of(step(1, "a"), step(2, "b", depends_on="step_1"), step(3, "a")),
            "invalid_plan:step_2_bad_depends_on",
        ),
    ],
)
def test_invalid_plans_stop_before_any_tool(raw: Any, reason: str) -> None:
    recorder = Recorder()
    result, _ = run_seed(raw, ANSWER, tools=recorder.tools())
    assert result.stop_reason == reason
    assert result.status == "stopped"
    assert recorder.calls == []
    assert result.plan is None and result.trace == ()
    assert result.raw_plan is not None
    assert is_known(result.stop_reason)


def test_oversized_model_text_is_non_json() -> None:
    recorder = Recorder()
    padding = " " * 250_000
    result, _ = run_seed(
        json.dumps(plan_of(step(1, "a"), step(2, "b"), step(3, "a"))) + padding,
        ANSWER,
        tools=recorder.tools(),
    )
    assert result.stop_reason == "invalid_plan:non_json"
    assert "over the cap" in (result.message or "")
    assert recorder.calls == []


def test_truncated_plan_is_never_parsed() -> None:
    text = json.dumps(seed_plan())  # complete JSON, but the model says it was cut off
    model = FixedModel(ModelResponse(text=text, finish_reason="length"))
    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model)
    assert result.stop_reason == "invalid_plan:truncated"
    assert result.llm_phase == "plan"
    assert result.usage.tool_calls == 0


# --- execution budgets -----------------------------------------------------------------


def test_plan_longer_than_the_execution_budget_is_max_execute_steps() -> None:
    recorder = Recorder()
    plan = plan_of(*(step(i, "a", {"x": i}) for i in range(1, 6)))
    result, _ = run_seed(plan, ANSWER, tools=recorder.tools(), budget=Budget(max_execute_steps=4))
    assert result.stop_reason == "max_execute_steps"
    assert recorder.calls == []
    assert result.plan is not None and len(result.plan.steps) == 5


def test_tool_call_budget_is_max_tool_calls() -> None:
    recorder = Recorder()
    plan = plan_of(*(step(i, "a", {"x": i}) for i in range(1, 6)))
    result, _ = run_seed(plan, ANSWER, tools=recorder.tools(), budget=Budget(max_tool_calls=3))
    assert result.stop_reason == "max_tool_calls"
    assert len(recorder.calls) == 3
    assert result.trace[-1].stop_reason == "max_tool_calls"


def test_deadline_cancels_an_in_flight_tool() -> None:
    state: dict[str, bool] = {"cancelled": False, "finished": False}

    async def slow(x: int = 0) -> int:
        try:
            await asyncio.sleep(600)  # a run that waited for it would hit the test's timeout
        except asyncio.CancelledError:
            state["cancelled"] = True
            raise
        state["finished"] = True
        return x

    plan = plan_of(step(1, "slow", {"x": 1}), step(2, "slow", {"x": 2}), step(3, "slow", {"x": 3}))
    result, _ = run_seed(plan, ANSWER, tools=[slow], budget=Budget(max_seconds=1))
    assert result.stop_reason == "max_seconds"
    assert state == {"cancelled": True, "finished": False}
    assert result.trace[0].ok is False and result.trace[0].error == "cancelled before it finished"


def test_deadline_covers_a_slow_model() -> None:
    model = ScriptedModel(responses=[seed_plan()], latency_ms=600_000)  # past the test's timeout
    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model, budget=Budget(max_seconds=1))
    assert result.stop_reason == "max_seconds"
    assert (result.plan, result.trace, result.usage.llm_calls) == (None, (), 1)  # cut mid-call


# --- model failures and model budgets --------------------------------------------------


@pytest.mark.parametrize(
    ("responses", "reason", "phase", "tool_calls"),
    [
        ([{"error": "timeout"}], "llm_timeout", "plan", 0),
        ([seed_plan(), {"error": "timeout"}], "llm_timeout", "finalize", 5),
        ([{"error": "empty"}], "llm_empty", "plan", 0),
        ([seed_plan(), {"error": "empty"}], "llm_empty", "finalize", 5),
        ([seed_plan(), "   \n"], "llm_empty", "finalize", 5),
        ([{"error": "auth"}], "llm_error:auth", "plan", 0),
        ([seed_plan()], "llm_error:script_exhausted", "finalize", 5),
    ],
)
def test_model_failures_name_the_phase(
    responses: list[Any], reason: str, phase: str, tool_calls: int
) -> None:
    result, _ = run_seed(*responses)
    assert result.stop_reason == reason
    assert result.llm_phase == phase
    assert result.usage.tool_calls == tool_calls
    assert result.answer is None
    if phase == "finalize":
        assert len(result.history) == 5  # the executed work is kept in the result


def test_max_llm_calls_stops_before_the_combine_call() -> None:
    result, model = run_seed(seed_plan(), ANSWER, budget=Budget(max_llm_calls=1))
    assert result.stop_reason == "max_llm_calls"
    assert result.llm_phase == "finalize"
    assert len(model.calls) == 1


def test_max_tokens_stops_before_a_call_that_would_exceed_it() -> None:
    result, model = run_seed(seed_plan(), ANSWER, budget=Budget(max_tokens=50))
    assert result.stop_reason == "max_tokens"
    assert result.llm_phase == "plan"
    assert model.calls == []


def test_max_tokens_after_the_plan_call_keeps_what_was_spent() -> None:
    result, model = run_seed(seed_plan(), ANSWER, budget=Budget(max_tokens=700))
    assert result.stop_reason == "max_tokens"
    assert result.llm_phase == "finalize"
    assert len(model.calls) == 1
    assert 0 < result.usage.tokens_in + result.usage.tokens_out <= 700


def test_max_cost_is_checked_after_a_call() -> None:
    model = FixedModel(
        ModelResponse(text=json.dumps(seed_plan()), tokens_in=10, tokens_out=10, cost_usd=0.02),
        ModelResponse(text=ANSWER, cost_usd=0.02),
    )
    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model, budget=Budget(max_cost_usd=0.01))
    assert result.stop_reason == "max_cost"
    assert result.usage.cost_usd == pytest.approx(0.02)
    assert result.usage.tool_calls == 0


def test_combiner_model_is_used_for_the_combine_call() -> None:
    planner = ScriptedModel(responses=[seed_plan()])
    combiner = ScriptedModel(responses=["from the combiner"])
    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=planner, combiner_model=combiner)
    assert result.answer == "from the combiner"
    assert [c.phase for c in planner.calls] == ["plan"]
    assert [c.phase for c in combiner.calls] == ["finalize"]


# --- tool failures ---------------------------------------------------------------------


def test_bad_arguments_are_tool_bad_args_before_the_call() -> None:
    recorder = Recorder()
    plan = plan_of(step(1, "a", {"x": 1}), step(2, "b", {"x": "two"}), step(3, "a", {"x": 3}))
    result, _ = run_seed(plan, ANSWER, tools=recorder.tools())
    assert result.stop_reason == "tool_bad_args:b"
    assert recorder.calls == [("a", {"x": 1})]
    assert "x:" in (result.trace[1].error or "")


def test_unknown_argument_is_tool_bad_args() -> None:
    plan = seed_plan()
    plan["steps"][0]["args"] = {"month": "2026-04", "region": "EU"}
    result, _ = run_seed(plan, ANSWER)
    assert result.stop_reason == "tool_bad_args:fetch_sales_data"
    assert result.usage.tool_calls == 1 and result.history == ()


def test_a_raising_tool_is_tool_error_with_the_message_in_the_trace() -> None:
    recorder = Recorder()
    plan = plan_of(step(1, "a", {"x": 1}), step(2, "boom", {"x": 2}), step(3, "a", {"x": 3}))
    result, _ = run_seed(plan, ANSWER, tools=recorder.tools())
    assert result.stop_reason == "tool_error:boom"
    assert result.trace[1].error == "RuntimeError: database is down"
    assert [c[0] for c in recorder.calls] == ["a", "boom"]


def test_a_tool_over_its_timeout_is_tool_timeout() -> None:
    finished: list[int] = []

    @tool(timeout=0.05)
    async def sleepy(x: int = 0) -> int:
        await asyncio.sleep(600)  # a run that waited for it would hit the test's timeout
        finished.append(x)
        return x

    def quick(x: int = 0) -> int:
        return x

    plan = plan_of(step(1, "quick"), step(2, "sleepy"), step(3, "quick", {"x": 1}))
    result, _ = run_seed(plan, ANSWER, tools=[quick, sleepy])
    assert result.stop_reason == "tool_timeout:sleepy"
    assert [(e.step_id, e.ok) for e in result.trace] == [("step_1", True), ("step_2", False)]
    assert finished == []


def test_repeating_a_call_is_loop_detected() -> None:
    recorder = Recorder()
    plan = plan_of(step(1, "a", {"x": 1}), step(2, "b", {"x": 1}), step(3, "a", {"x": 1}))
    result, _ = run_seed(plan, ANSWER, tools=recorder.tools())
    assert result.stop_reason == "loop_detected"
    assert [c[0] for c in recorder.calls] == ["a", "b"]


# --- cancellation and events -----------------------------------------------------------


def test_cancelling_the_run_reports_cancelled_and_propagates() -> None:
    events: list[Event] = []

    async def slow(x: int = 0) -> int:
        await asyncio.sleep(30)
        return x

    async def main() -> None:
        model = ScriptedModel(
            responses=[
                plan_of(step(1, "slow"), step(2, "slow", {"x": 1}), step(3, "slow", {"x": 2}))
            ]
        )
        task = asyncio.create_task(
            run(SEED_GOAL, tools=[slow], model=model, on_event=events.append)
        )
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    stopped = [e for e in events if isinstance(e, RunStopped)]
    assert len(stopped) == 1 and stopped[0].result.stop_reason == "cancelled"


def test_a_broken_subscriber_does_not_change_the_outcome(caplog: pytest.LogCaptureFixture) -> None:
    def broken(event: Event) -> None:
        raise ValueError("display crashed")

    result, _ = run_seed(seed_plan(), ANSWER, on_event=broken)
    assert result.ok
    assert "display crashed" in caplog.text


def test_events_describe_the_run_in_order() -> None:
    events: list[Event] = []
    run_seed(seed_plan(), ANSWER, on_event=events.append)
    names = [type(e).__name__ for e in events]
    assert names[0] == "RunStarted" and names[-1] == "RunStopped"
    assert names.count("ModelCalled") == 2
    assert names.count("StepStarted") == names.count("StepFinished") == 5
    assert names.index("PlanCreated") < names.index("StepStarted")
    finished = [e for e in events if isinstance(e, StepFinished)]
    assert finished[2].observation["net_sales_usd"] == 26825.0


def test_run_sync_refuses_a_running_loop() -> None:
    async def inside() -> None:
        with pytest.raises(RuntimeError):
            run_sync(SEED_GOAL, tools=SALES_TOOLS, model=ScriptedModel(responses=[]))

    asyncio.run(inside())


def test_max_cost_stops_before_a_call_estimated_to_exceed_it() -> None:
    class Priced(FixedModel):
        def estimate_cost(self, tokens_in: int) -> float:
            return tokens_in * 0.001

    model = Priced(ModelResponse(text=json.dumps(seed_plan()), cost_usd=0.0))
    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model, budget=Budget(max_cost_usd=0.05))
    assert result.stop_reason == "max_cost"
    assert result.llm_phase == "plan"
    assert model.calls == []  # never sent
    assert "would exceed" in (result.message or "")
