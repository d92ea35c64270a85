"""Queued runs in SQL: submit once per idempotency key, cancel, count recoveries, find stale.

A queued run is a ``runs`` row in the ``queued`` state (segment 0, no lease) plus its
``queued_runs`` row. A worker that starts it takes its lease at the next epoch, as a
resume does (:func:`taskdecomp.durable.take_over`), so everything the store guarantees of
a run, one owner and fenced writes above all, holds for queued runs too; it may reopen
and read the run in the same transaction (:func:`admit`). This module is the queue's
bookkeeping: the engine that delivers runs to workers only carries run ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import (
    ColumnElement,
    Connection,
    and_,
    bindparam,
    insert,
    literal_column,
    null,
    or_,
    select,
    update,
)

from taskdecomp.run import RunId
from taskdecomp.store import bulk, leases, reads, rows, schema
from taskdecomp.store.base import Lease, NewRun, StoredRun
from taskdecomp.store.prepared import Prepared

_queued = schema.queued_runs
_runs = schema.runs

Start = Literal["first", "recovery", "poisoned", "cancelled", "ended"]
"""What a worker about to run a queued run should do: start it, recover it (a worker died
running it), park it (it killed its workers too often), end it as cancelled, or nothing."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Admission:
    """A worker's right to go on with a queued run."""

    start: Start
    recoveries: int
    """Times a worker died running it, this time included when it is a recovery."""
    first_started_at: float | None
    """When a worker first started it (its deadline counts from then)."""
    lease: Lease | None
    """The run's lease, taken for this worker (``None`` when the run has ended)."""
    run: StoredRun | None = None
    """The run as read under the lease, reopened for this worker's segment, when the
    admission was asked to reopen it (``None`` otherwise, and when the run has ended)."""


def submit(
    conn: Connection,
    run: NewRun,
    *,
    queue: str,
    idempotency_key: str | None,
    now: float,
) -> tuple[RunId, bool]:
    """Store ``run`` as queued; with a key already submitted, return that run instead.

    Returns:
        The run's id, and whether it is new.
    """
    if idempotency_key is not None:
        found = by_key(conn, idempotency_key)
        if found is not None:
            return found, False
    row = rows.new_run(run, now=now)
    row.update(status="queued", segments=0)
    conn.execute(insert(_runs).values(**row))
    conn.execute(
        insert(_queued).values(
            run_id=rows.key(run.run_id),
            queue=queue,
            idempotency_key=idempotency_key,
            enqueued_at=now,
        )
    )
    return run.run_id, True


def submit_many(conn: Connection, runs: Sequence[tuple[NewRun, float]], *, queue: str) -> None:
    """Store ``runs`` as queued in ``queue``, each at its time: two statements for them all.

    An id already stored fails the whole call on the table's key (where :func:`submit`
    says which run): new ids are random, so the caller that groups runs can afford to
    store each alone then.
    """
    queued = []
    for run, at in runs:
        row = rows.new_run(run, now=at)
        row.update(status="queued", segments=0)
        queued.append(row)
    bulk.insert_rows(conn, _runs, queued)
    entries = [
        {"run_id": row["id"], "queue": queue, "idempotency_key": None, "enqueued_at": at}
        for row, (_run, at) in zip(queued, runs, strict=True)
    ]
    bulk.insert_rows(conn, _queued, entries)


def by_key(conn: Connection, idempotency_key: str) -> RunId | None:
    """The run submitted with ``idempotency_key``, if any."""
    found = conn.execute(
        select(_queued.c.run_id).where(_queued.c.idempotency_key == idempotency_key)
    ).scalar_one_or_none()
    return RunId(found) if found is not None else None


def queue_of(conn: Connection, run_id: RunId) -> str | None:
    """The queue ``run_id`` was submitted to; ``None`` for a run that never was."""
    return conn.execute(
        select(_queued.c.queue).where(_queued.c.run_id == rows.key(run_id))
    ).scalar_one_or_none()


def times(conn: Connection, run_id: RunId) -> tuple[float, float | None] | None:
    """When ``run_id`` was queued and when it first started (``None``: not yet).

    ``None`` for a run that was never queued.
    """
    row = conn.execute(
        select(_queued.c.enqueued_at, _queued.c.first_started_at).where(
            _queued.c.run_id == rows.key(run_id)
        )
    ).one_or_none()
    if row is None:
        return None
    return float(row.enqueued_at), row.first_started_at


_ADMISSION = (
    select(
        _runs.c.status,
        _runs.c.lease_owner,
        _runs.c.lease_epoch,
        _runs.c.lease_expires_at,
        _queued.c.cancel_requested,
        _queued.c.recoveries,
        _queued.c.first_started_at,
    )
    .join(_queued, _queued.c.run_id == _runs.c.id)
    .where(_runs.c.id == bindparam("b_key"))
)
_STARTABLE: list[ColumnElement[str]] = [literal_column("'queued'"), literal_column("'running'")]
"""The states a worker starts a run from, written into the statement (no parameter)."""
_CLAIMED = ("lease_owner", "lease_epoch", "lease_heartbeat_at", "lease_expires_at")
"""The lease columns a take sets (:func:`taskdecomp.store.rows.claim`)."""
REOPENED = {
    "status": literal_column("'running'"),
    "stop_reason": null(),
    "finished_at": null(),
    "segments": _runs.c.segments + literal_column("1"),
    "updated_at": bindparam("b_now"),
}
"""What marks a run ``running`` for its next segment (``:b_now`` the time): a worker's take,
and a resume's reopening (:meth:`~taskdecomp.store.sql.SqlStore.reopen_run`)."""


def _take(*, reopen: bool) -> Prepared:
    """The take: the run's lease at the next epoch, and with ``reopen`` a new segment.

    It updates nothing when another worker took the run, or it ended, since it was read.
    """
    claimed: dict[str, Any] = {name: bindparam(f"v_{name}") for name in _CLAIMED}
    return Prepared(
        update(_runs)
        .where(
            _runs.c.id == bindparam("b_key"),
            _runs.c.lease_epoch == bindparam("b_seen"),
            _runs.c.status.in_(_STARTABLE),
        )
        .values({**claimed, **REOPENED} if reopen else claimed)
    )


_TAKES = {reopen: _take(reopen=reopen) for reopen in (False, True)}
_COUNT = Prepared(
    update(_queued)
    .where(_queued.c.run_id == bindparam("b_key"))
    .values(recoveries=bindparam("b_recoveries"), first_started_at=bindparam("b_first"))
)


def admit(
    conn: Connection,
    run_id: RunId,
    *,
    owner: str,
    ttl: float,
    max_recoveries: int,
    now: float,
    store: str,
    reopen: bool = False,
) -> Admission:
    """Take ``run_id``'s lease for ``owner`` and decide what to do with the run.

    A run that is ``running`` with no live lease was being run by a worker that died (or
    gave it up on a store error): taking it is a recovery, counted here, in the same
    transaction as the lease, so a run delivered twice is counted once (the second
    delivery finds the lease taken). Past ``max_recoveries`` of them, the run is
    ``poisoned``.

    With ``reopen``, the same statement that takes the lease marks the run ``running`` for
    the caller's segment, whatever becomes of it (a run a worker only ends is ended in a
    segment of its own), and the run is read after it in the same transaction
    (:attr:`Admission.run`): once the lease is taken, a write of the run's previous owner
    waits for this transaction and then finds the run taken over, so the run is read as
    that owner left it. ``store`` names the store in errors.

    Raises:
        RunLeasedError: a live worker holds the run.
        RunNotFoundError: the run is gone since it was taken (deleted meanwhile).
        CorruptRecordError: the run does not decode.
    """
    key = rows.key(run_id)
    row = conn.execute(_ADMISSION, {"b_key": key}).one_or_none()
    if row is None or row.status not in ("queued", "running"):
        return Admission(start="ended", recoveries=0, first_started_at=None, lease=None)
    leases.refuse_held(run_id, row.lease_owner, row.lease_expires_at, owner=owner, now=now)
    epoch = int(row.lease_epoch) + 1
    claim = rows.claim(owner, epoch=epoch, ttl=ttl, now=now)
    taken = _TAKES[reopen](
        conn,
        {"b_key": key, "b_seen": row.lease_epoch, "b_now": now}
        | {f"v_{name}": value for name, value in claim.items()},
    )
    if taken != 1:  # PostgreSQL: another worker took it, or it ended, since the select
        return _not_taken(conn, run_id, ttl)
    first = row.first_started_at if row.first_started_at is not None else now
    recoveries = row.recoveries + (row.status == "running")
    _COUNT(conn, {"b_key": key, "b_recoveries": recoveries, "b_first": first})
    return Admission(
        start=_start(row.status, row.cancel_requested, recoveries > max_recoveries),
        recoveries=recoveries,
        first_started_at=first,
        lease=Lease(run_id=run_id, owner=owner, epoch=epoch, ttl=ttl, expires_at=now + ttl),
        run=reads.load_run(conn, run_id, store=store) if reopen else None,
    )


def _start(status: str, cancel_requested: bool, poisoned: bool) -> Start:
    if cancel_requested:
        return "cancelled"
    if poisoned:
        return "poisoned"
    return "recovery" if status == "running" else "first"


def _not_taken(conn: Connection, run_id: RunId, ttl: float) -> Admission:
    """What a take that updated nothing found: the run ended, or another worker holds it.

    Raises:
        RunLeasedError: another worker took it first.
    """
    row = conn.execute(
        select(_runs.c.status, _runs.c.lease_owner).where(_runs.c.id == rows.key(run_id))
    ).one_or_none()
    if row is None or row.status not in ("queued", "running"):
        return Admission(start="ended", recoveries=0, first_started_at=None, lease=None)
    raise leases.leased(run_id, str(row.lease_owner), ttl)


def request_cancel(conn: Connection, run_id: RunId) -> str | None:
    """Ask for ``run_id`` to be cancelled; return its status then (``None``: no such run)."""
    status = conn.execute(
        select(_runs.c.status).where(_runs.c.id == rows.key(run_id))
    ).scalar_one_or_none()
    if status is None:
        return None
    asked = conn.execute(
        update(_queued).where(_queued.c.run_id == rows.key(run_id)).values(cancel_requested=True)
    )
    return str(status) if asked.rowcount == 1 else "unqueued"


def cancel_requested(conn: Connection, run_id: RunId) -> bool:
    """Whether someone asked for ``run_id`` to be cancelled."""
    return bool(
        conn.execute(
            select(_queued.c.cancel_requested).where(_queued.c.run_id == rows.key(run_id))
        ).scalar_one_or_none()
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class Stale:
    """A run of a queue that needs delivering (again)."""

    run_id: RunId
    recoveries: int
    delivery: str | None
    """The queue engine's id of its latest delivery, if any."""
    started: bool
    """A worker started it (else it is still queued)."""


def note_delivery(conn: Connection, run_id: RunId, delivery: str) -> None:
    """Remember the engine's id of ``run_id``'s latest delivery."""
    conn.execute(
        update(_queued).where(_queued.c.run_id == rows.key(run_id)).values(delivery=delivery)
    )


def stale(conn: Connection, queue: str, *, now: float, grace: float) -> list[Stale]:
    """Runs of ``queue`` that need delivering, in the order they were queued.

    Started runs no worker holds any more (the worker died, so its lease ran out, or it
    gave the run up on a store error), and runs still queued ``grace`` seconds after they
    were submitted (the sweep asks the engine whether their delivery is still waiting: the
    submitter may have died before enqueueing it, or a worker failed to take it).
    """
    found = conn.execute(
        select(_runs.c.id, _runs.c.status, _queued.c.recoveries, _queued.c.delivery)
        .join(_queued, _queued.c.run_id == _runs.c.id)
        .where(
            _queued.c.queue == queue,
            or_(
                and_(
                    _runs.c.status == "running",
                    or_(_runs.c.lease_expires_at.is_(None), _runs.c.lease_expires_at < now),
                ),
                and_(_runs.c.status == "queued", _queued.c.enqueued_at < now - grace),
            ),
        )
        .order_by(_queued.c.enqueued_at, _queued.c.run_id)
    ).all()
    return [
        Stale(
            run_id=RunId(str(row.id)),
            recoveries=int(row.recoveries),
            delivery=row.delivery,
            started=row.status == "running",
        )
        for row in found
    ]
