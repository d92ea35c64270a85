"""Streamed plans: read-only steps start while the planner writes; the rest waits."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskdecomp import Budget, ScriptedModel, tool
from taskdecomp.engine import run
from taskdecomp.events import Event, ModelCalled, PlanCreated
from taskdecomp.run import RunId, RunResult
from taskdecomp.store import SqlStore, open_store
from taskdecomp.streaming import PlanStream


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    opened = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    yield opened
    opened.close()


def step(n: int, name: str, **extra: Any) -> dict[str, Any]:
    return {"id": f"s{n}", "title": f"step {n}", "tool": name, "args": {"n": n}, **extra}


@dataclass
class Desk:
    """Tools that note whether the planner had finished when they were called."""

    planned: bool = False
    calls: list[tuple[str, int, bool]] = field(default_factory=list)

    def on_event(self, event: Event) -> None:
        if isinstance(event, ModelCalled) and event.phase == "plan" and event.ok:
            self.planned = True

    def tools(self) -> list[Any]:
        @tool(side_effects="read_only")
        async def look(n: int) -> Any:
            """Read something."""
            self.calls.append(("look", n, self.planned))
            await asyncio.sleep(0.01)
            return {"look": n}

        @tool(side_effects="idempotent")
        async def put(n: int, idempotency_key: str | None = None) -> Any:
            """Write something once per key."""
            self.calls.append(("put", n, self.planned))
            return {"put": n}

        @tool(side_effects="unsafe")
        async def charge(n: int) -> Any:
            """Do something at most once."""
            self.calls.append(("charge", n, self.planned))
            return {"charge": n}

        return [look, put, charge]

    def early(self) -> list[tuple[str, int]]:
        return [(name, n) for name, n, planned in self.calls if not planned]


def streaming(*steps: dict[str, Any], stream_ms: float = 400, text: str | None = None) -> Any:
    plan = text if text is not None else {"kind": "plan", "steps": list(steps)}
    return ScriptedModel(
        rules=[("available_tools", plan)], default="the answer", stream_ms=stream_ms
    )


def go(desk: Desk, model: Any, **options: Any) -> RunResult:
    budget = options.pop("budget", Budget(max_plan_steps=6, max_execute_steps=8))
    return asyncio.run(
        run(
            "g",
            tools=desk.tools(),
            model=model,
            budget=budget,
            on_event=desk.on_event,
            run_id=RunId("r1"),
            **options,
        )
    )


FIVE_DAG = tuple(step(n, "look", depends_on=[]) for n in range(1, 6))


def test_the_stream_gives_each_step_once_its_object_is_closed() -> None:
    text = json.dumps({"kind": "plan", "steps": [step(1, "look"), step(2, "put"), step(3, "x")]})
    stream = PlanStream()
    got: list[tuple[int, Any]] = []
    for at in range(0, len(text), 3):
        for raw in stream.feed(text[at : at + 3]):
            got.append((at, raw))
    assert [raw for _, raw in got] == [step(1, "look"), step(2, "put"), step(3, "x")]
    assert got[-1][0] >= text.index('"id": "s3"')  # the last once its object is closed
    second = text.index('"id": "s2"')
    assert got[0][0] < second  # s1 as soon as s2 began, before s2 was written


@pytest.mark.parametrize(
    "text",
    ['{"kind": "plan", "steps": [{"id": "s1", "n": NaN}, {"id": "s2"}', "not json at all {["],
)
def test_the_stream_gives_nothing_from_text_that_is_not_a_plan(text: str) -> None:
    stream = PlanStream()
    assert [raw for ch in text for raw in stream.feed(ch)] == []


def test_read_only_steps_start_before_the_plan_is_complete() -> None:
    desk = Desk()
    result = go(desk, streaming(*FIVE_DAG))
    assert result.ok, result.message
    assert ("look", 1) in desk.early()  # started while the planner was still writing
    assert sorted(n for _, n, _ in desk.calls) == [1, 2, 3, 4, 5]  # each once


def test_idempotent_and_unsafe_steps_wait_for_the_whole_plan() -> None:
    desk = Desk()
    steps = (
        step(1, "look", depends_on=[]),
        step(2, "charge", depends_on=[]),
        step(3, "put", depends_on=[]),
        step(4, "look", depends_on=[]),
    )
    result = go(desk, streaming(*steps))
    assert result.ok, result.message
    assert {name for name, _ in desk.early()} <= {"look"} and ("look", 1) in desk.early()
    assert [(name, planned) for name, _, planned in desk.calls if name != "look"] == [
        ("charge", True),
        ("put", True),
    ]


@pytest.mark.parametrize(
    ("last", "reason"),
    [
        (
            step(5, "delete_everything", depends_on=[]),
            "invalid_plan:tool_not_allowed:delete_everything",
        ),
        (step(5, "charge", depends_on=["s9"]), "invalid_plan:unknown_dependency:s9"),
        (step(5, "charge", depends_on=[], extra=1), "invalid_plan:step_5_extra_keys"),
    ],
)
def test_a_plan_whose_last_step_is_invalid_stops_as_unstreamed_having_run_only_reads(
    last: dict[str, Any], reason: str
) -> None:
    steps = (
        step(1, "look", depends_on=[]),
        step(2, "look", depends_on=[]),
        step(3, "put"),
        step(4, "look", depends_on=[]),
        last,
    )
    desk, plain = Desk(), Desk()
    result = go(desk, streaming(*steps))
    unstreamed = go(plain, streaming(*steps), stream_plan=False)
    assert result.stop_reason == unstreamed.stop_reason == reason
    assert plain.calls == []
    assert desk.calls and {name for name, _, _ in desk.calls} == {"look"}
    assert all(not planned for _, _, planned in desk.calls)


def test_a_streamed_plan_ends_as_the_same_plan_unstreamed() -> None:
    steps = (
        step(1, "look"),
        step(2, "look", depends_on=["s1"]),
        step(3, "put", depends_on=["s1"]),
        step(4, "charge", depends_on=["s2", "s3"]),
        step(5, "look", depends_on=[]),
    )
    results = {}
    for stream in (True, False):
        desk = Desk()
        results[stream] = go(desk, streaming(*steps), stream_plan=stream).to_dict()
        for entry in results[stream]["trace"]:
            entry.pop("seconds")
        results[stream]["trace"].sort(key=lambda entry: entry["step_no"])
        results[stream].pop("usage")
    assert results[True] == results[False]
    assert results[True]["status"] == "ok"


def test_a_plan_in_order_still_runs_in_order() -> None:
    desk = Desk()
    steps = tuple(step(n, "look") for n in range(1, 5))  # no depends_on: in order
    assert go(desk, streaming(*steps, stream_ms=600)).ok
    assert [n for _, n, _ in desk.calls] == [1, 2, 3, 4]
    assert ("look", 1) in desk.early()


def test_text_that_breaks_off_stops_with_non_json_having_run_only_reads() -> None:
    good = json.dumps(
        {
            "kind": "plan",
            "steps": [
                step(1, "look", depends_on=[]),
                step(2, "look", depends_on=[]),
                step(3, "charge", depends_on=[]),
            ],
        }
    )
    broken = good[: good.index('"id": "s3"')] + '"id": "s3", "tool": '
    desk = Desk()
    result = go(desk, streaming(text=broken))
    assert result.stop_reason == "invalid_plan:non_json"
    assert sorted(n for _, n, _ in desk.calls) == [1, 2]  # closed by s3's start; no charge


def test_the_deadline_cuts_a_plan_still_streaming_and_its_early_steps() -> None:
    desk = Desk()

    @tool(side_effects="read_only")
    async def look(n: int) -> Any:
        """Read slowly."""
        desk.calls.append(("look", n, desk.planned))
        await asyncio.sleep(30)
        return n

    # s1 is whole a quarter into the stream (1.5 s), the deadline falls halfway (3 s): a busy
    # machine has 1.5 s to start s1 before it, and the stream 3 s more to go after it
    model = streaming(*FIVE_DAG, stream_ms=6000)
    result = asyncio.run(
        run("g", tools=[look], model=model, budget=Budget(max_seconds=3), on_event=desk.on_event)
    )
    assert result.stop_reason == "max_seconds"
    assert desk.early() and not desk.planned


def test_a_stored_streamed_run_keeps_the_plan_first_and_every_step(store: SqlStore) -> None:
    desk = Desk()
    result = go(desk, streaming(*FIVE_DAG), store=store)
    assert result.ok and desk.early()
    stored = store.load_run(RunId("r1"))
    assert stored.plan is not None and len(stored.plan.steps) == 5
    assert sorted(stored.finished_steps()) == [f"s{n}" for n in range(1, 6)]
    kinds = [event.kind for event in store.load_events(RunId("r1"))]
    assert kinds.count("StepFinished") == 5 and kinds[-1] == "RunStopped"
    assert kinds.index("RunStarted") == 0


def test_the_plan_event_comes_once_with_the_whole_plan() -> None:
    desk = Desk()
    plans: list[int] = []

    def watch(event: Event) -> None:
        desk.on_event(event)
        if isinstance(event, PlanCreated):
            plans.append(len(event.plan.steps))

    model = streaming(*FIVE_DAG)
    result = asyncio.run(run("g", tools=desk.tools(), model=model, on_event=watch))
    assert result.ok and plans == [5]


def test_a_step_that_started_early_and_failed_stops_the_run_with_its_plan() -> None:
    desk = Desk()
    steps = (step(1, "look"), {**step(2, "look"), "args": {"n": 1}}, step(3, "look"))
    result = go(desk, streaming(*steps))
    assert result.stop_reason == "loop_detected"  # s2 repeats s1's call
    assert result.plan is not None and len(result.plan.steps) == 3
    assert [n for _, n, _ in desk.calls] == [1]


_STEPS = st.lists(
    st.fixed_dictionaries(
        {
            "title": st.text(min_size=1, max_size=12),
            "tool": st.sampled_from(["look", "put"]),
            "args": st.dictionaries(
                st.text(min_size=1, max_size=5),
                st.one_of(st.integers(), st.text(max_size=8), st.booleans(), st.none()),
                max_size=3,
            ),
        }
    ),
    min_size=1,
    max_size=6,
)


@given(_STEPS, st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=60))
@settings(max_examples=200, deadline=None)
def test_any_split_of_a_plan_gives_its_steps_in_order_each_once(
    raw_steps: list[dict[str, Any]], sizes: list[int]
) -> None:
    steps = [{"id": f"s{n}", **raw} for n, raw in enumerate(raw_steps, start=1)]
    text = json.dumps({"kind": "plan", "steps": steps}, indent=None if len(sizes) % 2 else 1)
    stream, given_steps, at = PlanStream(), [], 0
    for size in sizes * (len(text) // max(1, sum(sizes)) + 1):
        if at >= len(text):
            break
        given_steps += stream.feed(text[at : at + size])
        assert given_steps == steps[: len(given_steps)]  # a prefix, never a guess
        at += size
    assert given_steps == steps  # once the text is whole, every step is out


def test_a_step_that_ended_before_its_done_callback_ran_counts_as_finished() -> None:
    # the race a busy loop makes: handover() runs after an early step's task ended but
    # before the task's done callback did; the step must not be handed to the scheduler
    # again (a second call of the same tool and arguments is loop_detected)
    from taskdecomp.streaming import EarlySteps

    async def scenario() -> tuple[set[str], dict[str, asyncio.Task[None]]]:
        early = EarlySteps(None, max_steps=3, max_parallel=2)  # type: ignore[arg-type]

        async def step() -> None:
            return None

        task = asyncio.create_task(step())
        task.add_done_callback(lambda done: early._done(done, step_id="step_1"))  # type: ignore[arg-type]
        early._tasks["step_1"] = task  # type: ignore[index]
        await asyncio.sleep(0)  # the task ends; its done callback is queued behind us
        assert task.done() and "step_1" not in early.finished
        running = await early.handover()
        return set(early.finished), dict(running)

    finished, running = asyncio.run(scenario())
    assert finished == {"step_1"} and running == {}
