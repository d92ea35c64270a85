"""Queued runs in SQL: submit once per idempotency key, cancel, count recoveries, find stale.

A queued run is a ``runs`` row in the ``queued`` state (segment 0, no lease) plus its
``queued_runs`` row. A worker that starts it takes its lease like a resume does
(:func:`taskdecomp.durable.take_over`), so everything the store guarantees of a run, one
owner and fenced writes above all, holds for queued runs too. This module is the queue's
bookkeeping: the engine that delivers runs to workers only carries run ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import Connection, and_, insert, or_, select, update

from taskdecomp.run import RunId
from taskdecomp.store import bulk, leases, rows, schema
from taskdecomp.store.base import Lease, NewRun

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


def admit(
    conn: Connection,
    run_id: RunId,
    *,
    owner: str,
    ttl: float,
    max_recoveries: int,
    now: float,
) -> Admission:
    """Take ``run_id``'s lease for ``owner`` and decide what to do with the run.

    A run that is ``running`` with no live lease was being run by a worker that died (or
    gave it up on a store error): taking it is a recovery, counted here, in the same
    transaction as the lease, so a run delivered twice is counted once (the second
    delivery finds the lease taken). Past ``max_recoveries`` of them, the run is
    ``poisoned``.

    Raises:
        RunLeasedError: a live worker holds the run.
    """
    row = conn.execute(
        select(
            _runs.c.status,
            _queued.c.cancel_requested,
            _queued.c.recoveries,
            _queued.c.first_started_at,
        )
        .join(_queued, _queued.c.run_id == _runs.c.id)
        .where(_runs.c.id == rows.key(run_id))
    ).one_or_none()
    if row is None or row.status not in ("queued", "running"):
        return Admission(start="ended", recoveries=0, first_started_at=None, lease=None)
    lease = leases.acquire(conn, run_id, owner=owner, ttl=ttl, now=now)
    first = row.first_started_at if row.first_started_at is not None else now
    recoveries = row.recoveries + (row.status == "running")
    conn.execute(
        update(_queued)
        .where(_queued.c.run_id == rows.key(run_id))
        .values(recoveries=recoveries, first_started_at=first)
    )
    if row.cancel_requested:
        start: Start = "cancelled"
    elif recoveries > max_recoveries:
        start = "poisoned"
    else:
        start = "recovery" if row.status == "running" else "first"
    return Admission(start=start, recoveries=recoveries, first_started_at=first, lease=lease)


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
