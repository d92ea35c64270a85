"""Runs with a store: checkpoints, resume after a crash, side-effect classes, budgets."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from sqlalchemy import func, select, update

from taskdecomp import Budget, ConfigError, ModelRequest, ModelResponse, ScriptedModel, tool
from taskdecomp.engine import resume, run
from taskdecomp.errors import CorruptRecordError, StoreError
from taskdecomp.events import Event, StepFinished
from taskdecomp.run import RunId, RunResult
from taskdecomp.store import Checkpoint, Lease, SqlStore, codec, schema


class Crash(BaseException):
    """Stands for the process dying: nothing in the engine catches it (outside a tool)."""


@dataclass
class Tools:
    """Async tools that record every call; ``crash``/``slow`` make chosen calls misbehave.

    A crashing call takes effect, then the process "dies" as its step ends, before anything
    about it is stored: :meth:`watch`, the run's event subscriber, raises :class:`Crash` (a
    tool's own exceptions are tool errors, so the tool cannot raise it).
    """

    calls: list[tuple[str, int, str | None]] = field(default_factory=list)
    crash: set[tuple[str, int]] = field(default_factory=set)
    slow: dict[tuple[str, int], float] = field(default_factory=dict)
    big: int = 0
    dying: bool = False

    async def _call(self, name: str, n: int, key: str | None = None) -> Any:
        self.calls.append((name, n, key))
        await asyncio.sleep(self.slow.get((name, n), 0))
        if (name, n) in self.crash:
            self.crash.discard((name, n))
            self.dying = True
        return "x" * self.big if self.big else {"tool": name, "n": n}

    def watch(self, event: Event) -> None:
        if self.dying and isinstance(event, StepFinished):
            self.dying = False
            raise Crash

    def functions(self) -> list[Any]:
        @tool(side_effects="read_only")
        async def look(n: int) -> Any:
            """Read something."""
            return await self._call("look", n)

        @tool(side_effects="idempotent")
        async def put(n: int, idempotency_key: str | None = None) -> Any:
            """Write something, once per key."""
            return await self._call("put", n, idempotency_key)

        @tool(side_effects="unsafe")
        async def charge(n: int) -> Any:
            """Do something that must not happen twice."""
            return await self._call("charge", n)

        return [look, put, charge]

    def count(self, name: str, n: int) -> int:
        return sum(1 for call in self.calls if call[:2] == (name, n))


def step(n: int, tool_name: str, arg: int | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"s{n}",
        "title": f"step {n}",
        "tool": tool_name,
        "args": {"n": n if arg is None else arg},
        **extra,
    }


def model(*steps: dict[str, Any]) -> ScriptedModel:
    plan = {"kind": "plan", "steps": list(steps)}
    return ScriptedModel(rules=[("available_tools", plan)], default="the answer")


THREE = (step(1, "look"), step(2, "put"), step(3, "charge"))


def start(
    tools: Tools, store: SqlStore, *steps: dict[str, Any], run_id: str = "r1", **options: Any
) -> RunResult:
    return asyncio.run(
        run(
            "goal",
            tools=tools.functions(),
            model=model(*(steps or THREE)),
            store=store,
            run_id=RunId(run_id),
            on_event=tools.watch,
            **options,
        )
    )


def crash(
    tools: Tools, store: SqlStore, *steps: dict[str, Any], run_id: str = "r1", **options: Any
) -> None:
    with pytest.raises(Crash):
        start(tools, store, *steps, run_id=run_id, **options)
    assert store.load_run(RunId(run_id)).summary.status == "running"


def again(
    tools: Tools, store: SqlStore, *steps: dict[str, Any], run_id: str = "r1", **options: Any
) -> RunResult:
    return asyncio.run(
        resume(
            run_id,
            store=store,
            tools=tools.functions(),
            model=model(*(steps or THREE)),
            **options,
        )
    )


def test_a_stored_run_reads_back_as_its_result(store: SqlStore) -> None:
    tools = Tools()
    result = start(tools, store)
    assert result.ok
    stored = store.load_run(RunId("r1"))
    assert stored.result().to_dict() == result.to_dict()
    assert stored.config["allow"] == ["charge", "look", "put"]
    assert stored.model == "scripted" and stored.tools is None
    kinds = [event.kind for event in store.load_events(RunId("r1"))]
    assert kinds[:2] == ["RunStarted", "ModelCalled"] and kinds[-1] == "RunStopped"
    assert kinds.count("StepFinished") == 3


def test_resume_after_a_crash_does_not_repeat_finished_steps(store: SqlStore) -> None:
    tools = Tools(crash={("put", 2)})
    crash(tools, store)
    result = again(tools, store)
    assert result.ok and result.answer == "the answer"
    assert [tools.count("look", 1), tools.count("put", 2), tools.count("charge", 3)] == [1, 2, 1]
    assert [entry.plan_step.id for entry in result.history] == ["s1", "s2", "s3"]
    assert [entry["observation"]["n"] for entry in result.to_dict()["history"]] == [1, 2, 3]
    assert result.usage.tool_calls == 3
    assert result.usage.llm_calls == 2  # the first segment's plan call, then the combine call
    assert store.load_run(RunId("r1")).segments == 2
    assert store.load_run(RunId("r1")).result().to_dict() == result.to_dict()


def test_an_unsafe_step_that_may_have_run_is_never_called_again(store: SqlStore) -> None:
    tools = Tools(crash={("charge", 3)})
    crash(tools, store)
    result = again(tools, store)
    assert result.status == "stopped"
    assert result.stop_reason == "interrupted_unknown_outcome:s3"
    assert result.message is not None and "'charge'" in result.message
    assert tools.count("charge", 3) == 1
    assert [entry.plan_step.id for entry in result.history] == ["s1", "s2"]

    before = store.load_run(RunId("r1"))
    assert again(tools, store) == before.result()
    assert tools.count("charge", 3) == 1
    assert store.load_run(RunId("r1")) == before


def test_an_unsafe_step_that_never_started_runs_on_resume(store: SqlStore) -> None:
    tools = Tools(crash={("put", 2)})
    crash(tools, store)
    assert (again(tools, store)).ok
    assert tools.count("charge", 3) == 1


def test_an_idempotent_step_sees_the_same_key_on_every_attempt(store: SqlStore) -> None:
    tools = Tools(crash={("put", 2)})
    crash(tools, store)
    assert (again(tools, store)).ok
    keys = [key for name, _, key in tools.calls if name == "put"]
    assert keys == ["r1:s2", "r1:s2"]


def test_a_read_only_step_cut_off_by_the_deadline_runs_again_with_a_fresh_deadline(
    store: SqlStore,
) -> None:
    tools = Tools(slow={("look", 2): 600})  # only the deadline ends it
    steps = (step(1, "look"), step(2, "look"), step(3, "put"))
    budget = Budget(max_seconds=1.0)
    first = start(tools, store, *steps, budget=budget)
    assert first.stop_reason == "max_seconds"
    assert store.load_run(RunId("r1")).resumable
    del tools.slow[("look", 2)]  # quick this time: a deadline carried over would still stop it
    result = again(tools, store, *steps)
    assert result.ok, result.message
    assert [tools.count("look", 1), tools.count("look", 2), tools.count("put", 3)] == [1, 2, 1]
    assert [(e.step_id, e.ok) for e in result.trace] == [
        ("s1", True),
        ("s2", False),
        ("s2", True),
        ("s3", True),
    ]
    assert result.usage.seconds > 1.0


def test_an_unsafe_step_cut_off_by_the_deadline_is_in_doubt(store: SqlStore) -> None:
    tools = Tools(slow={("charge", 3): 600})  # only the deadline ends it
    first = start(tools, store, budget=Budget(max_seconds=1.0))
    assert first.stop_reason == "max_seconds"
    attempts = store.load_run(RunId("r1")).attempts
    assert [(a.start.step_id, a.state) for a in attempts][-1] == ("s3", "cancelled")
    result = again(tools, store)
    assert result.stop_reason == "interrupted_unknown_outcome:s3"
    assert tools.count("charge", 3) == 1


def test_restored_calls_count_for_loop_detection_and_the_tool_budget(
    store: SqlStore,
) -> None:
    looping = (step(1, "look"), step(2, "look"), step(3, "look", arg=1))
    tools = Tools(crash={("look", 2)})
    crash(tools, store, *looping)
    assert (again(tools, store, *looping)).stop_reason == "loop_detected"

    tools = Tools(crash={("put", 2)})
    crash(tools, store, run_id="budget", budget=Budget(max_tool_calls=3))
    result = again(tools, store, run_id="budget")
    assert result.ok, result.stop_reason
    assert result.usage.tool_calls == 3


def test_a_dag_resumes_from_its_finished_steps(store: SqlStore) -> None:
    dag = (
        step(1, "look", depends_on=[]),
        step(2, "look", depends_on=["s1"]),
        step(3, "put", depends_on=["s1"]),
        step(4, "charge", depends_on=["s2", "s3"]),
    )
    tools = Tools(crash={("put", 3)}, slow={("put", 3): 0.05})
    crash(tools, store, *dag)
    assert store.load_run(RunId("r1")).finished_steps() == {"s1", "s2"}
    result = again(tools, store, *dag)
    assert result.ok
    assert [tools.count("look", 1), tools.count("look", 2)] == [1, 1]
    assert [tools.count("put", 3), tools.count("charge", 4)] == [2, 1]


class CrashingPlanner:
    name = "crashing"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        raise Crash


def test_a_run_that_crashed_while_planning_plans_again(store: SqlStore) -> None:
    tools = Tools()
    with pytest.raises(Crash):
        asyncio.run(
            run("goal", tools=tools.functions(), model=CrashingPlanner(), store=store, run_id="r1")
        )
    assert store.load_run(RunId("r1")).plan is None
    result = again(tools, store)
    assert result.ok and len(result.history) == 3


def test_an_observation_too_big_to_store_stops_the_step_cleanly(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(codec, "MAX_STORED_CHARS", 1000)
    tools = Tools(big=5000)
    result = start(tools, store)
    assert result.stop_reason == "tool_error:look"
    assert result.message is not None and "over the store's cap of 1,000" in result.message
    assert result.history == ()
    stored = store.load_run(RunId("r1"))
    assert (stored.summary.status, stored.summary.stop_reason) == ("stopped", "tool_error:look")
    assert [(a.state, a.trace.ok if a.trace else None) for a in stored.attempts] == [
        ("failed", False)
    ]


def test_resume_needs_tools_when_none_were_stored(store: SqlStore) -> None:
    tools = Tools(crash={("look", 1)})
    crash(tools, store)
    with pytest.raises(ConfigError, match=r"run 'r1' was started with tools given as Python"):
        asyncio.run(resume("r1", store=store, model=model(*THREE)))


def test_resume_refuses_a_run_whose_settings_do_not_decode(store: SqlStore) -> None:
    tools = Tools(crash={("look", 1)})
    crash(tools, store)
    with store.write() as conn:
        conn.execute(update(schema.runs).values(config='{"budget": {"max_tool_calls": 0}}'))
    with pytest.raises(CorruptRecordError, match=r"run 'r1': runs\.config does not decode"):
        again(tools, store)
    with store.read() as conn:
        assert conn.execute(select(func.count()).select_from(schema.attempts)).scalar_one() == 0


def test_a_run_without_a_store_is_unchanged(store: SqlStore) -> None:
    tools = Tools()
    result = asyncio.run(run("goal", tools=tools.functions(), model=model(*THREE)))
    assert result.ok and store.list_runs() == []
    assert replace(result, run_id=RunId("x")).to_dict()["history"][2]["observation"] == {
        "tool": "charge",
        "n": 3,
    }


class FailingCancelStore(SqlStore):
    """A store that cannot record cancelled attempts (its disk filled up, say)."""

    def checkpoint(
        self, run_id: RunId, checkpoint: Checkpoint, *, lease: Lease | None = None
    ) -> None:
        if checkpoint.state == "cancelled":
            raise StoreError("the disk is full")
        super().checkpoint(run_id, checkpoint, lease=lease)


def test_a_cancelled_attempt_that_cannot_be_recorded_still_ends_the_run(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = FailingCancelStore(store_url)
    tools = Tools(slow={("charge", 3): 600})  # only the deadline ends it
    result = start(tools, store, budget=Budget(max_seconds=1.0))
    assert result.stop_reason == "max_seconds"
    assert "could not record the cancelled attempt at 's3'" in caplog.text
    stored = store.load_run(RunId("r1"))
    assert stored.attempts[-1].state == "started"  # reads as a crash: still in doubt
    assert again(tools, store).stop_reason == "interrupted_unknown_outcome:s3"
    store.close()
