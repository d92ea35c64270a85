"""Table rows back to domain objects (the read side of the store).

Every stored JSON value is validated into its domain type; a row that does not decode
raises :class:`~taskdecomp.errors.CorruptRecordError` naming the run, the table and the
column, so a damaged run is refused instead of resumed on a guess.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, get_args

from pydantic import TypeAdapter
from sqlalchemy import Connection, Row, bindparam, func, select

from taskdecomp.budget import Usage
from taskdecomp.errors import CorruptRecordError, RunNotFoundError
from taskdecomp.plan import Plan, Step, TaskId
from taskdecomp.run import HistoryEntry, RunId, TraceEntry
from taskdecomp.stops import LlmPhase, StopReason
from taskdecomp.store import schema
from taskdecomp.store.base import (
    AttemptRecord,
    AttemptStart,
    AttemptState,
    EventRecord,
    Lease,
    RunState,
    RunSummary,
    StoredRun,
)
from taskdecomp.store.codec import (
    decode_as,
    decode_json,
    decode_optional_text,
    decode_text,
    encode_text,
)
from taskdecomp.tools import SideEffects

_STEPS = TypeAdapter(tuple[Step, ...])
_TRACE = TypeAdapter(TraceEntry)
_USAGE = TypeAdapter(Usage)
_MAPPING = TypeAdapter(dict[str, Any])

AnyRow: TypeAlias = Row[*tuple[Any, ...]]


_RUN_ID = select(schema.runs.c.id).where(schema.runs.c.id == bindparam("b_key"))


def run_exists(conn: Connection, run_id: RunId) -> bool:
    """Whether a run with this id is stored."""
    key = encode_text(run_id, what="run id")
    return conn.execute(_RUN_ID, {"b_key": key}).first() is not None


def load_run(conn: Connection, run_id: RunId, *, store: str) -> StoredRun:
    """Read and decode one run.

    Raises:
        RunNotFoundError: no run has this id.
        CorruptRecordError: a row does not decode.
    """
    key = encode_text(run_id, what="run id")
    row = conn.execute(select(schema.runs).where(schema.runs.c.id == key)).first()
    if row is None:
        raise RunNotFoundError(
            f"no run {run_id!r} in the store {store!r}; `taskdecomp runs` lists the stored runs",
            run_id=run_id,
        )
    where = f"run {run_id!r}"
    plan = _plan(conn, key, where)
    outcome = _mapping(row.result, f"{where}: runs.result") if row.result is not None else {}
    return StoredRun(
        summary=summary(row),
        model=decode_optional_text(row.model, where=f"{where}: runs.model"),
        tools=decode_optional_text(row.tools, where=f"{where}: runs.tools"),
        config=_mapping(row.config, f"{where}: runs.config"),
        segments=int(row.segments),
        usage=decode_as(_USAGE, row.usage, where=f"{where}: runs.usage"),
        plan=plan,
        history=_history(conn, key, plan, where),
        attempts=_attempts(conn, key, where),
        answer=_optional_str(outcome.get("answer"), f"{where}: runs.result.answer"),
        output=outcome.get("output"),
        raw_plan=outcome.get("raw_plan"),
        llm_phase=_choice(outcome.get("llm_phase"), LlmPhase, f"{where}: runs.result"),
        message=_optional_str(outcome.get("message"), f"{where}: runs.result.message"),
        state=_mapping(row.state, f"{where}: runs.state") if row.state is not None else {},
        approvals=(
            _mapping(row.approvals, f"{where}: runs.approvals") if row.approvals is not None else {}
        ),
        lease=lease(row, run_id),
    )


def lease(row: AnyRow, run_id: RunId) -> Lease | None:
    """The lease a ``runs`` row records, or ``None`` when nobody holds the run."""
    if row.lease_owner is None or row.lease_expires_at is None:
        return None
    expires_at = float(row.lease_expires_at)
    heartbeat = float(row.lease_heartbeat_at or expires_at)
    return Lease(
        run_id=run_id,
        owner=decode_text(row.lease_owner, where=f"run {run_id!r}: runs.lease_owner"),
        epoch=int(row.lease_epoch),
        ttl=expires_at - heartbeat,
        expires_at=expires_at,
    )


def list_runs(conn: Connection, *, limit: int | None) -> list[RunSummary]:
    """Run summaries, newest first."""
    runs = schema.runs
    query = select(
        runs.c.id,
        runs.c.goal,
        runs.c.status,
        runs.c.stop_reason,
        runs.c.started_at,
        runs.c.finished_at,
    ).order_by(runs.c.started_at.desc(), runs.c.id.desc())
    if limit is not None:
        query = query.limit(limit)
    return [summary(row) for row in conn.execute(query)]


def load_events(conn: Connection, run_id: RunId) -> list[EventRecord]:
    """A run's events in the order they were written."""
    events = schema.events
    key = encode_text(run_id, what="run id")
    query = select(events).where(events.c.run_id == key).order_by(events.c.id)
    where = f"run {run_id!r}: events.data"
    return [
        EventRecord(kind=row.kind, at=row.at, data=_mapping(row.data, where))
        for row in conn.execute(query)
    ]


def summary(row: AnyRow) -> RunSummary:
    """The summary in a ``runs`` row (its id, goal, status, stop reason and times)."""
    run_id = RunId(decode_text(row.id, where="runs.id"))
    where = f"run {run_id!r}: runs"
    reason = decode_optional_text(row.stop_reason, where=f"{where}.stop_reason")
    return RunSummary(
        run_id=run_id,
        goal=decode_text(row.goal, where=f"{where}.goal"),
        status=_choice(row.status, RunState, f"{where}.status"),
        stop_reason=StopReason(reason) if reason is not None else None,
        started_at=float(row.started_at),
        finished_at=None if row.finished_at is None else float(row.finished_at),
    )


def _plan(conn: Connection, key: str, where: str) -> Plan | None:
    raw = conn.execute(select(schema.plans.c.plan).where(schema.plans.c.run_id == key)).scalar()
    if raw is None:
        return None
    return Plan(steps=decode_as(_STEPS, raw, where=f"{where}: plans.plan"))


def _history(conn: Connection, key: str, plan: Plan | None, where: str) -> tuple[HistoryEntry, ...]:
    steps = schema.steps
    query = select(steps).where(steps.c.run_id == key).order_by(steps.c.step_no)
    by_id = {step.id: step for step in plan.steps} if plan is not None else {}
    entries = []
    for row in conn.execute(query):
        step_id = decode_text(row.step_id, where=f"{where}: steps.step_id")
        step = by_id.get(TaskId(step_id))
        if step is None:
            raise CorruptRecordError(
                f"stored {where}: step {step_id!r} has a result but is not in the stored "
                "plan; refusing to use it"
            )
        observation = decode_json(row.observation, where=f"{where}: step {step_id!r}")
        entries.append(HistoryEntry(step_no=row.step_no, plan_step=step, observation=observation))
    return tuple(entries)


def _attempts(conn: Connection, key: str, where: str) -> tuple[AttemptRecord, ...]:
    attempts = schema.attempts
    query = select(attempts).where(attempts.c.run_id == key).order_by(attempts.c.id)
    return tuple(_attempt(row, where) for row in conn.execute(query))


def _attempt(row: AnyRow, where: str) -> AttemptRecord:
    here = f"{where}: attempt {row.id}"
    start = AttemptStart(
        step_no=int(row.step_no),
        step_id=TaskId(decode_text(row.step_id, where=f"{here} step_id")),
        segment=int(row.segment),
        side_effects=_choice(row.side_effects, SideEffects, f"{here} side_effects"),
        idempotency_key=decode_text(row.idempotency_key, where=f"{here} idempotency_key"),
    )
    trace = None if row.trace is None else decode_as(_TRACE, row.trace, where=f"{here} trace")
    state = _choice(row.state, AttemptState, f"{here} state")
    return AttemptRecord(id=int(row.id), start=start, state=state, trace=trace)


def _mapping(raw: str, where: str) -> Mapping[str, Any]:
    return decode_as(_MAPPING, raw, where=where)


def _optional_str(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise CorruptRecordError(f"stored {where} is not text; refusing to use it")


def _choice(value: Any, options: Any, where: str) -> Any:
    """``value`` when it is one of the ``Literal`` ``options`` (``None`` passes)."""
    allowed: Sequence[str] = get_args(options)
    if value is None or value in allowed:
        return value
    raise CorruptRecordError(
        f"stored {where} is {value!r}, not one of {', '.join(allowed)}; refusing to use it"
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class SequencedEvent:
    """A stored event with its per-run sequence number (1 for a run's first event)."""

    seq: int
    event: EventRecord


@dataclass(frozen=True, kw_only=True, slots=True)
class EventPage:
    """A run's status and the events that follow a sequence number."""

    status: RunState
    """Read before the events: when it is final, the page holds every event up to the end."""
    events: tuple[SequencedEvent, ...]


def load_event_page(conn: Connection, run_id: RunId, *, after: int, limit: int) -> EventPage:
    """The run's status, then at most ``limit`` of its events with a sequence above ``after``.

    A run's events are appended in the order its one writer commits them and are never
    deleted, so an event's sequence number is its position in the run's log: the same
    number for the same event in every read, after any restart. The status is read first:
    a run ends in the transaction that writes its last events, so a final status means
    the events read after it are complete.

    Raises:
        RunNotFoundError: no run has this id.
    """
    key = encode_text(run_id, what="run id")
    runs = schema.runs
    status = conn.execute(select(runs.c.status).where(runs.c.id == key)).scalar()
    if status is None:
        raise RunNotFoundError(f"no run {run_id!r} in the store", run_id=run_id)
    events = schema.events
    query = (
        select(events)
        .where(events.c.run_id == key)
        .order_by(events.c.id)
        .offset(max(after, 0))
        .limit(limit)
    )
    where = f"run {run_id!r}: events.data"
    page = tuple(
        SequencedEvent(
            seq=max(after, 0) + number,
            event=EventRecord(kind=row.kind, at=row.at, data=_mapping(row.data, where)),
        )
        for number, row in enumerate(conn.execute(query), start=1)
    )
    return EventPage(status=_choice(status, RunState, f"run {run_id!r}: runs.status"), events=page)


def count_events(conn: Connection, run_id: RunId) -> tuple[RunState, int]:
    """The run's status and how many events it has: the sequence number of its last one.

    Raises:
        RunNotFoundError: no run has this id.
    """
    key = encode_text(run_id, what="run id")
    runs, events = schema.runs, schema.events
    status = conn.execute(select(runs.c.status).where(runs.c.id == key)).scalar()
    if status is None:
        raise RunNotFoundError(f"no run {run_id!r} in the store", run_id=run_id)
    count = conn.execute(select(func.count()).where(events.c.run_id == key)).scalar()
    return _choice(status, RunState, f"run {run_id!r}: runs.status"), int(count or 0)


def runs_with_events_after(conn: Connection, mark: int) -> tuple[int, frozenset[str]]:
    """The newest event row id, and the runs with an event row id above ``mark``.

    On SQLite writers take turns, so row ids grow in commit order: a reader that keeps the
    id it saw last learns of every run whose events were committed since, by any process.
    """
    events = schema.events
    newest = int(conn.execute(select(func.max(events.c.id))).scalar() or 0)
    if newest <= mark:
        return newest, frozenset()
    found = conn.execute(select(events.c.run_id).where(events.c.id > mark).distinct())
    return newest, frozenset(str(row.run_id) for row in found)
