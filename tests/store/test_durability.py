"""Durability modes on both backends: what a run stores, how often it waits for the disk."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from taskdecomp import ConfigError, tool
from taskdecomp.engine import run
from taskdecomp.errors import StoreError
from taskdecomp.run import RunId
from taskdecomp.store import Checkpoint, Lease, SqlStore, open_store
from tests.clitools import cli
from tests.store.test_durable_runs import THREE, Tools, model, start, step

SIX = tuple(step(n, "look") for n in range(1, 7))


def stored_view(store: SqlStore, run_id: str) -> dict[str, Any]:
    """A stored run without what differs from one execution to the next."""
    stored = store.load_run(RunId(run_id))
    data = stored.to_dict()
    for entry in data["trace"]:
        entry.pop("seconds")
    return {key: data[key] for key in ("status", "stop_reason", "answer", "plan", "trace")} | {
        "history": data["history"],
        "attempts": [(a.start.step_id, a.state, a.start.side_effects) for a in stored.attempts],
    }


def test_an_async_run_stores_what_a_sync_run_stores(store: SqlStore) -> None:
    for mode in ("sync", "async"):
        assert start(Tools(), store, run_id=mode, durability=mode).ok
    assert stored_view(store, "async") == stored_view(store, "sync")
    events = {mode: [e.kind for e in store.load_events(RunId(mode))] for mode in ("sync", "async")}
    assert events["async"] == events["sync"] and events["async"][-1] == "RunStopped"


def test_async_waits_for_the_disk_once_per_run_sync_once_per_step(store: SqlStore) -> None:
    fsyncs = {}
    for mode in ("sync", "async"):
        before = store.durable_commits
        assert start(Tools(), store, *SIX, run_id=mode, durability=mode).ok
        fsyncs[mode] = store.durable_commits - before
    assert fsyncs["async"] == 1  # the end, with everything queued before it
    assert fsyncs["sync"] >= 6 + 2  # every step, the plan and the end (and the start)


def test_an_unsafe_intent_is_on_disk_with_every_earlier_step_before_the_call(
    store: SqlStore, store_url: str
) -> None:
    seen: list[tuple[list[tuple[str, str]], list[str]]] = []
    other = open_store(store_url)  # another connection: sees only what was committed

    @tool(side_effects="read_only")
    async def look(n: int) -> int:
        """Read something."""
        return n

    @tool(side_effects="unsafe")
    async def charge(n: int) -> int:
        """Do something at most once."""
        stored = other.load_run(RunId("r1"))
        attempts = [(a.start.step_id, a.state) for a in stored.attempts]
        seen.append((attempts, sorted(stored.finished_steps())))
        return n

    steps = (step(1, "look"), step(2, "look"), step(3, "charge"))
    try:
        result = asyncio.run(
            run("g", tools=[look, charge], model=model(*steps), store=store, run_id=RunId("r1"))
        )
    finally:
        other.close()
    assert result.ok
    assert seen == [([("s1", "ok"), ("s2", "ok"), ("s3", "started")], ["s1", "s2"])]


class FailingStore(SqlStore):
    """A store whose disk fills up at the second step's checkpoint."""

    def checkpoints(
        self, run_id: RunId, checkpoints: Sequence[Checkpoint], *, lease: Lease | None = None
    ) -> None:
        if any(checkpoint.attempt.step_no == 2 for checkpoint in checkpoints):
            raise StoreError("the disk is full")
        super().checkpoints(run_id, checkpoints, lease=lease)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_checkpoint_the_store_refuses_stops_the_run_with_the_store_error(
    store_url: str, mode: str
) -> None:
    store = FailingStore(store_url)
    tools = Tools()
    try:
        with pytest.raises(StoreError, match="the disk is full"):
            start(tools, store, *THREE[:2], step(3, "look"), durability=mode)
        stored = store.load_run(RunId("r1"))
    finally:
        store.close()
    assert stored.summary.status == "running"  # left for resume, never marked finished
    assert "s2" not in stored.finished_steps()


def test_an_unknown_durability_is_a_clear_error(store: SqlStore) -> None:
    with pytest.raises(ConfigError, match="unknown durability 'fast'; choose one of: async, sync"):
        start(Tools(), store, durability="fast")
    assert store.list_runs() == []


def test_the_command_line_takes_the_mode_from_the_flag_or_the_environment(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = tmp_path / "plan.json"
    plan = {"kind": "plan", "steps": [step(n, "look") for n in range(1, 4)]}
    rules = [{"match": "available_tools", "response": plan}]
    script.write_text(json.dumps({"rules": rules, "default": "done"}))
    tools = tmp_path / "tools.py"
    tools.write_text("def look(n: int) -> int:\n    '''Read.'''\n    return n\n")
    db = tmp_path / "runs.db"
    args = ["run", "g", "--tools", str(tools), "--model", f"scripted:{script}", "--db", str(db)]
    monkeypatch.setenv("TASKDECOMP_DURABILITY", "sometimes")
    code, _, err = cli(capsys, *args, "--json")
    assert code == 2
    assert "TASKDECOMP_DURABILITY" in err
    code, _, err = cli(capsys, *args, "--json", "--durability", "sometimes")
    assert code == 2
    assert "'sometimes' is not one of 'async', 'sync'" in err
    monkeypatch.setenv("TASKDECOMP_DURABILITY", "sync")
    code, out, err = cli(capsys, *args, "--json", "--durability", "async")
    assert code == 0, err
    assert json.loads(out)["status"] == "ok"


def test_runs_at_once_store_everything_and_share_the_disk_waits(store: SqlStore) -> None:
    runs = 8

    async def all_at_once() -> list[Any]:
        return await asyncio.gather(
            *(
                run("goal", tools=Tools().functions(), model=model(*THREE), store=store,
                    run_id=RunId(f"r{n}"))
                for n in range(runs)
            )
        )  # fmt: skip

    before = store.durable_commits
    results = asyncio.run(all_at_once())
    fsyncs = store.durable_commits - before
    assert all(result.ok for result in results)
    assert 1 <= fsyncs <= runs  # at most one a run: the ends share them when they can
    alone = start(Tools(), store, run_id="alone")
    for result in results:
        assert stored_view(store, result.run_id) == stored_view(store, alone.run_id)


def test_runs_at_once_cancelled_early_all_end_cancelled(store: SqlStore) -> None:
    runs = 8

    async def cancelled_at_once() -> None:
        together = asyncio.gather(
            *(
                run("goal", tools=Tools().functions(), model=model(*THREE), store=store,
                    run_id=RunId(f"r{n}"))
                for n in range(runs)
            )
        )  # fmt: skip
        await asyncio.sleep(0)  # each run goes as far as its first wait
        together.cancel()
        with pytest.raises(asyncio.CancelledError):
            await together

    asyncio.run(cancelled_at_once())
    ends = [
        (stored.summary.status, stored.summary.stop_reason)
        for stored in (store.load_run(summary.run_id) for summary in store.list_runs())
    ]
    assert ends == [("stopped", "cancelled")] * runs  # none left running under a lease


def test_a_run_that_fails_before_it_starts_gives_up_its_writer_and_lease(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taskdecomp.durable import take_over
    from taskdecomp.strategies.plan_execute import PlanExecute
    from taskdecomp.writer import lane

    def broken(self: object, setup: object, options: object) -> None:
        raise RuntimeError("cannot start")

    monkeypatch.setattr(PlanExecute, "start", broken)
    with pytest.raises(RuntimeError, match="cannot start"):
        start(Tools(), store, run_id="broken")
    later = lane(store)
    assert later._writer._lanes == 1  # only this one: the failed run left the writer
    later.close()
    take_over(store, RunId("broken"), seconds=30)  # no lease left held by nobody


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_new_run_is_committed_before_its_first_model_call(
    store: SqlStore, store_url: str, mode: str
) -> None:
    other = open_store(store_url)  # another connection: sees only what was committed
    seen: list[str] = []
    planner = model(*THREE)
    answer = planner.complete

    async def complete(request: Any) -> Any:
        if not seen:
            seen.append(other.load_run(RunId("fresh")).summary.status)
        return await answer(request)

    planner.complete = complete  # type: ignore[method-assign]
    try:
        result = asyncio.run(
            run("goal", tools=Tools().functions(), model=planner, store=store, durability=mode,
                run_id=RunId("fresh"))
        )  # fmt: skip
    finally:
        other.close()
    assert result.ok
    assert seen == ["running"]


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_run_whose_id_is_taken_fails_and_leaves_the_stored_run_alone(
    store: SqlStore, mode: str
) -> None:
    first = start(Tools(), store, run_id="taken")
    before = stored_view(store, "taken")
    tools = Tools()
    with pytest.raises(StoreError, match="'taken' is already stored"):
        asyncio.run(
            run("goal", tools=tools.functions(), model=model(*THREE), store=store,
                durability=mode, run_id=RunId("taken"))
        )  # fmt: skip
    assert tools.calls == []  # nothing was called for a run that could not be stored
    assert first.ok and stored_view(store, "taken") == before
