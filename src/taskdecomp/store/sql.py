"""The SQLAlchemy Core store, for SQLite files and PostgreSQL.

How the database is reached (the URL, the engine and its SQLite settings, what a driver's
error means) is :mod:`taskdecomp.store.connect`. A :meth:`SqlStore.batch` that need not be
durable commits without waiting for the disk (SQLite ``synchronous=NORMAL``, PostgreSQL
``synchronous_commit = off``): it survives the process being killed, and the next durable
commit (which syncs the whole write-ahead log) makes it survive a power cut too.

A commit that stores a run's events tells whoever follows the run: the callbacks given to
:meth:`SqlStore.watch` in this process, and on PostgreSQL every process that listens on
:data:`EVENTS_CHANNEL` (a ``NOTIFY`` sent in the same transaction, so it arrives once the
events are visible, and never for a write that rolled back).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Collection, Hashable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from typing import Any, overload

from sqlalchemy import (
    Connection,
    Table,
    bindparam,
    delete,
    insert,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from taskdecomp.budget import Usage
from taskdecomp.errors import StoreConfigError, StoreError
from taskdecomp.plan import Plan
from taskdecomp.run import HistoryEntry, RunId, RunResult
from taskdecomp.store import bulk, connect, leases, listing, prepared, reads, rows, schema
from taskdecomp.store import queue as queues
from taskdecomp.store.base import (
    DEFAULT_LEASE_SECONDS,
    AttemptStart,
    Checkpoint,
    EventRecord,
    Lease,
    NewRun,
    RunState,
    RunSummary,
    StoredRun,
)
from taskdecomp.store.codec import encode_json
from taskdecomp.store.connect import DEFAULT_BUSY_TIMEOUT, normalize_url
from taskdecomp.store.listing import RunKey, RunPage
from taskdecomp.store.prepared import Prepared
from taskdecomp.store.reads import EventPage

EVENTS_CHANNEL = "taskdecomp_events"
"""The PostgreSQL channel a commit that stores a run's events notifies; the payload is the
run's id, once per run and transaction."""

_NOTIFY = Prepared(
    text(
        f"SELECT pg_notify('{EVENTS_CHANNEL}', run_id) "
        "FROM unnest(CAST(:run_ids AS text[])) AS run_id"
    )
)
"""One notification per run, for every run of a transaction in one statement."""

Watcher = Callable[[frozenset[str]], object]
"""Told the ids of the runs whose events a commit stored, on the committing thread."""

# The checkpoint's statements, built once: values travel as parameters, so a checkpoint
# spends its time in the database, not in building SQL expressions.
_INSERT_NEW_RUN = {
    name: Prepared(insert_of(schema.runs).on_conflict_do_nothing(index_elements=["id"]))
    for name, insert_of in (("sqlite", sqlite_insert), ("postgresql", postgresql_insert))
}
"""A run's row unless its id is taken (then no row is inserted, and the driver's row count
says 0): one statement, no lookup first."""
_INSERT_ATTEMPT = insert(schema.attempts)
_INSERT_PLAN = Prepared(insert(schema.plans))
_FENCED_PLAN = Prepared(leases.fenced_insert(schema.plans))
"""A new run's plan, inserted only while its lease holds the run: one statement."""
_END_ATTEMPT = (
    update(schema.attempts)
    .where(schema.attempts.c.id == bindparam("b_id"))
    .values(state=bindparam("b_state"), trace=bindparam("b_trace"), finished_at=bindparam("b_now"))
)
_SET_STATE = (
    update(schema.runs)
    .where(schema.runs.c.id == bindparam("b_key"))
    .values(state=bindparam("b_state"))
)
_TOUCH_RUN = Prepared(
    update(schema.runs)
    .where(schema.runs.c.id == bindparam("b_key"))
    .values(usage=bindparam("b_usage"), updated_at=bindparam("b_now"))
)
_FENCED_TOUCH = Prepared(
    leases.FENCE.values(usage=bindparam("b_usage"), updated_at=bindparam("b_now"))
)
"""The checkpoint's run update, fenced by the lease (and renewing it): the fence costs no
statement of its own."""


@functools.cache
def _finish(columns: tuple[str, ...], *, fenced: bool) -> Prepared:
    """A run's end setting ``columns``, fenced by the lease (which it gives up) or not.

    Built once each: SQLAlchemy would otherwise build and key a new statement every call.
    """
    runs = schema.runs
    statement = (
        update(runs)
        .where(runs.c.id == bindparam("b_key"))
        .values({name: bindparam(f"v_{name}") for name in columns})
    )
    return Prepared(statement.where(*leases.HELD) if fenced else statement)


class SqlStore:
    """A :class:`~taskdecomp.store.base.Store` on SQLite or PostgreSQL.

    Opening it applies any pending migrations.

    Args:
        url: ``sqlite:///PATH``, a file path, or ``postgresql://user@host/dbname``.
        busy_timeout: seconds a SQLite writer waits for a lock held by another process.
        now: wall clock for stored times (seconds since the epoch).

    Raises:
        StoreError: the database cannot be opened, reached or migrated.
    """

    def __init__(
        self,
        url: str,
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.url = normalize_url(url)
        self.name = self.url.render_as_string(hide_password=True)
        self._busy_timeout = busy_timeout
        self.now = now
        """The wall clock stored times come from."""
        self._engine = connect.engine(self.url, name=self.name, busy_timeout=busy_timeout)
        self._reader = self._engine.execution_options(**{connect.BEGIN: "BEGIN"})
        if self._engine.dialect.name == "postgresql":
            # One snapshot for a whole read: a run read while its writer commits must not
            # see a step's result from after the plan it read.
            self._reader = self._reader.execution_options(isolation_level="REPEATABLE READ")
        self._lazy = self._engine.execution_options(**{connect.LAZY: True})
        self._batch = threading.local()
        self._written = threading.local()  # .runs: ids of the runs this transaction adds events to
        self._watchers: list[Watcher] = []
        self._count = threading.Lock()
        self.commits = 0
        """Write transactions committed so far."""
        self.durable_commits = 0
        """Those of them that waited for the disk (an fsync of the write-ahead log)."""
        try:
            self._migrate()
        except BaseException:
            self._engine.dispose()
            raise

    def __repr__(self) -> str:
        return f"SqlStore({self.name!r})"

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._engine.dialect.name

    def _migrate(self) -> None:
        """Apply pending migrations; an up-to-date store is only read, never locked."""
        with self.read() as conn:
            if not schema.pending(conn):
                return
        with self.write() as conn:
            schema.migrate(conn, now=self.now())

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction (``BEGIN IMMEDIATE`` on SQLite); driver errors as StoreError.

        Inside :meth:`batch` on the same thread, it is the batch's transaction.
        """
        batch: Connection | None = getattr(self._batch, "conn", None)
        if batch is not None:
            yield batch
            return
        self._written.runs = set()
        with self._errors(), self._engine.begin() as conn:
            yield conn
        self._committed(durable=True)

    @contextmanager
    def batch(self, *, durable: bool = True) -> Iterator[None]:
        """Make every write this thread makes inside it one transaction, committed at the end.

        A failing write rolls the whole batch back. With ``durable=False`` the commit does
        not wait for the disk: it survives the process being killed but not a power cut,
        until the next durable commit. The attempts, steps and events its writes store go
        in together, in order, at its end: one statement a table for the batch (the runs
        of a group commit included) instead of one for each write.
        """
        if getattr(self._batch, "conn", None) is not None:
            raise RuntimeError("store batches do not nest")
        engine = self._engine if durable else self._lazy
        self._written.runs = set()
        with self._errors(), engine.begin() as conn:
            if not durable and self.dialect == "postgresql":
                prepared.execute(conn, "SET LOCAL synchronous_commit TO OFF")  # no fsync
            self._batch.conn, self._batch.rows, self._batch.touches = conn, {}, {}
            try:
                yield
                for touch, lease, now in self._batch.touches.values():
                    self._touch_now(conn, touch, lease, now=now)
                for table, pending in self._batch.rows.items():
                    self._insert(conn, table, pending)
            finally:
                self._batch.conn = self._batch.rows = self._batch.touches = None
        self._committed(durable=durable)

    def _committed(self, *, durable: bool) -> None:
        with self._count:
            self.commits += 1
            self.durable_commits += durable
        runs: set[str] = self._written.runs
        self._written.runs = set()
        if runs:
            for watcher in list(self._watchers):
                watcher(frozenset(runs))

    def watch(self, watcher: Watcher) -> Callable[[], None]:
        """Call ``watcher`` after each commit of this object that stores events.

        It gets the ids of the runs the events belong to, on the thread that committed, so
        it must be quick (hand the ids to a loop, set a flag). Returns a function that stops
        the calls.
        """
        self._watchers.append(watcher)
        return lambda: self._watchers.remove(watcher)

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read transaction on one snapshot; driver errors as StoreError.

        A plain ``BEGIN`` on SQLite (WAL gives it a snapshot at its first read);
        ``REPEATABLE READ`` on PostgreSQL, where only reads are safe from serialization
        failures: nothing may write through it.
        """
        with self._errors(), self._reader.begin() as conn:
            yield conn

    def _errors(self) -> AbstractContextManager[None]:
        """Driver errors inside it raised as StoreError naming this store."""
        return connect.driver_errors(self.name, self._busy_timeout)

    @overload
    def create_run(self, run: NewRun) -> None: ...

    @overload
    def create_run(self, run: NewRun, *, owner: str, ttl: float) -> Lease: ...

    def create_run(
        self, run: NewRun, *, owner: str | None = None, ttl: float = DEFAULT_LEASE_SECONDS
    ) -> Lease | None:
        """Store a new run in the ``running`` state; with ``owner``, leased to it (epoch 1).

        Raises:
            StoreError: a run with this id is already stored, or the write failed.
        """
        now = self.now()
        row = rows.new_run(run, now=now, owner=owner, ttl=ttl)
        with self.write() as conn:
            if _INSERT_NEW_RUN[self.dialect](conn, row) != 1:
                raise StoreConfigError(
                    f"a run with id {run.run_id!r} is already stored; resume it or pick another id"
                )
        if owner is None:
            return None
        return Lease(run_id=run.run_id, owner=owner, epoch=1, ttl=ttl, expires_at=now + ttl)

    def acquire_lease(self, run_id: RunId, *, owner: str, ttl: float) -> Lease:
        """Take the run's lease, at the next epoch, if nobody holds it or it has expired.

        Raises:
            RunNotFoundError: no run has this id.
            RunLeasedError: another owner holds an unexpired lease; the message names it.
        """
        now = self.now()
        with self.write() as conn:
            return leases.acquire(conn, run_id, owner=owner, ttl=ttl, now=now)

    def renew_lease(self, lease: Lease) -> Lease:
        """Extend ``lease`` by its ``ttl`` from now; return it with the new expiry.

        Raises:
            LeaseLostError: the run has another owner or a newer epoch.
        """
        now = self.now()
        with self.write() as conn:
            leases.fence(conn, lease, now=now)
        return replace(lease, expires_at=now + lease.ttl)

    def release_lease(self, lease: Lease) -> None:
        """Give the run up, if ``lease`` still holds it (the epoch is kept)."""
        with self.write() as conn:
            leases.release(conn, lease)

    def reopen_run(
        self,
        run_id: RunId,
        *,
        segment: int,
        events: Sequence[EventRecord],
        lease: Lease | None = None,
    ) -> None:
        """Mark a stored run ``running`` again, for segment ``segment`` of a resume.

        Raises:
            StoreError: the run is no longer at segment ``segment - 1``: another process
                resumed it since it was loaded.
            LeaseLostError: ``lease`` no longer holds the run.
        """
        now = self.now()
        runs = schema.runs
        with self.write() as conn:
            if lease is not None:
                leases.fence(conn, lease, now=now)
            reopened = conn.execute(
                update(runs)
                .where(runs.c.id == rows.key(run_id), runs.c.segments == segment - 1)
                .values(queues.REOPENED),
                {"b_now": now},
            )
            if reopened.rowcount != 1:
                raise StoreError(
                    f"run {run_id!r} was resumed by another process meanwhile; "
                    "resume a run from one place at a time"
                )
            self._events(conn, run_id, events)

    def save_plan(
        self,
        run_id: RunId,
        plan: Plan,
        *,
        events: Sequence[EventRecord],
        lease: Lease | None = None,
    ) -> None:
        """Store the run's validated plan.

        Raises:
            LeaseLostError: ``lease`` no longer holds the run.
        """
        now = self.now()
        row = rows.plan(run_id, plan, now=now)
        with self.write() as conn:
            if lease is None:
                _INSERT_PLAN(conn, row)
            else:
                leases.held(conn, _FENCED_PLAN(conn, leases.fenced_values(row, lease)), lease)
            self._events(conn, run_id, events)

    def record_intent(
        self, run_id: RunId, attempt: AttemptStart, *, lease: Lease | None = None
    ) -> int:
        """Commit the intent to call a step's tool; return the attempt's id.

        Raises:
            LeaseLostError: ``lease`` no longer holds the run; the tool must not be called.
        """
        now = self.now()
        row = rows.attempt_start(run_id, attempt, now=now)
        with self.write() as conn:
            self._pending_now(conn, schema.attempts)  # the attempts before it get lower ids
            if lease is not None:
                return leases.insert_intent(conn, row, lease)
            result = conn.execute(_INSERT_ATTEMPT, row)
            primary_key = result.inserted_primary_key
            assert primary_key is not None  # a single-row insert always has one
            return int(primary_key[0])

    def checkpoint(
        self, run_id: RunId, checkpoint: Checkpoint, *, lease: Lease | None = None
    ) -> None:
        """Store how an attempt ended, with its trace, history entry, usage and events.

        Everything is encoded before the transaction starts, so a value the store refuses
        raises :class:`~taskdecomp.errors.StoreValueError` with nothing written. The run's
        row's update is the fence (with a ``lease``): made first when the write updates
        anything else, else at the end of the batch it is in (see :meth:`_touch`).

        Raises:
            LeaseLostError: ``lease`` no longer holds the run.
        """
        self.checkpoints(run_id, (checkpoint,), lease=lease)

    def checkpoints(
        self, run_id: RunId, checkpoints: Sequence[Checkpoint], *, lease: Lease | None = None
    ) -> None:
        """Store several checkpoints of one run, in order, in one transaction.

        Each statement runs once for all of them (the run's usage and strategy state are
        the last ones'), so a group commit costs a handful of statements, not one set per
        step. Same guarantees as :meth:`checkpoint`.

        Raises:
            LeaseLostError: ``lease`` no longer holds the run.
        """
        if not checkpoints:
            return
        now, key = self.now(), rows.key(run_id)
        inserted, ended, steps, events = [], [], [], []
        for checkpoint in checkpoints:
            attempt_row = rows.attempt_end(run_id, checkpoint, now=now)
            if checkpoint.attempt_id is None:
                inserted.append(attempt_row)
            else:
                end = {f"b_{name}": attempt_row[name] for name in ("state", "trace")}
                ended.append({**end, "b_id": checkpoint.attempt_id, "b_now": now})
            if checkpoint.history is not None:
                observation = checkpoint.observation_json
                steps.append(
                    rows.step(run_id, checkpoint.history, now=now, observation=observation)
                )
            events += rows.events(run_id, checkpoint.events)
        states = [c.strategy_state for c in checkpoints if c.strategy_state is not None]
        state = encode_json(dict(states[-1]), what="the run's strategy state") if states else None
        touch = {"b_key": key, "b_usage": rows.usage(checkpoints[-1].usage), "b_now": now}
        with self.write() as conn:
            self._touch(conn, touch, lease, now=now, later=not ended and state is None)
            self._rows(conn, schema.attempts, inserted)
            if ended:
                conn.execute(_END_ATTEMPT, ended)
            self._rows(conn, schema.steps, steps)
            self._rows(conn, schema.events, events)
            if state is not None:
                conn.execute(_SET_STATE, {"b_key": key, "b_state": state})

    def save_step(
        self,
        run_id: RunId,
        entry: HistoryEntry,
        *,
        usage: Usage,
        events: Sequence[EventRecord],
        lease: Lease | None = None,
    ) -> None:
        """Store a finished step that made no call of its own (an instruction step).

        Raises:
            LeaseLostError: ``lease`` no longer holds the run.
        """
        now = self.now()
        step_row = rows.step(run_id, entry, now=now)
        touch = {"b_key": rows.key(run_id), "b_usage": rows.usage(usage), "b_now": now}
        with self.write() as conn:
            self._touch(conn, touch, lease, now=now, later=True)
            self._rows(conn, schema.steps, [step_row])
            self._events(conn, run_id, events)

    def save_state(
        self,
        run_id: RunId,
        plan: Plan,
        state: Mapping[str, Any],
        *,
        approvals: Mapping[str, Any],
        usage: Usage,
        events: Sequence[EventRecord],
        lease: Lease | None = None,
    ) -> None:
        """Store the run's current plan (replacing it), strategy state, approvals and usage.

        Raises:
            LeaseLostError: ``lease`` no longer holds the run.
        """
        now = self.now()
        plan_row = rows.plan(run_id, plan, now=now)
        key = rows.key(run_id)
        values = {
            "state": encode_json(dict(state), what="the run's strategy state"),
            "approvals": encode_json(dict(approvals), what="the run's approvals"),
        }
        touch = {"b_key": key, "b_usage": rows.usage(usage), "b_now": now}
        with self.write() as conn:
            self._touch(conn, touch, lease, now=now)
            conn.execute(update(schema.runs).where(schema.runs.c.id == key).values(**values))
            conn.execute(delete(schema.plans).where(schema.plans.c.run_id == key))
            conn.execute(insert(schema.plans).values(**plan_row))
            self._events(conn, run_id, events)

    def _touch(
        self,
        conn: Connection,
        touch: dict[str, Any],
        lease: Lease | None,
        *,
        now: float,
        later: bool = False,
    ) -> None:
        """Update the run's usage; with a ``lease``, that update is the fence.

        ``later``: the write only inserts rows that wait for the batch's end too. In a batch
        the update then waits for the batch's end, where only the run's last one is made (a
        fence checked at the end of a transaction holds for all of it; the rows go in after
        it), or none when the run's end, which sets its usage under the same fence, comes
        in the same batch. Otherwise it is made now, before the write updates anything: a
        process that lost the run must not lock its rows, or it could hold up its new
        owner, or deadlock with it.
        """
        touches = self._pending("touches")
        key = _touch_key(touch["b_key"], lease)
        if touches is not None and later:
            touches[key] = (touch, lease, now)
            return
        if touches is not None:
            touches.pop(key, None)  # this one is later: an earlier one would undo it
        self._touch_now(conn, touch, lease, now=now)

    def _touch_now(
        self, conn: Connection, touch: dict[str, Any], lease: Lease | None, *, now: float
    ) -> None:
        if lease is None:
            _TOUCH_RUN(conn, touch)
        else:
            fenced = _FENCED_TOUCH(conn, {**leases.params(lease, now=now), **touch})
            leases.held(conn, fenced, lease)

    def finish_run(
        self,
        run_id: RunId,
        result: RunResult,
        *,
        events: Sequence[EventRecord],
        lease: Lease | None = None,
        approvals: Mapping[str, Any] | None = None,
    ) -> None:
        """Store how the run ended (and its approvals, when given) and release its lease.

        Raises:
            LeaseLostError: ``lease`` no longer holds the run.
        """
        now = self.now()
        values = rows.finished(result, now=now)
        if approvals is not None:
            values["approvals"] = encode_json(dict(approvals), what="the run's approvals")
        statement = _finish(tuple(values), fenced=lease is not None)
        params = {f"v_{name}": value for name, value in values.items()}
        if lease is not None:
            params |= leases.params(lease, now=now)
        params["b_key"] = key = rows.key(run_id)
        with self.write() as conn:
            touches = self._pending("touches")
            if touches:  # this update sets the usage a checkpoint left to the batch's end
                touches.pop(_touch_key(key, lease), None)
            finished = statement(conn, params)
            if lease is not None:
                leases.held(conn, finished, lease)
            self._events(conn, run_id, events)

    # -- queued runs (taskdecomp.scale) ---------------------------------------------------

    def submit_run(
        self,
        run: NewRun,
        *,
        queue: str,
        idempotency_key: str | None = None,
        now: float | None = None,
    ) -> tuple[RunId, bool]:
        """Store ``run`` as ``queued`` in ``queue``; return its id and whether it is new.

        A run submitted before with the same ``idempotency_key`` is returned instead.
        ``now`` is the time it is queued at (default: now, by the store's clock).

        Raises:
            StoreError: the id is taken, or the store cannot be written.
        """
        try:
            with self.write() as conn:
                if reads.run_exists(conn, run.run_id):
                    raise StoreConfigError(f"a run with id {run.run_id!r} is already stored")
                return queues.submit(
                    conn, run, queue=queue, idempotency_key=idempotency_key,
                    now=self.now() if now is None else now,
                )  # fmt: skip
        except StoreError:
            if idempotency_key is None:
                raise
            with self.read() as conn:  # the same key, submitted at the same moment elsewhere
                found = queues.by_key(conn, idempotency_key)
            if found is None:
                raise
            return found, False

    def submit_runs(self, runs: Sequence[tuple[NewRun, float]], *, queue: str) -> None:
        """Store ``runs`` as ``queued`` in ``queue``, each queued at its time, all at once.

        The same as :meth:`submit_run` for each, in one transaction and two statements.

        Raises:
            StoreError: an id is taken (nothing is stored), or the store cannot be written.
        """
        with self.write() as conn:
            queues.submit_many(conn, runs, queue=queue)

    def admit_run(
        self, run_id: RunId, *, owner: str, ttl: float, max_recoveries: int, reopen: bool = False
    ) -> queues.Admission:
        """Take queued run ``run_id`` for ``owner`` and say what to do with it.

        With ``reopen``, the run is also marked ``running`` for the caller's segment and
        read under the lease, in the same transaction (see :func:`.queue.admit`): pass it
        to :func:`~taskdecomp.engine.continue_run` as ``taken``.

        Raises:
            RunLeasedError: a live worker holds the run.
            CorruptRecordError: the run does not decode.
        """
        with self.write() as conn:
            return queues.admit(
                conn, run_id, owner=owner, ttl=ttl, max_recoveries=max_recoveries,
                now=self.now(), store=self.name, reopen=reopen,
            )  # fmt: skip

    def request_cancel(self, run_id: RunId) -> str | None:
        """Ask a queued run to stop; its status then, ``None`` when there is no such run."""
        with self.write() as conn:
            return queues.request_cancel(conn, run_id)

    def cancel_requested(self, run_id: RunId) -> bool:
        """Whether a cancel of ``run_id`` was asked for."""
        with self.read() as conn:
            return queues.cancel_requested(conn, run_id)

    def queue_of(self, run_id: RunId) -> str | None:
        """The queue a run was submitted to, ``None`` when it was not."""
        with self.read() as conn:
            return queues.queue_of(conn, run_id)

    def queue_times(self, run_id: RunId) -> tuple[float, float | None] | None:
        """When a queued run was queued and first started; ``None`` if it never was queued."""
        with self.read() as conn:
            return queues.times(conn, run_id)

    def stale_runs(self, queue_name: str, *, grace: float = 10.0) -> list[queues.Stale]:
        """Runs of a queue to deliver again: started and held by no worker, or never sent."""
        with self.read() as conn:
            return queues.stale(conn, queue_name, now=self.now(), grace=grace)

    def note_delivery(self, run_id: RunId, delivery: str) -> None:
        """Remember the queue engine's id of the run's latest delivery."""
        with self.write() as conn:
            queues.note_delivery(conn, run_id, delivery)

    def load_run(self, run_id: RunId) -> StoredRun:
        """Everything stored about a run.

        Raises:
            RunNotFoundError: no run has this id.
            CorruptRecordError: a row does not decode.
        """
        with self.read() as conn:
            return reads.load_run(conn, run_id, store=self.name)

    def list_runs(self, *, limit: int | None = None) -> list[RunSummary]:
        """Stored runs, newest first, at most ``limit`` of them (all when ``None``)."""
        with self.read() as conn:
            return reads.list_runs(conn, limit=limit)

    def page_runs(
        self,
        *,
        limit: int,
        after: RunKey | None = None,
        status: RunState | None = None,
        leased: bool | None = None,
        held: Collection[RunId] = (),
    ) -> RunPage:
        """A page of the run list, newest first, filtered in SQL (see :mod:`.listing`).

        ``held`` names runs to count as leased whatever their lease says (those the
        caller executes); leases expire on :attr:`now`.
        """
        keys = [rows.key(run_id) for run_id in held]
        with self.read() as conn:
            return listing.page_runs(
                conn, limit=limit, after=after, status=status, leased=leased, held=keys,
                now=self.now(),
            )  # fmt: skip

    def load_events(self, run_id: RunId) -> list[EventRecord]:
        """A run's stored events, in order."""
        with self.read() as conn:
            return reads.load_events(conn, run_id)

    def load_event_page(self, run_id: RunId, *, after: int = 0, limit: int = 500) -> EventPage:
        """The run's status and its events numbered above ``after`` (see :mod:`.reads`).

        Raises:
            RunNotFoundError: no run has this id.
        """
        with self.read() as conn:
            return reads.load_event_page(conn, run_id, after=after, limit=limit)

    def count_events(self, run_id: RunId) -> tuple[RunState, int]:
        """The run's status and the sequence number of its last event (0: none yet).

        Raises:
            RunNotFoundError: no run has this id.
        """
        with self.read() as conn:
            return reads.count_events(conn, run_id)

    def runs_with_events_after(self, mark: int) -> tuple[int, frozenset[str]]:
        """The newest event row id and the runs with events stored after row ``mark``.

        Exact on SQLite, where row ids grow in commit order; on PostgreSQL listen on
        :data:`EVENTS_CHANNEL` instead.
        """
        with self.read() as conn:
            return reads.runs_with_events_after(conn, mark)

    def close(self) -> None:
        """Release pooled connections."""
        self._engine.dispose()

    def _events(self, conn: Connection, run_id: RunId, events: Sequence[EventRecord]) -> None:
        self._rows(conn, schema.events, rows.events(run_id, events))

    def _rows(self, conn: Connection, table: Table, new: list[dict[str, Any]]) -> None:
        """Insert ``new`` rows (of one shape per table) now, or at the end of ``conn``'s batch.

        Rows that reference nothing but their run wait there (attempts, steps, events): no
        statement of the batch reads them, and its runs' rows are written by then. A row
        inserted otherwise (an intent, whose id is needed at once) has the waiting rows of
        its table inserted first, so ids keep the order the writes came in.
        """
        pending = self._pending("rows")
        if pending is None:
            self._insert(conn, table, new)
        elif new:  # inside a batch, ``conn`` is its connection
            pending.setdefault(table, []).extend(new)

    def _pending_now(self, conn: Connection, table: Table) -> None:
        """Insert the rows of ``table`` that wait for the end of ``conn``'s batch, now."""
        pending = self._pending("rows")
        if pending and table in pending:
            self._insert(conn, table, pending.pop(table))

    def _pending(self, what: str) -> dict[Any, Any] | None:
        """What this thread's batch keeps for its end (``rows``, ``touches``); ``None``: none."""
        pending: dict[Any, Any] | None = getattr(self._batch, what, None)
        return pending

    def _insert(self, conn: Connection, table: Table, new: list[dict[str, Any]]) -> None:
        """Insert ``new`` rows; for events, note their runs for the watchers (and ``NOTIFY``)."""
        bulk.insert_rows(conn, table, new)
        if table is not schema.events:
            return
        written: set[str] = self._written.runs
        runs = {row["run_id"] for row in new} - written
        if runs and self.dialect == "postgresql":
            _NOTIFY(conn, {"run_ids": sorted(runs)})
        written |= runs


def _touch_key(key: str, lease: Lease | None) -> Hashable:
    """Which usage updates a later one of the same batch replaces: one run, one lease."""
    return (key, None) if lease is None else (key, lease.owner, lease.epoch)


def open_store(url: str, **options: Any) -> SqlStore:
    """Open the store at ``url`` (see :class:`SqlStore`).

    Raises:
        StoreError: the database cannot be opened, reached or migrated.
    """
    return SqlStore(url, **options)
