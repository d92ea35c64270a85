"""The run list a page at a time: filtered, ordered and cut in SQL, never read whole.

Runs are listed newest first, by ``(started_at, id)`` descending; a page is the runs that
come after a position in that order (a keyset, :class:`RunKey`), so reading page 2,000
costs what reading page 1 does, and a run stored while a client pages shows up on the
first page instead of shifting the pages after it. Migration 6 indexes ``(started_at,
id)`` and ``(status, started_at, id)``, so each page reads its own rows and no others.

A run stored as ``running`` is held (its process is alive) while its lease has not
expired on the store's clock, or when the caller says it executes the run itself; the
``leased`` filter says which of the two a page wants.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import ColumnElement, Connection, and_, not_, or_, select, tuple_

from taskdecomp.store import schema
from taskdecomp.store.base import RunState, RunSummary
from taskdecomp.store.reads import AnyRow, summary

_runs = schema.runs


@dataclass(frozen=True, kw_only=True, slots=True)
class RunKey:
    """A position in the run list: a run's start time and id, as stored."""

    started_at: float
    id: str
    """The id's stored form (:func:`taskdecomp.store.rows.key`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ListedRun:
    """One run of a page."""

    summary: RunSummary
    leased: bool
    """Whether a live lease held the run when the page was read (store clock)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunPage:
    """Runs in list order, and where the next page starts."""

    runs: tuple[ListedRun, ...]
    next: RunKey | None
    """The last run of this page when more follow it; ``None`` on the last page."""


def page_runs(
    conn: Connection,
    *,
    limit: int,
    after: RunKey | None = None,
    status: RunState | None = None,
    leased: bool | None = None,
    held: Collection[str] = (),
    now: float,
) -> RunPage:
    """At most ``limit`` runs after ``after``, newest first.

    Args:
        conn: a read transaction.
        limit: the most runs to return (at least 1).
        after: the position to start after (a page's :attr:`RunPage.next`); ``None``: the
            newest run.
        status: only runs stored with this status.
        leased: only runs a live lease (or ``held``) holds (``True``), or only runs none
            holds (``False``).
        held: stored ids of runs to count as held whatever their lease says.
        now: the store's clock, against which leases expire.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    live = _live(now, held)
    query = select(
        _runs.c.id,
        _runs.c.goal,
        _runs.c.status,
        _runs.c.stop_reason,
        _runs.c.started_at,
        _runs.c.finished_at,
        _runs.c.lease_expires_at,
    )
    if status is not None:
        query = query.where(_runs.c.status == status)
    if leased is not None:
        query = query.where(live if leased else not_(live))
    if after is not None:
        query = query.where(tuple_(_runs.c.started_at, _runs.c.id) < (after.started_at, after.id))
    query = query.order_by(_runs.c.started_at.desc(), _runs.c.id.desc()).limit(limit + 1)
    rows = conn.execute(query).all()
    listed = tuple(
        ListedRun(summary=summary(row), leased=_held(row, now, held)) for row in rows[:limit]
    )
    last = rows[limit - 1] if len(rows) > limit else None
    return RunPage(
        runs=listed,
        next=None if last is None else RunKey(started_at=float(last.started_at), id=last.id),
    )


def _live(now: float, held: Collection[str]) -> ColumnElement[bool]:
    """A run whose lease is alive at ``now``, or one of ``held`` (never NULL, so ``NOT`` works)."""
    alive = and_(_runs.c.lease_expires_at.is_not(None), _runs.c.lease_expires_at > now)
    return or_(alive, _runs.c.id.in_(list(held))) if held else alive


def _held(row: AnyRow, now: float, held: Collection[str]) -> bool:
    """:func:`_live` of a row read."""
    expires = row.lease_expires_at
    return row.id in held or (expires is not None and float(expires) > now)
