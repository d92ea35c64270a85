"""The scheduler: order, DAG concurrency, max_parallel, first failure cancels the rest."""

from __future__ import annotations

import asyncio
from typing import Any

from taskdecomp import Budget, Event, ScriptedModel, StepStarted, run_sync
from tests.support import SEED_GOAL, plan_of, step


class Probe:
    """Async tools that log start/end and count how many run at once.

    ``work`` takes ``delay`` seconds, ``fail`` takes ``fail_delay`` (half of ``delay`` unless
    given) and then raises.
    """

    def __init__(self, delay: float = 0.05, fail_delay: float | None = None) -> None:
        self.delay = delay
        self.fail_delay = delay / 2 if fail_delay is None else fail_delay
        self.log: list[str] = []
        self.running = 0
        self.peak = 0

    def tools(self) -> list[Any]:
        async def work(name: str) -> str:
            self.log.append(f"start {name}")
            self.running += 1
            self.peak = max(self.peak, self.running)
            try:
                await asyncio.sleep(self.delay)
            finally:
                self.running -= 1
            self.log.append(f"end {name}")
            return name

        async def fail(name: str) -> str:
            await asyncio.sleep(self.fail_delay)
            raise ValueError(f"{name} failed")

        return [work, fail]


def go(plan: dict[str, Any], probe: Probe, **budget: Any) -> Any:
    model = ScriptedModel(responses=[plan, "done"])
    events: list[Event] = []
    result = run_sync(
        SEED_GOAL, tools=probe.tools(), model=model, budget=Budget(**budget), on_event=events.append
    )
    return result, events


def work(n: int, **extra: Any) -> dict[str, Any]:
    return step(n, "work", {"name": f"s{n}"}, **extra)


def test_without_depends_on_steps_run_one_at_a_time_in_order() -> None:
    probe = Probe()
    result, _ = go(plan_of(work(1), work(2), work(3)), probe)
    assert result.ok
    assert probe.log == ["start s1", "end s1", "start s2", "end s2", "start s3", "end s3"]
    assert probe.peak == 1


def test_independent_steps_run_concurrently_and_joins_wait() -> None:
    probe = Probe()
    plan = plan_of(
        work(1, depends_on=[]),
        work(2, depends_on=[]),
        work(3, depends_on=[]),
        work(4, depends_on=["step_1", "step_2", "step_3"]),
    )
    result, _ = go(plan, probe)
    assert result.ok
    assert probe.peak == 3
    assert probe.log.index("start s4") > max(probe.log.index(f"end s{i}") for i in (1, 2, 3))
    assert [h.step_no for h in result.history] == [1, 2, 3, 4]


def test_max_parallel_bounds_concurrency_and_starts_in_plan_order() -> None:
    probe = Probe()
    plan = plan_of(*(work(i, depends_on=[]) for i in range(1, 7)))
    result, events = go(plan, probe, max_parallel=2)
    assert result.ok
    assert probe.peak == 2
    started = [e.step.id for e in events if isinstance(e, StepStarted)]
    assert started == [f"step_{i}" for i in range(1, 7)]


def test_a_chain_in_a_dag_runs_in_dependency_order_not_list_order() -> None:
    probe = Probe(delay=0.01)
    plan = plan_of(
        work(1, depends_on=["step_3"]), work(2, depends_on=["step_1"]), work(3, depends_on=[])
    )
    result, _ = go(plan, probe)
    assert result.ok
    assert [line for line in probe.log if line.startswith("start")] == [
        "start s3",
        "start s1",
        "start s2",
    ]


def test_first_failure_cancels_running_siblings_and_skips_dependents() -> None:
    probe = Probe(delay=600, fail_delay=0.05)  # a run that waited for s1 would time out
    plan = plan_of(
        work(1, depends_on=[]),
        step(2, "fail", {"name": "f"}, depends_on=[]),
        work(3, depends_on=["step_1"]),
    )
    result, _ = go(plan, probe)
    assert result.stop_reason == "tool_error:fail"
    assert "end s1" not in probe.log and "start s3" not in probe.log
    by_id = {e.step_id: e for e in result.trace}
    assert by_id["step_1"].error == "cancelled before it finished"
    assert by_id["step_2"].error == "ValueError: f failed"
    assert "step_3" not in by_id


def test_empty_depends_on_everywhere_is_fully_parallel() -> None:
    probe = Probe(delay=0.2)
    plan = plan_of(*(work(i, depends_on=[]) for i in range(1, 6)))
    result, _ = go(plan, probe)
    assert result.ok
    assert probe.peak == 5  # all five at once: none ended before the last one started
