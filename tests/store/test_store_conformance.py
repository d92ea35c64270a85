"""One conformance suite that every store backend passes (SQLite file and PostgreSQL)."""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, func, insert, select, update

from taskdecomp import stops
from taskdecomp.budget import Usage
from taskdecomp.errors import (
    CorruptRecordError,
    LeaseLostError,
    RunLeasedError,
    RunNotFoundError,
    StoreError,
    StoreValueError,
)
from taskdecomp.plan import Plan, Step, TaskId
from taskdecomp.run import HistoryEntry, RunId, RunResult, TraceEntry
from taskdecomp.store import (
    AttemptStart,
    Checkpoint,
    EventRecord,
    Lease,
    NewRun,
    SqlStore,
    codec,
    normalize_url,
    open_store,
    reads,
    rows,
    schema,
)
from tests.store.conftest import Clock

AWKWARD = 'nul:\x00 surrogate:\ud800 other:\udfff emoji:\U0001f600 quote:" backslash:\\ é'


def new_run(run_id: str = "r1", goal: str = "a goal", **config: Any) -> NewRun:
    return NewRun(
        run_id=RunId(run_id),
        goal=goal,
        model="scripted:plan.json",
        tools="tools.py",
        config={"budget": {"max_tool_calls": 8}, "allow": ["a", "b"], **config},
    )


def make_plan(*ids: str) -> Plan:
    return Plan(
        steps=tuple(
            Step(id=TaskId(i), title=f"do {i}", tool="t", args={"n": n}) for n, i in enumerate(ids)
        )
    )


def start(step_id: str, no: int = 1, side_effects: Any = "read_only", run_id: str = "r1") -> Any:
    return AttemptStart(
        step_no=no,
        step_id=TaskId(step_id),
        segment=1,
        side_effects=side_effects,
        idempotency_key=f"{run_id}:{step_id}",
    )


def trace(step_id: str, no: int = 1, ok: bool = True, **extra: Any) -> TraceEntry:
    return TraceEntry(
        step_no=no, step_id=TaskId(step_id), tool="t", args_hash="abc", ok=ok, **extra
    )


def finish(store: SqlStore, plan: Plan, *, run_id: str = "r1", answer: str = "done") -> RunResult:
    result = RunResult(
        run_id=RunId(run_id),
        status="ok",
        stop_reason=stops.SUCCESS,
        answer=answer,
        plan=plan,
        usage=Usage(llm_calls=2, tool_calls=1, seconds=0.5),
    )
    store.finish_run(RunId(run_id), result, events=[])
    return result


def checkpoint_ok(
    store: SqlStore,
    plan: Plan,
    step_no: int,
    observation: Any,
    *,
    attempt_id: int | None = None,
    lease: Lease | None = None,
) -> None:
    step = plan.steps[step_no - 1]
    store.checkpoint(
        RunId("r1"),
        Checkpoint(
            attempt=start(step.id, step_no),
            attempt_id=attempt_id,
            state="ok",
            trace=trace(step.id, step_no),
            history=HistoryEntry(step_no=step_no, plan_step=step, observation=observation),
            usage=Usage(tool_calls=step_no),
            events=[EventRecord(kind="StepFinished", at=1.0, data={"step_no": step_no})],
        ),
        lease=lease,
    )


def count(store: SqlStore, table: Any) -> int:
    with store.read() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def test_a_new_run_is_stored_running_with_its_settings(store: SqlStore) -> None:
    store.create_run(new_run(combiner_model=None))
    stored = store.load_run(RunId("r1"))
    assert stored.summary.status == "running"
    assert stored.summary.stop_reason is None and stored.summary.finished_at is None
    assert (stored.model, stored.tools, stored.segments) == ("scripted:plan.json", "tools.py", 1)
    assert stored.config == {
        "budget": {"max_tool_calls": 8},
        "allow": ["a", "b"],
        "combiner_model": None,
    }
    assert stored.plan is None and stored.history == () and stored.attempts == ()
    assert stored.resumable


def test_a_taken_run_id_is_refused(store: SqlStore) -> None:
    store.create_run(new_run())
    with pytest.raises(StoreError, match="'r1' is already stored"):
        store.create_run(new_run(goal="another"))
    assert store.load_run(RunId("r1")).summary.goal == "a goal"


def test_an_unknown_run_id_names_the_id_and_how_to_list(store: SqlStore) -> None:
    with pytest.raises(RunNotFoundError, match=r"no run 'nope'.*taskdecomp runs"):
        store.load_run(RunId("nope"))


def test_plan_checkpoints_and_finish_round_trip(store: SqlStore) -> None:
    plan = make_plan("s1", "s2")
    store.create_run(new_run())
    store.save_plan(RunId("r1"), plan, events=[EventRecord(kind="PlanCreated", at=1.0, data={})])
    checkpoint_ok(store, plan, 1, {"rows": [1, 2.5, None, True]})
    checkpoint_ok(store, plan, 2, "text")
    result = finish(store, plan)

    stored = store.load_run(RunId("r1"))
    assert stored.plan == plan
    assert [(h.step_no, h.plan_step, h.observation) for h in stored.history] == [
        (1, plan.steps[0], {"rows": [1, 2.5, None, True]}),
        (2, plan.steps[1], "text"),
    ]
    assert stored.trace == (trace("s1", 1), trace("s2", 2))
    assert stored.summary.status == "ok" and stored.summary.stop_reason == "success"
    assert stored.summary.finished_at is not None
    assert stored.result() == replace(result, trace=stored.trace, history=stored.history)
    assert not stored.resumable
    assert [e.kind for e in store.load_events(RunId("r1"))] == [
        "PlanCreated",
        "StepFinished",
        "StepFinished",
    ]


def test_an_intent_is_committed_alone_then_completed_in_place(store: SqlStore) -> None:
    plan = make_plan("s1")
    store.create_run(new_run())
    store.save_plan(RunId("r1"), plan, events=[])
    attempt_id = store.record_intent(RunId("r1"), start("s1", side_effects="unsafe"))

    pending = store.load_run(RunId("r1"))
    assert [(a.id, a.state, a.trace) for a in pending.attempts] == [(attempt_id, "started", None)]
    assert pending.in_doubt() == "s1"

    checkpoint_ok(store, plan, 1, 42, attempt_id=attempt_id)
    done = store.load_run(RunId("r1"))
    assert [(a.id, a.state) for a in done.attempts] == [(attempt_id, "ok")]
    assert done.in_doubt() is None
    assert done.finished_steps() == {"s1"}


@pytest.mark.parametrize(
    ("side_effects", "state", "in_doubt"),
    [
        ("unsafe", "cancelled", True),
        ("unsafe", "failed", False),
        ("idempotent", "cancelled", False),
        ("read_only", "started", False),
    ],
)
def test_only_unsafe_attempts_without_an_outcome_are_in_doubt(
    store: SqlStore, side_effects: Any, state: Any, in_doubt: bool
) -> None:
    store.create_run(new_run())
    store.save_plan(RunId("r1"), make_plan("s1"), events=[])
    store.checkpoint(
        RunId("r1"),
        Checkpoint(
            attempt=start("s1", side_effects=side_effects),
            attempt_id=None,
            state=state,
            trace=trace("s1", ok=False, error="cancelled before it finished"),
            usage=Usage(),
        ),
    )
    assert store.load_run(RunId("r1")).in_doubt() == ("s1" if in_doubt else None)


def test_awkward_text_round_trips_identically(store: SqlStore) -> None:
    step_id = f"step {AWKWARD}"
    plan = Plan(steps=(Step(id=TaskId(step_id), title=AWKWARD, tool="t", args={AWKWARD: AWKWARD}),))
    long_value = AWKWARD * 50_000  # about 3.5 million characters
    observation = {"text": AWKWARD, AWKWARD: [long_value, "\x00" * 10]}
    run_id = f"run {AWKWARD}"
    store.create_run(new_run(run_id, goal=AWKWARD, note=AWKWARD))
    store.save_plan(RunId(run_id), plan, events=[])
    store.checkpoint(
        RunId(run_id),
        Checkpoint(
            attempt=start(step_id, run_id=run_id),
            attempt_id=None,
            state="ok",
            trace=trace(step_id, error=AWKWARD),
            history=HistoryEntry(step_no=1, plan_step=plan.steps[0], observation=observation),
            usage=Usage(),
            events=[EventRecord(kind="StepFinished", at=1.0, data={"error": AWKWARD})],
        ),
    )
    finish(store, plan, run_id=run_id, answer=AWKWARD)

    stored = store.load_run(RunId(run_id))
    assert stored.run_id == run_id
    assert stored.summary.goal == AWKWARD
    assert stored.config["note"] == AWKWARD
    assert stored.plan == plan
    assert stored.history[0].observation == observation
    assert stored.trace[0].error == AWKWARD
    assert stored.attempts[0].start.idempotency_key == f"{run_id}:{step_id}"
    assert stored.answer == AWKWARD
    assert store.load_events(RunId(run_id))[0].data == {"error": AWKWARD}
    assert [s.run_id for s in store.list_runs()] == [run_id]


def test_a_value_over_the_cap_is_refused_and_nothing_is_written(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = make_plan("s1")
    store.create_run(new_run())
    store.save_plan(RunId("r1"), plan, events=[])
    monkeypatch.setattr(codec, "MAX_STORED_CHARS", 1000)
    with pytest.raises(StoreValueError, match=r"observation of step 's1' is 2,002 characters"):
        checkpoint_ok(store, plan, 1, "x" * 2000)
    assert count(store, schema.attempts) == 0
    assert count(store, schema.steps) == 0
    assert count(store, schema.events) == 0
    with pytest.raises(StoreValueError, match="cannot be stored as JSON"):
        checkpoint_ok(store, plan, 1, {1, 2})


def test_list_runs_is_newest_first_and_limited(store_url: str) -> None:
    clock = itertools.count(1000.0)
    store = open_store(store_url, now=lambda: next(clock))
    for n in range(5):
        store.create_run(new_run(f"r{n}"))
    assert [s.run_id for s in store.list_runs()] == ["r4", "r3", "r2", "r1", "r0"]
    assert [s.run_id for s in store.list_runs(limit=2)] == ["r4", "r3"]
    finish(store, Plan(steps=()), run_id="r3")
    summary = store.list_runs(limit=2)[1]
    assert (summary.status, summary.stop_reason, summary.seconds) == ("ok", "success", 2.0)
    store.close()


def test_reopen_marks_the_run_running_for_a_new_segment(store: SqlStore) -> None:
    store.create_run(new_run())
    store.finish_run(
        RunId("r1"),
        RunResult(run_id=RunId("r1"), status="stopped", stop_reason=stops.MAX_SECONDS),
        events=[],
    )
    assert store.load_run(RunId("r1")).resumable
    store.reopen_run(RunId("r1"), segment=2, events=[])
    stored = store.load_run(RunId("r1"))
    assert (stored.summary.status, stored.summary.stop_reason, stored.segments) == (
        "running",
        None,
        2,
    )
    with pytest.raises(StoreError, match="'r1' was resumed by another process meanwhile"):
        store.reopen_run(RunId("r1"), segment=2, events=[])


@pytest.mark.parametrize(
    ("table", "column", "value", "complaint"),
    [
        (schema.runs, "config", "{not json", r"run 'r1': runs\.config does not decode"),
        (schema.runs, "usage", '{"llm_calls": "many"}', r"run 'r1': runs\.usage does not decode"),
        (schema.runs, "goal", 'a"b', r"runs\.goal does not decode"),
        (schema.runs, "status", "sleeping", r"runs\.status is 'sleeping', not one of queued"),
        (schema.plans, "plan", '[{"id": "s1"}]', r"run 'r1': plans\.plan does not decode"),
        (schema.steps, "observation", "[1,", r"run 'r1': step 's1' does not decode"),
        (schema.attempts, "state", "maybe", r"attempt \d+ state is 'maybe'"),
        (schema.attempts, "trace", '{"ok": 1}', r"attempt \d+ trace does not decode"),
    ],
)
def test_rows_that_do_not_decode_fail_closed(
    store: SqlStore, table: Any, column: str, value: str, complaint: str
) -> None:
    plan = make_plan("s1")
    store.create_run(new_run())
    store.save_plan(RunId("r1"), plan, events=[])
    checkpoint_ok(store, plan, 1, "fine")
    with store.write() as conn:
        conn.execute(update(table).values({column: value}))
    with pytest.raises(CorruptRecordError, match=complaint):
        store.load_run(RunId("r1"))


def test_a_step_result_outside_the_stored_plan_fails_closed(store: SqlStore) -> None:
    plan = make_plan("s1")
    store.create_run(new_run())
    store.save_plan(RunId("r1"), plan, events=[])
    other = replace(plan.steps[0], id=TaskId("ghost"))
    store.checkpoint(
        RunId("r1"),
        Checkpoint(
            attempt=start("ghost"),
            attempt_id=None,
            state="ok",
            trace=trace("ghost"),
            history=HistoryEntry(step_no=1, plan_step=other, observation=1),
            usage=Usage(),
        ),
    )
    with pytest.raises(CorruptRecordError, match="step 'ghost' has a result but is not in"):
        store.load_run(RunId("r1"))


def test_migrations_apply_once_and_are_recorded(store_url: str) -> None:
    first = open_store(store_url)
    first.close()
    second = open_store(store_url)
    with second.read() as conn:
        versions = list(conn.execute(select(schema.migrations.c.version)).scalars())
    assert versions == [m.version for m in schema.MIGRATIONS]
    second.close()


def test_a_database_from_a_newer_version_is_refused(store: SqlStore, store_url: str) -> None:
    with store.write() as conn:
        conn.execute(insert(schema.migrations).values(version=999, name="future", applied_at=0))
    with pytest.raises(StoreError, match="schema version 999, newer than this taskdecomp"):
        open_store(store_url)


def test_foreign_keys_are_enforced(store: SqlStore) -> None:
    with pytest.raises(StoreError, match="refused a write"):
        store.save_plan(RunId("missing"), make_plan("s1"), events=[])


def test_a_checkpoint_is_one_transaction(store: SqlStore) -> None:
    plan = make_plan("s1")
    store.create_run(new_run())
    store.save_plan(RunId("r1"), plan, events=[])
    checkpoint_ok(store, plan, 1, "first")
    before = (count(store, schema.attempts), count(store, schema.events))
    with pytest.raises(StoreError, match="refused a write"):
        checkpoint_ok(store, plan, 1, "again")  # the attempt is written, then the step clashes
    assert (count(store, schema.attempts), count(store, schema.events)) == before
    assert store.load_run(RunId("r1")).history[0].observation == "first"


def test_a_batch_stores_its_writes_events_in_order_and_all_or_nothing(
    store: SqlStore,
) -> None:
    plan = make_plan("s1", "s2")
    store.create_run(new_run())
    with store.batch(durable=False):  # a group commit: the events go in at its end
        store.save_plan(
            RunId("r1"), plan, events=[EventRecord(kind="PlanCreated", at=1.0, data={})]
        )
        checkpoint_ok(store, plan, 1, "first")
        checkpoint_ok(store, plan, 2, "second")
        store.finish_run(
            RunId("r1"),
            RunResult(run_id=RunId("r1"), status="ok", stop_reason=stops.SUCCESS, answer="a"),
            events=[EventRecord(kind="RunStopped", at=2.0, data={})],
        )
    kinds = [e.kind for e in store.load_events(RunId("r1"))]
    assert kinds == ["PlanCreated", "StepFinished", "StepFinished", "RunStopped"]
    store.create_run(new_run("r2"))
    with pytest.raises(StoreError, match="refused a write"), store.batch(durable=False):
        store.save_plan(
            RunId("r2"), plan, events=[EventRecord(kind="PlanCreated", at=1.0, data={})]
        )
        store.finish_run(  # no such run: no row to update, and its event is refused at the end
            RunId("missing"),
            RunResult(run_id=RunId("missing"), status="ok", stop_reason=stops.SUCCESS),
            events=[EventRecord(kind="RunStopped", at=2.0, data={})],
        )
    assert store.load_events(RunId("r2")) == [] and store.load_run(RunId("r2")).plan is None


def test_a_read_sees_one_snapshot_while_a_writer_commits(store: SqlStore) -> None:
    """A run read as its writer commits sees the run before the commit or after it, never
    a step's result without the plan it belongs to."""
    plan = make_plan("s1")
    store.create_run(new_run())
    with store.read() as conn:
        assert conn.execute(select(schema.runs.c.id)).scalar_one() == "r1"
        store.save_plan(RunId("r1"), plan, events=[])  # another connection commits
        checkpoint_ok(store, plan, 1, "first")
        assert reads.load_run(conn, RunId("r1"), store=store.name).plan is None
    assert store.load_run(RunId("r1")).history[0].observation == "first"


# --- leases: one owner per run ---------------------------------------------------------------


def holder(store: SqlStore, run_id: str = "r1") -> Lease | None:
    return store.load_run(RunId(run_id)).lease


def test_a_run_created_with_an_owner_is_leased_to_it_at_epoch_1(timed: SqlStore) -> None:
    lease = timed.create_run(new_run(), owner="host:1:a", ttl=30)
    assert lease == Lease(run_id=RunId("r1"), owner="host:1:a", epoch=1, ttl=30, expires_at=1030.0)
    assert holder(timed) == lease
    assert timed.create_run(new_run("r2")) is None
    assert holder(timed, "r2") is None
    assert timed.load_run(RunId("r1")).to_dict()["lease"] == {
        "owner": "host:1:a",
        "epoch": 1,
        "expires_at": 1030.0,
    }


def test_a_free_run_is_acquired_at_the_next_epoch(timed: SqlStore) -> None:
    timed.create_run(new_run())
    lease = timed.acquire_lease(RunId("r1"), owner="b", ttl=5)
    assert (lease.owner, lease.epoch, lease.expires_at) == ("b", 1, 1005.0)
    assert holder(timed) == lease
    with pytest.raises(RunNotFoundError, match="no run 'nope'"):
        timed.acquire_lease(RunId("nope"), owner="b", ttl=5)


def test_a_live_lease_refuses_another_owner_and_names_its_owner(
    timed: SqlStore, clock: Clock
) -> None:
    lease = timed.create_run(new_run(), owner="host:1:a", ttl=30)
    clock.at = 1029.5
    with pytest.raises(
        RunLeasedError,
        match=r"run 'r1' is in flight in another process: its owner 'host:1:a' holds the "
        r"lease for 0\.5s more",
    ) as refused:
        timed.acquire_lease(RunId("r1"), owner="host:2:b", ttl=30)
    assert (refused.value.owner, refused.value.expires_in) == ("host:1:a", 0.5)
    assert holder(timed) == lease


def test_an_expired_lease_is_taken_over_at_a_higher_epoch(timed: SqlStore, clock: Clock) -> None:
    timed.create_run(new_run(), owner="a", ttl=30)
    clock.at = 1030.5
    taken = timed.acquire_lease(RunId("r1"), owner="b", ttl=10)
    assert (taken.owner, taken.epoch, taken.ttl, taken.expires_at) == ("b", 2, 10, 1040.5)
    assert holder(timed) == taken


def test_renewals_and_fenced_writes_keep_a_lease_alive(timed: SqlStore, clock: Clock) -> None:
    lease = timed.create_run(new_run(), owner="a", ttl=10)
    clock.at = 1008.0
    renewed = timed.renew_lease(lease)
    assert renewed == replace(lease, expires_at=1018.0) == holder(timed)
    plan = make_plan("s1")
    timed.save_plan(RunId("r1"), plan, events=[], lease=renewed)  # an insert: no renewal
    clock.at = 1015.0
    checkpoint_ok(timed, plan, 1, "done", lease=renewed)  # the run's row: renewed
    clock.at = 1024.0
    with pytest.raises(RunLeasedError, match=r"'a' holds the lease for 1\.0s more"):
        timed.acquire_lease(RunId("r1"), owner="b", ttl=10)


def _stale_writes(plan: Plan) -> dict[str, Any]:
    """Every write a run makes, as the stale owner would make it."""
    step = plan.steps[1]
    history = HistoryEntry(step_no=2, plan_step=step, observation="late")
    late = Checkpoint(
        attempt=start("s2", 2),
        attempt_id=None,
        state="ok",
        trace=trace("s2", 2),
        history=history,
        usage=Usage(tool_calls=9),
        events=[EventRecord(kind="StepFinished", at=1.0, data={})],
    )
    result = RunResult(run_id=RunId("r1"), status="ok", stop_reason=stops.SUCCESS, answer="late")
    event = [EventRecord(kind="Late", at=1.0, data={})]
    return {
        "checkpoint": lambda s, a: s.checkpoint(RunId("r1"), late, lease=a),
        "intent": lambda s, a: s.record_intent(RunId("r1"), start("s2", 2, "unsafe"), lease=a),
        "plan": lambda s, a: s.save_plan(RunId("r1"), plan, events=event, lease=a),
        "finish": lambda s, a: s.finish_run(RunId("r1"), result, events=event, lease=a),
        "reopen": lambda s, a: s.reopen_run(RunId("r1"), segment=2, events=event, lease=a),
        "renew": lambda s, a: s.renew_lease(a),
    }


@pytest.mark.parametrize("batched", [False, True], ids=["alone", "in a batch"])
@pytest.mark.parametrize("write", ["checkpoint", "intent", "plan", "finish", "reopen", "renew"])
def test_a_fenced_write_from_a_stale_epoch_raises_and_writes_nothing(
    timed: SqlStore, clock: Clock, write: str, batched: bool
) -> None:
    """In a batch (a group commit) a checkpoint's fence is checked at the batch's end."""
    plan = make_plan("s1", "s2")
    stale = timed.create_run(new_run(), owner="host:1:a", ttl=30)
    timed.save_plan(RunId("r1"), plan, events=[], lease=stale)
    checkpoint_ok(timed, plan, 1, "first")  # a finished step, so there is something to keep
    clock.at = 1031.0
    current = timed.acquire_lease(RunId("r1"), owner="host:2:b", ttl=30)
    tables = (schema.plans, schema.steps, schema.attempts, schema.events)
    before = [count(timed, table) for table in tables], timed.load_run(RunId("r1")).to_dict()
    with (
        pytest.raises(
            LeaseLostError,
            match=r"run 'r1' is no longer held by 'host:1:a' \(epoch 1\): 'host:2:b' took it over "
            r"at epoch 2 after that lease expired; this process stopped without writing",
        ) as lost,
        timed.batch(durable=False) if batched else nullcontext(),
    ):
        _stale_writes(plan)[write](timed, stale)
    assert (lost.value.owner, lost.value.epoch) == ("host:2:b", 2)
    after = [count(timed, table) for table in tables], timed.load_run(RunId("r1")).to_dict()
    assert after == before
    assert holder(timed) == current


@pytest.mark.parametrize("state", [None, {"turns": 1}], ids=["rows only", "with a state"])
def test_in_a_batch_a_stale_checkpoint_that_updates_rows_is_fenced_before_it_does(
    timed: SqlStore, clock: Clock, state: dict[str, Any] | None
) -> None:
    """Only a checkpoint that inserts rows leaves its fence to the batch's end.

    One that updates the run's row too (its strategy state) is fenced first: a process that
    lost the run must not lock the new owner's rows until its batch ends.
    """
    plan = make_plan("s1")
    stale = timed.create_run(new_run(), owner="host:1:a", ttl=30)
    clock.at = 1031.0
    timed.acquire_lease(RunId("r1"), owner="host:2:b", ttl=30)
    late = Checkpoint(
        attempt=start("s1", 1),
        attempt_id=None,
        state="ok",
        trace=trace("s1", 1),
        history=HistoryEntry(step_no=1, plan_step=plan.steps[0], observation="late"),
        usage=Usage(tool_calls=1),
        events=[EventRecord(kind="StepFinished", at=1.0, data={})],
        strategy_state=state,
    )
    raised_at_the_write = False
    with pytest.raises(LeaseLostError), timed.batch(durable=False):
        try:
            timed.checkpoint(RunId("r1"), late, lease=stale)
        except LeaseLostError:
            raised_at_the_write = True
            raise
    assert raised_at_the_write == (state is not None)
    assert count(timed, schema.steps) == count(timed, schema.attempts) == 0


def test_the_current_owner_writes_through_the_fence(timed: SqlStore) -> None:
    plan = make_plan("s1", "s2")
    lease = timed.create_run(new_run(), owner="a", ttl=30)
    writes = _stale_writes(plan)
    for name in ("plan", "intent", "checkpoint", "renew", "finish"):
        writes[name](timed, lease)
    stored = timed.load_run(RunId("r1"))
    assert (stored.summary.status, stored.answer, stored.lease) == ("ok", "late", None)
    assert stored.finished_steps() == {"s2"}


def test_a_release_frees_the_run_at_once_and_a_stale_release_does_nothing(
    timed: SqlStore,
) -> None:
    first = timed.create_run(new_run(), owner="a", ttl=30)
    timed.release_lease(first)
    assert holder(timed) is None
    second = timed.acquire_lease(RunId("r1"), owner="b", ttl=30)  # the clock has not moved
    assert second.epoch == 2
    timed.release_lease(first)
    assert holder(timed) == second


def test_finishing_a_run_ends_its_lease(timed: SqlStore) -> None:
    lease = timed.create_run(new_run(), owner="a", ttl=30)
    finish(timed, Plan(steps=()))
    assert holder(timed) is None
    with pytest.raises(LeaseLostError, match="that lease was given up"):
        timed.renew_lease(lease)
    assert timed.acquire_lease(RunId("r1"), owner="b", ttl=30).epoch == 2


def test_two_owners_racing_for_an_expired_lease_get_one_epoch_each_at_most(
    store_url: str,
) -> None:
    setup = open_store(store_url, now=lambda: 1000.0)
    setup.create_run(new_run(), owner="dead", ttl=1)
    setup.close()
    stores = [open_store(store_url) for _ in range(4)]
    barrier = threading.Barrier(len(stores))

    def take(store: SqlStore, owner: str) -> Lease | str:
        barrier.wait()
        try:
            return store.acquire_lease(RunId("r1"), owner=owner, ttl=60)
        except RunLeasedError as exc:
            return exc.owner

    with ThreadPoolExecutor(len(stores)) as pool:
        outcomes = list(pool.map(take, stores, [f"o{n}" for n in range(len(stores))]))
    winners = [o for o in outcomes if isinstance(o, Lease)]
    assert len(winners) == 1 and winners[0].epoch == 2
    assert outcomes.count(winners[0].owner) == len(stores) - 1  # the others name the winner
    stored = holder(stores[0])
    assert stored is not None and (stored.owner, stored.epoch) == (winners[0].owner, 2)
    for store in stores:
        store.close()


def test_a_version_2_store_gains_leases_and_keeps_its_runs(store_url: str) -> None:
    url = normalize_url(store_url)
    if url.database and url.get_backend_name() == "sqlite":
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url)
    with engine.begin() as conn:
        schema.migrations.create(conn)
        for migration in schema.MIGRATIONS[:2]:
            migration.apply(conn)
            conn.execute(
                insert(schema.migrations).values(
                    version=migration.version, name=migration.name, applied_at=0
                )
            )
        row = rows.new_run(new_run(), now=1.0)
        old = {k: v for k, v in row.items() if k not in schema.LEASE_COLUMNS}
        conn.execute(insert(schema.runs).values(**old))
    engine.dispose()
    store = open_store(store_url)
    stored = store.load_run(RunId("r1"))
    assert (stored.summary.status, stored.lease) == ("running", None)
    assert store.acquire_lease(RunId("r1"), owner="a", ttl=5).epoch == 1
    store.close()
