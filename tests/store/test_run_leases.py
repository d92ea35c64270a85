"""The engine under a lease: holding it, being taken over, the refusal, the settings.

"Another process" is a second store on the same database whose clock runs ahead of the
run's lease, or one that shares a hand-moved :class:`~tests.store.conftest.Clock` with the
run's store, so it may take the run over at the moment a test chooses. No test waits for
a lease to expire: a busy machine can neither make one expire early nor keep it alive.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from taskdecomp import Budget, ConfigError, ModelRequest, RunLeasedError, ScriptedModel
from taskdecomp.budget import Meter, Usage
from taskdecomp.durable import Journal
from taskdecomp.engine import resume, run
from taskdecomp.events import Event, EventBus, StepStarted
from taskdecomp.gateway import ToolGateway
from taskdecomp.run import RunId
from taskdecomp.runtime import RunContext
from taskdecomp.stops import StopRun
from taskdecomp.store import Lease, NewRun, SqlStore, open_store
from taskdecomp.tools import Toolset
from tests.clitools import cli
from tests.store.conftest import Clock
from tests.store.test_durable_runs import THREE, Tools, again, crash, model


@pytest.fixture
def later(store_url: str) -> Iterator[SqlStore]:
    """The same database, seen by a process whose clock is 100 s ahead."""
    opened = open_store(store_url, now=lambda: time.time() + 100)
    yield opened
    opened.close()


def take_over_at(step_no: int, other: SqlStore, owner: str) -> Callable[[Event], None]:
    """An event handler: when step ``step_no`` starts, ``other`` takes the run over."""

    def on_event(event: Event) -> None:
        if isinstance(event, StepStarted) and event.step_no == step_no:
            other.acquire_lease(event.run_id, owner=owner, ttl=30)

    return on_event


async def go_async(tools: Tools, store: SqlStore, **options: Any) -> Any:
    return await run(
        "goal",
        tools=tools.functions(),
        model=model(*THREE),
        store=store,
        run_id=RunId("r1"),
        **options,
    )


def go(tools: Tools, store: SqlStore, **options: Any) -> Any:
    return asyncio.run(go_async(tools, store, **options))


def test_a_run_holds_its_lease_while_in_flight_and_ends_it_when_it_finishes(
    store: SqlStore,
) -> None:
    held: list[Lease | None] = []

    def watch(event: Event) -> None:
        if isinstance(event, StepStarted):
            held.append(store.load_run(RunId("r1")).lease)

    assert go(Tools(), store, on_event=watch, lease_seconds=7).ok
    assert [(lease.epoch, round(lease.ttl, 3)) for lease in held if lease] == [(1, 7)] * 3
    assert len({lease.owner for lease in held if lease}) == 1
    assert store.load_run(RunId("r1")).lease is None


def leased_until(store: SqlStore) -> float | None:
    lease = store.load_run(RunId("r1")).lease
    return None if lease is None else lease.expires_at


def test_the_heartbeat_keeps_a_run_owned_through_a_step_longer_than_its_lease(
    store_url: str, clock: Clock
) -> None:
    store, other = open_store(store_url, now=clock), open_store(store_url, now=clock)
    refused: list[RunLeasedError] = []

    async def hold(n: int) -> int:
        """Outlast the lease three times over on the stores' clock, as the heartbeat runs."""
        for _ in range(3):
            clock.at += 0.2  # within the lease (0.3 s) the heartbeat last renewed ...
            renewed = clock.at + 0.3
            until = time.monotonic() + 60
            while (leased_until(store) or 0) < renewed:  # ... until it renews it again
                assert time.monotonic() < until, "the heartbeat did not renew the lease"
                await asyncio.sleep(0.01)
        try:
            other.acquire_lease(RunId("r1"), owner="other", ttl=30)
        except RunLeasedError as exc:
            refused.append(exc)
        return n

    def look(n: int) -> int:
        return n

    plan = {
        "kind": "plan",
        "steps": [
            {"id": "s1", "title": "hold", "tool": "hold", "args": {"n": 1}},
            {"id": "s2", "title": "look", "tool": "look", "args": {"n": 2}},
            {"id": "s3", "title": "look again", "tool": "look", "args": {"n": 3}},
        ],
    }
    try:
        result = asyncio.run(
            run(
                "goal",
                tools=[hold, look],
                model=ScriptedModel(responses=[plan, "done"]),
                store=store,
                run_id=RunId("r1"),
                lease_seconds=0.3,
            )
        )
    finally:
        store.close()
        other.close()
    assert result.ok, result.message
    assert clock.at > 1000.0 + 0.3 * 2  # step 1 took more than twice the lease
    assert len(refused) == 1 and refused[0].owner != "other"


@pytest.mark.parametrize(
    ("step_no", "called", "kept"),
    [
        (2, [("look", 1), ("put", 2)], {"s1"}),  # its checkpoint is refused
        (3, [("look", 1), ("put", 2)], {"s1", "s2"}),  # its unsafe intent is refused
    ],
)
@pytest.mark.parametrize("durability", ["sync", "async"])
def test_a_run_taken_over_stops_with_lease_lost_and_writes_nothing_more(
    store: SqlStore,
    later: SqlStore,
    step_no: int,
    called: list[Any],
    kept: set[str],
    durability: str,
) -> None:
    tools = Tools()
    on_event = take_over_at(step_no, later, "host:9:new")
    result = go(tools, store, on_event=on_event, durability=durability)
    assert (result.status, result.stop_reason, result.answer) == ("stopped", "lease_lost", None)
    assert "'host:9:new' took it over at epoch 2 after that lease expired" in str(result.message)
    assert [call[:2] for call in tools.calls] == called  # charge never ran
    stored = store.load_run(RunId("r1"))
    assert (stored.summary.status, stored.summary.stop_reason) == ("running", None)
    assert stored.lease is not None and (stored.lease.owner, stored.lease.epoch) == (
        "host:9:new",
        2,
    )
    recorded = {a.start.step_id for a in stored.attempts}
    if durability == "sync":
        assert stored.finished_steps() == recorded == kept
    else:  # steps still queued for their group commit when the run was taken are lost
        assert stored.finished_steps() == recorded and recorded <= kept
    assert "RunStopped" not in [e.kind for e in store.load_events(RunId("r1"))]


def test_a_resume_is_refused_while_another_owner_is_alive_and_writes_nothing(
    store: SqlStore, later: SqlStore
) -> None:
    tools = Tools(crash={("put", 2)})
    crash(tools, store)
    assert store.load_run(RunId("r1")).lease is None  # a run that raised gave its lease up
    events = len(store.load_events(RunId("r1")))
    store.acquire_lease(RunId("r1"), owner="host:7:alive", ttl=30)
    with pytest.raises(RunLeasedError, match="its owner 'host:7:alive' holds the lease"):
        again(tools, store)
    stored = store.load_run(RunId("r1"))
    assert (stored.segments, len(store.load_events(RunId("r1")))) == (1, events)
    later_again = resume("r1", store=later, tools=tools.functions(), model=model(*THREE))
    result = asyncio.run(later_again)  # 100 s later: that lease has expired
    assert result.ok and tools.count("put", 2) == 2 and tools.count("charge", 3) == 1
    assert later.load_run(RunId("r1")).segments == 2


@pytest.mark.parametrize("seconds", [0.0, 0.05, -1.0, float("nan")])
def test_a_lease_too_short_is_refused_before_anything_is_stored(
    store: SqlStore, seconds: float
) -> None:
    with pytest.raises(ConfigError, match=r"lease_seconds .* is too short; give at least 0\.1"):
        go(Tools(), store, lease_seconds=seconds)
    assert store.list_runs() == []


def test_no_model_is_called_once_the_lease_is_known_lost(store: SqlStore, later: SqlStore) -> None:
    new = NewRun(run_id=RunId("r1"), goal="g", model=None, tools=None, config={})
    lease = store.create_run(new, owner="me", ttl=30)
    later.acquire_lease(RunId("r1"), owner="other", ttl=30)
    journal = Journal(store, lease, segment=1, usage=Usage)
    journal.renew()  # the heartbeat finds the run taken over
    assert journal.lost is not None and journal.lost.owner == "other"
    meter = Meter(budget=Budget())
    ctx = RunContext(
        run_id=RunId("r1"),
        goal="g",
        model=ScriptedModel(responses=["never asked"]),
        gateway=ToolGateway(allow=(), toolset=Toolset.from_functions([]), meter=meter),
        meter=meter,
        events=EventBus([]),
        journal=journal,
    )
    with pytest.raises(StopRun) as stop:
        asyncio.run(ctx.ask(ModelRequest(phase="finalize", messages=())))
    assert stop.value.reason == "lease_lost" and "'other' took it over" in stop.value.message
    assert meter.llm_calls == 0


def test_the_cli_shows_the_owner_and_refuses_a_resume_in_one_line(
    store: SqlStore, store_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    tools = tmp_path / "tools.py"
    tools.write_text("def look(n: int) -> int:\n    return n\n")
    script = tmp_path / "script.json"
    script.write_text('["never asked"]')
    config: dict[str, Any] = {"budget": {}, "allow": ["look"], "combiner_model": None}
    new = NewRun(
        run_id=RunId("r1"), goal="g", model=f"scripted:{script}", tools=str(tools), config=config
    )
    store.create_run(new, owner="box:4242:9f3a1c", ttl=30)  # as a process that died left it
    code, out, err = cli(capsys, "show", "r1", "--db", store_url)
    assert code == 0 and "owner box:4242:9f3a1c · epoch 1 · lease expires" in out
    code, out, err = cli(capsys, "resume", "r1", "--db", store_url)
    assert code == 2 and out == ""
    assert err.startswith(
        "taskdecomp: error: run 'r1' is in flight in another process: its owner "
        "'box:4242:9f3a1c' holds the lease for"
    )
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("0.01", "lease_seconds 0.01 is too short; give at least 0.1"),
        ("soon", "bad environment setting: TASKDECOMP_LEASE_SECONDS"),
    ],
)
def test_the_lease_length_comes_from_the_environment(
    store_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    value: str,
    complaint: str,
) -> None:
    monkeypatch.setenv("TASKDECOMP_LEASE_SECONDS", value)
    tools = tmp_path / "tools.py"
    tools.write_text("def look(n: int) -> int:\n    return n\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["not a plan", "never"]))
    argv = ("run", "g", "--tools", str(tools), "--model", f"scripted:{script}", "--db", store_url)
    code, _, err = cli(capsys, *argv)
    assert code == 2 and complaint in err and err.count("\n") == 1
    store = open_store(store_url)
    assert store.list_runs() == []
    store.close()


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_a_process_that_stalled_past_its_lease_calls_nothing_once_taken_over(
    store_url: str, clock: Clock, durability: str
) -> None:
    store, other = open_store(store_url, now=clock), open_store(store_url, now=clock)
    looked: list[int] = []

    async def stall(n: int) -> int:
        """Hold the event loop past the lease (no heartbeat), while another takes the run."""
        clock.at += 31
        other.acquire_lease(RunId("r1"), owner="host:9:new", ttl=30)
        return n

    def look(n: int) -> int:
        """A read-only call the stalled process must not make any more."""
        looked.append(n)
        return n

    plan = {
        "kind": "plan",
        "steps": [
            {"id": "s1", "title": "stall", "tool": "stall", "args": {"n": 1}},
            {"id": "s2", "title": "look", "tool": "look", "args": {"n": 2}},
            {"id": "s3", "title": "look again", "tool": "look", "args": {"n": 3}},
        ],
    }
    try:
        result = asyncio.run(
            run(
                "goal",
                tools=[stall, look],
                model=ScriptedModel(responses=[plan, "done"]),
                store=store,
                run_id=RunId("r1"),
                lease_seconds=30,
                durability=durability,
            )
        )
    finally:
        store.close()
        other.close()
    assert (result.stop_reason, looked) == ("lease_lost", [])
    assert "'host:9:new' took it over" in str(result.message)
