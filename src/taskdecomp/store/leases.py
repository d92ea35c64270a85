"""Run leases in SQL: take, renew and release a run, and the fence every leased write passes.

A lease lives in the run's own row: ``lease_epoch`` counts acquisitions, ``lease_owner`` is
who took the current epoch, ``lease_heartbeat_at`` its last renewal and ``lease_expires_at``
when it runs out (``NULL`` once given up; owner and epoch stay, so a fenced-out process
learns who took its run). The fence of a write is a predicate on the ``UPDATE runs`` the
write makes anyway: ``WHERE id = :run AND lease_owner = :owner AND lease_epoch = :epoch
AND lease_expires_at IS NOT NULL``. No row updated means the run was taken over (or given
up); the transaction is rolled back and :class:`~taskdecomp.errors.LeaseLostError` raised.

The ``UPDATE`` is also what makes the fence safe on PostgreSQL: it locks the run's row, so a
take-over (an ``UPDATE`` of the same row) waits for a fenced write to commit, or the write,
re-checking its ``WHERE`` on the row the take-over left, updates nothing. SQLite serializes
writers (``BEGIN IMMEDIATE``) anyway. A write that inserts rows (a plan, an intent) selects
them from the run's row under the fence (:func:`fenced_insert`). In a group commit a
checkpoint that only inserts rows leaves its ``UPDATE`` to the end of the transaction (the
fence holds for all of it); one that updates anything else is fenced first, so a process
that lost the run never locks its rows.

Every time is the store's clock (:attr:`SqlStore.now <taskdecomp.store.sql.SqlStore.now>`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Insert, Table, bindparam, insert, select, update

from taskdecomp import owners
from taskdecomp.errors import LeaseLostError, RunLeasedError, RunNotFoundError
from taskdecomp.run import RunId
from taskdecomp.store import rows, schema
from taskdecomp.store.base import Lease
from taskdecomp.store.prepared import Prepared

_runs = schema.runs

HELD = (
    _runs.c.lease_owner == bindparam("b_owner"),
    _runs.c.lease_epoch == bindparam("b_epoch"),
    _runs.c.lease_expires_at.is_not(None),
)
"""The run's row is held by the lease :func:`params` binds: what every fenced statement adds
to its ``WHERE``."""

FENCE = (
    update(_runs)
    .where(_runs.c.id == bindparam("b_key"), *HELD)
    .values(lease_heartbeat_at=bindparam("b_now"), lease_expires_at=bindparam("b_expires"))
)
"""Renew the lease if it still holds the run: the fence of a write that updates no run row."""


def params(lease: Lease, *, now: float) -> dict[str, Any]:
    """The bound values of :data:`FENCE` (and of any statement built on it) for ``lease``."""
    return {
        "b_key": rows.key(lease.run_id),
        "b_owner": lease.owner,
        "b_epoch": lease.epoch,
        "b_now": now,
        "b_expires": now + lease.ttl,
    }


def fenced_insert(table: Table) -> Insert:
    """``INSERT INTO <table> ... SELECT :values FROM runs WHERE <fence> FOR SHARE``.

    The row is selected from the run's row under the fence (``FOR SHARE`` on PostgreSQL, so
    a take-over waits for it or makes it insert nothing): a fenced insert costs no statement
    more for its lease. Values are bound as ``v_<column>``, the fence as :data:`HELD` with
    ``b_key``; every column but an autoincrement ``id`` is given.
    """
    columns = [column for column in table.c if column.name != "id"]
    values = select(*[bindparam(f"v_{c.name}", type_=c.type) for c in columns]).where(
        _runs.c.id == bindparam("b_key"), *HELD
    )
    return insert(table).from_select(columns, values.with_for_update(read=True))


def fenced_values(row: dict[str, Any], lease: Lease) -> dict[str, Any]:
    """The bound values of :func:`fenced_insert` for ``row`` under ``lease``."""
    values = {f"v_{name}": value for name, value in row.items()}
    values.update(b_key=rows.key(lease.run_id), b_owner=lease.owner, b_epoch=lease.epoch)
    return values


_FENCED_INTENT = fenced_insert(schema.attempts)
_FENCED_INTENT_RETURNING = _FENCED_INTENT.returning(schema.attempts.c.id)
"""Built once: SQLAlchemy would otherwise build and key a new statement every call."""


def insert_intent(conn: Connection, row: dict[str, Any], lease: Lease) -> int:
    """Insert an attempt's intent only while ``lease`` holds the run, in one statement.

    An ``unsafe`` step's intent costs no statement more for its lease (:func:`fenced_insert`).

    Raises:
        LeaseLostError: nothing was inserted: ``lease`` no longer holds the run.
    """
    values = fenced_values(row, lease)
    if conn.dialect.name == "postgresql":
        attempt_id = conn.execute(_FENCED_INTENT_RETURNING, values).scalar()
    else:
        result = conn.execute(_FENCED_INTENT, values)
        attempt_id = result.lastrowid if result.rowcount == 1 else None
    if attempt_id is None:
        raise lost(conn, lease)
    return int(attempt_id)


def fence(conn: Connection, lease: Lease, *, now: float) -> None:
    """Check, in ``conn``'s transaction, that ``lease`` holds the run, and renew it.

    Raises:
        LeaseLostError: another owner or a newer epoch holds the run.
    """
    held(conn, _FENCE(conn, params(lease, now=now)), lease)


_FENCE = Prepared(FENCE)


def held(conn: Connection, updated: int, lease: Lease) -> None:
    """Check that a fenced statement updated the run's row (``updated`` rows).

    Raises:
        LeaseLostError: it updated nothing: ``lease`` no longer holds the run.
    """
    if updated != 1:
        raise lost(conn, lease)


def acquire(conn: Connection, run_id: RunId, *, owner: str, ttl: float, now: float) -> Lease:
    """Take the run at the next epoch, unless another owner's lease is still alive.

    A lease is alive until it expires, or until its owner is known to be gone: a process of
    this host that no longer runs (:func:`taskdecomp.owners.is_gone`) is taken over at once.
    Two processes taking the same run race on its epoch: exactly one wins.

    Raises:
        RunNotFoundError: no run has this id.
        RunLeasedError: another owner holds an unexpired lease.
    """
    key = rows.key(run_id)
    row = conn.execute(
        select(_runs.c.lease_owner, _runs.c.lease_epoch, _runs.c.lease_expires_at).where(
            _runs.c.id == key
        )
    ).first()
    if row is None:
        raise RunNotFoundError(
            f"no run {run_id!r} in the store; `taskdecomp runs` lists the stored runs",
            run_id=run_id,
        )
    refuse_held(run_id, row.lease_owner, row.lease_expires_at, owner=owner, now=now)
    epoch = int(row.lease_epoch) + 1
    taken = conn.execute(
        update(_runs)
        .where(_runs.c.id == key, _runs.c.lease_epoch == row.lease_epoch)
        .values(**rows.claim(owner, epoch=epoch, ttl=ttl, now=now))
    )
    if taken.rowcount != 1:  # PostgreSQL: another process took it since the select
        winner = conn.execute(select(_runs.c.lease_owner).where(_runs.c.id == key)).scalar()
        raise leased(run_id, str(winner), ttl)
    return Lease(run_id=run_id, owner=owner, epoch=epoch, ttl=ttl, expires_at=now + ttl)


def refuse_held(
    run_id: RunId, holder: str | None, expires_at: float | None, *, owner: str, now: float
) -> None:
    """Refuse to take a run whose lease another owner holds alive.

    A lease is alive until it expires, or until its owner is known to be gone (see
    :func:`acquire`).

    Raises:
        RunLeasedError: ``holder`` is another owner and its lease is alive.
    """
    if holder is None or holder == owner or expires_at is None or expires_at <= now:
        return
    if not owners.is_gone(holder):
        raise leased(run_id, holder, expires_at - now)


def release(conn: Connection, lease: Lease) -> bool:
    """Give the run up if ``lease`` still holds it; whether it did."""
    result = conn.execute(
        update(_runs)
        .where(
            _runs.c.id == rows.key(lease.run_id),
            _runs.c.lease_owner == lease.owner,
            _runs.c.lease_epoch == lease.epoch,
        )
        .values(**rows.released())
    )
    return result.rowcount == 1


def leased(run_id: RunId, owner: str, expires_in: float) -> RunLeasedError:
    """The refusal of a run another process owns."""
    died = (
        "if that process died on another host, resume again once its lease expired"
        if owners.parse(owner) is not None
        else "its owner id is of an older form, so even if that process died, resume again "
        "once its lease expired"
    )
    return RunLeasedError(
        f"run {run_id!r} is in flight in another process: its owner {owner!r} holds the "
        f"lease for {expires_in:.1f}s more unless it renews it; wait for that run to end; "
        f"{died}",
        owner=owner,
        expires_in=expires_in,
    )


def lost(conn: Connection, lease: Lease) -> LeaseLostError:
    """The error of a fenced write that found the run held by someone else."""
    row = conn.execute(
        select(_runs.c.lease_owner, _runs.c.lease_epoch, _runs.c.lease_expires_at).where(
            _runs.c.id == rows.key(lease.run_id)
        )
    ).first()
    owner = None if row is None else row.lease_owner
    epoch = -1 if row is None else int(row.lease_epoch)
    if row is None:
        now_held = "it is no longer stored"
    elif epoch == lease.epoch:
        now_held = "that lease was given up"
    else:
        released = " and has since released it" if row.lease_expires_at is None else ""
        now_held = f"{owner!r} took it over at epoch {epoch} after that lease expired{released}"
    return LeaseLostError(
        f"run {lease.run_id!r} is no longer held by {lease.owner!r} (epoch {lease.epoch}): "
        f"{now_held}; this process stopped without writing; `taskdecomp show "
        f"{lease.run_id}` has the run's state",
        owner=owner,
        epoch=epoch,
    )
