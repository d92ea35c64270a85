"""The journal: how a run in flight writes itself to a store.

A :class:`Journal` belongs to one segment of one run (the first execution, or a resume). It
subscribes to the run's events and keeps them until the next write, so events land in the
same transaction as the plan, the checkpoint or the end they belong to. The scheduler calls
it around every step:

- :meth:`Journal.begin` commits the intent before an ``unsafe`` tool is called (other
  classes may run again, so they write nothing yet);
- ``Attempt.succeeded`` is the checkpoint: attempt, trace entry, history entry, usage and
  events in one transaction, before the next step can start;
- ``Attempt.failed`` and ``Attempt.cancelled`` (:mod:`taskdecomp.attempts`) record attempts
  that ended otherwise. The settings stored with a run are :mod:`taskdecomp.runconfig`; what
  an event record keeps, :mod:`taskdecomp.eventrecords`.

The journal is where a run's record meets the store: every plan, trace and history entry,
observation, strategy state and result it writes has its secrets replaced first
(:mod:`taskdecomp.redact`; the events come redacted from the event bus).

A journal holds its run's :class:`~taskdecomp.store.base.Lease`: every write is fenced by it,
:func:`leased` renews it while the run is in flight and gives it up at the end. Once a write
or a renewal finds the run taken over, the journal writes nothing more, and every write,
tool call and model call it is asked for stops the run with ``lease_lost`` instead.

How hard a write waits is the run's :data:`Durability`:

- ``async`` (the default): writes are handed to a :class:`~taskdecomp.writer.GroupWriter`, a
  thread that commits everything queued since its last commit in one transaction that does
  not wait for the disk. Only the intent before an ``unsafe`` call and the end of the run are
  barriers: the run waits (without blocking its other steps) until they, and everything
  before them, are on disk. A crash can lose the last finished ``read_only`` or
  ``idempotent`` steps, which a resume runs again with the same idempotency key; never an
  ``unsafe`` intent, and nothing once the end is reported.
- ``sync``: every write is its own durable transaction, made on the event loop before the
  run goes on (about a millisecond a checkpoint on SQLite, see ``bench/store.py``).

Either way a write cannot be torn by the cancellation of the task that makes it, and writes
happen in the order the engine made them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

from taskdecomp import stops
from taskdecomp.attempts import Attempt, frozen
from taskdecomp.budget import Usage
from taskdecomp.durability import DEFAULT_DURABILITY as DEFAULT_DURABILITY
from taskdecomp.durability import DURABILITIES as DURABILITIES
from taskdecomp.durability import Durability as Durability
from taskdecomp.errors import (
    ConfigError,
    LeaseLostError,
    StoreError,
)
from taskdecomp.eventrecords import event_data
from taskdecomp.events import (
    AnswerDelta,
    Event,
    ModelProgress,
)
from taskdecomp.owners import new_owner_id
from taskdecomp.plan import Plan, Step, TaskId
from taskdecomp.redact import Redactor
from taskdecomp.run import HistoryEntry, RunId, RunResult
from taskdecomp.stops import StopRun
from taskdecomp.store.base import (
    AttemptStart,
    EventRecord,
    Lease,
    NewRun,
    Store,
    StoredRun,
)
from taskdecomp.tools import SideEffects
from taskdecomp.writer import awaited, lane

logger = logging.getLogger(__name__)

MIN_LEASE_SECONDS = 0.1
"""The shortest lease a run may take (it is renewed every third of its length)."""

_T = TypeVar("_T")


def durability(value: str) -> Durability:
    """``value`` as a :data:`Durability`.

    Raises:
        ConfigError: it is not one of them.
    """
    for mode in DURABILITIES:
        if value == mode:
            return mode
    raise ConfigError(
        f"unknown durability {value!r}; choose one of: {', '.join(DURABILITIES)} "
        "(async commits steps in groups and waits for the disk only before unsafe calls "
        "and at the end; sync commits every step durably)"
    )


def lease_seconds(seconds: float) -> float:
    """``seconds`` as a lease length.

    Raises:
        ConfigError: it is shorter than :data:`MIN_LEASE_SECONDS` (or not a number).
    """
    if not seconds >= MIN_LEASE_SECONDS:  # also refuses NaN
        raise ConfigError(
            f"lease_seconds {seconds!r} is too short; give at least {MIN_LEASE_SECONDS} "
            "(TASKDECOMP_LEASE_SECONDS on the command line; the default is 30)"
        )
    return float(seconds)


def first_lease(store: Store, run_id: RunId, *, seconds: float) -> Lease:
    """The lease a new run is created with: epoch 1, a new owner, ``seconds`` from now.

    For :meth:`Journal.create`, whose row, stored a moment later, expires no sooner.
    """
    now = getattr(store, "now", time.time)()
    return Lease(
        run_id=run_id, owner=new_owner_id(), epoch=1, ttl=seconds, expires_at=now + seconds
    )


def take_over(store: Store, run_id: RunId, *, seconds: float) -> tuple[Lease, StoredRun]:
    """Acquire a stored run's lease, then read the run as its previous owner left it.

    Raises:
        RunLeasedError: another process holds the run and its lease has not expired.
        ConfigError: ``seconds`` is too short.
        StoreError: the store cannot be read or written.
    """
    lease = store.acquire_lease(run_id, owner=new_owner_id(), ttl=lease_seconds(seconds))
    try:
        return lease, store.load_run(run_id)
    except BaseException:
        store.release_lease(lease)
        raise


def load_leased(store: Store, lease: Lease) -> StoredRun:
    """Read a run whose ``lease`` was just taken; the lease is given up if that fails.

    Raises:
        StoreError: the store cannot be read.
    """
    try:
        return store.load_run(lease.run_id)
    except BaseException:
        store.release_lease(lease)
        raise


@asynccontextmanager
async def leased(journal: Journal | None) -> AsyncIterator[None]:
    """Renew ``journal``'s lease every third of its length while the body runs.

    On the way out the lease is given up if the run did not finish (it raised), so another
    process may resume it at once; a finished run's lease ended with it. ``None`` (a run
    kept in memory only) does nothing.
    """
    if journal is None:
        yield
        return
    beat = _Heartbeat(journal)
    try:
        yield
    finally:
        beat.stop()
        journal.release()


class _Heartbeat:
    """Renews ``journal``'s lease every third of its length, by the loop's timer.

    A timer rather than a task: a short run pays for one timer, not for a task started,
    cancelled and waited for.
    """

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self._loop = asyncio.get_running_loop()
        self._timer = self._loop.call_later(journal.lease.ttl / 3, self._beat)

    def _beat(self) -> None:
        journal = self._journal
        try:
            journal.renew()
        except Exception:  # renew() handles the store's errors: a bug, logged; beat on
            logger.exception("the lease heartbeat of run %r failed", journal.run_id)
        if journal.beating:
            self._timer = self._loop.call_later(journal.lease.ttl / 3, self._beat)

    def stop(self) -> None:
        self._timer.cancel()


class Journal:
    """Writes one segment of a run to ``store``, fenced by the run's lease.

    Args:
        store: where the run is kept.
        lease: this process's lease on the run (from creating or taking it over).
        segment: 1 for a new run, 2 for its first resume, and so on.
        usage: what the run has spent so far (stored with each checkpoint).
        now: wall clock for event times.
        durability: ``async`` hands writes to a group-commit thread; ``sync`` makes each
            one durable before the run goes on.
        redactor: replaces secrets in what is written; default: the environment's secrets.
    """

    def __init__(
        self,
        store: Store,
        lease: Lease,
        *,
        segment: int,
        usage: Callable[[], Usage],
        now: Callable[[], float] = time.time,
        durability: Durability = "sync",
        redactor: Redactor | None = None,
    ) -> None:
        self.store = store
        self.redactor = redactor if redactor is not None else Redactor.from_environ()
        self.run_id = lease.run_id
        self.lease = lease
        """The lease as last renewed."""
        self.lost: LeaseLostError | None = None
        """Why the lease is lost, once a write or a renewal found the run taken over."""
        self.segment = segment
        self._usage = usage
        self._now = now
        self._clock: Callable[[], float] = getattr(store, "now", now)
        """The clock the lease is kept in."""
        self._events: list[EventRecord] = []
        self._ended = False
        self._creating: Future[None] | None = None
        """The run's row, queued and maybe not yet committed (:meth:`create`)."""
        self._held: list[tuple[Callable[[], object], str | None]] | None = None
        self.failed: BaseException | None = None
        """Why a queued write failed (other than a lost lease); raised at the next write."""
        self._strict_failed = partial(self._write_failed, None)
        self._writer = lane(store) if durability == "async" else None

    def __call__(self, event: Event) -> None:
        """Keep ``event`` for the next write (the journal is an event subscriber)."""
        if isinstance(event, ModelProgress):  # live only: a display's, not the record's
            return
        last = self._events[-1] if self._events else None
        if isinstance(event, AnswerDelta) and last is not None and _same_answer(last, event):
            # one record per answer between two writes, not one per streamed piece
            joined = {**last.data, "text": str(last.data["text"]) + event.text}
            self._events[-1] = EventRecord(kind=last.kind, at=last.at, data=joined)
            return
        self._events.append(
            EventRecord(kind=type(event).__name__, at=self._now(), data=event_data(event))
        )

    def drain(self) -> list[EventRecord]:
        """The events kept since the last write; the journal forgets them.

        While writes are held, none: they go with the plan, in the order they came.
        """
        if self._held is not None:
            return []
        events, self._events = self._events, []
        return events

    def hold(self) -> None:
        """Keep writes back until :meth:`unhold` (the steps of a plan still streaming).

        The plan, stored meanwhile, goes first; a crash before it loses the held steps,
        which are ``read_only`` and run again on resume.
        """
        self._held = []

    def unhold(self) -> None:
        """Make the held writes, in order."""
        held, self._held = self._held, None
        for write, best_effort in held or ():
            self.record(write, best_effort=best_effort)

    def check(self) -> None:
        """Stop the run if its lease is lost.

        A lease that ran out while this process stalled (stopped, swapped out, cut off) is
        renewed first: a process that wakes up after another took its run over learns it
        here, before it records or calls anything more.

        Raises:
            StopRun: ``lease_lost``, naming the run's new owner.
            StoreError: a queued write failed (the store could not be written).
        """
        if self.lost is None and not self._ended and self._clock() >= self.lease.expires_at:
            self.renew()
        if self.lost is not None:
            raise StopRun(stops.LEASE_LOST, message=str(self.lost))
        if self.failed is not None:
            raise self.failed

    def create(self, new: NewRun) -> None:
        """Store the new run, leased by this journal's lease.

        ``sync`` commits it durably here. ``async`` queues it ahead of the run's other
        writes and wakes the writer, which commits it (without waiting for the disk: the
        run's first barrier syncs it) with what the other runs of this process wrote
        meanwhile; :meth:`stored` waits for that, before the run calls anything.

        Raises:
            StoreError: ``sync``: the run cannot be stored (its id is taken, the store failed).
        """
        lease = self.lease

        def write() -> None:
            self.store.create_run(new, owner=lease.owner, ttl=lease.ttl)

        if self._writer is None:
            write()  # a transaction of its own, durable
        else:
            self._creating = self._writer.submit(write, urgent=True)

    async def stored(self) -> None:
        """Wait, without blocking the loop, until the run's row is committed.

        From then on it survives this process being killed. Cancelling the wait does not
        cancel the write: it is made all the same, before the run's end.

        Raises:
            StoreError: the run cannot be stored (its id is taken, the store failed).
        """
        if self._creating is not None:
            await awaited(self._creating)
            self._creating = None

    def reopened(self) -> None:
        """Mark the stored run ``running`` again for this segment.

        Raises:
            LeaseLostError: the run was taken over right after this process acquired it.
        """
        try:  # async: the first barrier makes it durable, as a new run's row
            with self.store.batch(durable=self._writer is None):
                self.store.reopen_run(
                    self.run_id, segment=self.segment, events=self.drain(), lease=self.lease
                )
        except LeaseLostError as exc:
            self.lost = exc
            raise

    def plan_created(self, plan: Plan) -> None:
        """Store the validated plan.

        Raises:
            StopRun: ``lease_lost``: another process owns the run.
        """
        events, self._events = self._events, []
        lease, plan = self.lease, self.redactor.value(plan)

        def write() -> None:
            self.store.save_plan(self.run_id, plan, events=events, lease=lease)

        if self._held is not None:
            self._held.insert(0, (write, None))  # before the steps that started meanwhile
        else:
            self.record(write)

    async def begin(
        self, step_no: int, step: Step, *, side_effects: SideEffects, key: str
    ) -> Attempt:
        """Start an attempt at ``step``; for an ``unsafe`` tool, commit the intent first.

        The intent is the fence before an ``unsafe`` call: when it cannot be written, the
        tool is not called. It is durable before this returns, with every write before it.

        Raises:
            StopRun: ``lease_lost``: another process owns the run.
        """
        self.check()
        start = AttemptStart(
            step_no=step_no,
            step_id=step.id,
            segment=self.segment,
            side_effects=side_effects,
            idempotency_key=key,
        )
        attempt_id = None
        if side_effects == "unsafe":
            lease = self.lease
            attempt_id = await self.durably(
                lambda: self.store.record_intent(self.run_id, start, lease=lease)
            )
        return Attempt(self, start, attempt_id)

    def step_done(
        self,
        entry: HistoryEntry,
        *,
        state: tuple[Plan, Mapping[str, Any], Mapping[str, Any]] | None = None,
    ) -> None:
        """Checkpoint a step that finished without a call of its own (an instruction step).

        ``state`` (the plan, the strategy state and the approvals) is stored in the same
        transaction, so a crash never keeps the step without what the strategy made of it.

        Raises:
            StopRun: ``lease_lost``: another process owns the run; nothing was written.
        """
        usage, events, lease = self.usage(), self.drain(), self.lease
        kept = (state[0], frozen(state[1]), frozen(state[2])) if state else None
        entry, kept = self.redactor.value((entry, kept))

        def save() -> None:
            self.store.save_step(self.run_id, entry, usage=usage, events=events, lease=lease)
            if kept is not None:
                plan, strategy, approvals = kept
                self.store.save_state(
                    self.run_id, plan, strategy, approvals=approvals, usage=usage, events=(),
                    lease=lease,
                )  # fmt: skip

        def write() -> None:
            if self._writer is None and kept is not None:  # sync: one transaction
                with self.store.batch(durable=True):
                    save()
            else:  # async: the group's transaction holds both
                save()

        self.record(write)

    def state_saved(
        self, plan: Plan, state: Mapping[str, Any], *, approvals: Mapping[str, Any]
    ) -> None:
        """Checkpoint the strategy's state, the run's current plan and its approvals.

        Raises:
            StopRun: ``lease_lost``: another process owns the run; nothing was written.
        """
        plan, state, approvals = self.redactor.value((plan, frozen(state), frozen(approvals)))
        usage, events, lease = self.usage(), self.drain(), self.lease
        self.record(
            lambda: self.store.save_state(
                self.run_id,
                plan,
                state,
                approvals=approvals,
                usage=usage,
                events=events,
                lease=lease,
            )
        )

    def finished(
        self, result: RunResult, *, approvals: Mapping[str, Any] | None = None
    ) -> RunResult:
        """Store how the run ended, which ends the lease; return the result to hand back.

        ``approvals`` are stored with it when the run had any. The result is ``result``
        as stored (its secrets replaced), unless another process owns the run: then nothing
        is stored and the result is a ``lease_lost`` stop naming the new owner. The end is on
        disk, with every write queued before it (in one commit), when this returns.

        Raises:
            StoreError: a queued write failed, or the end cannot be stored.
        """
        result, end = self._end(result, approvals)
        if end is not None:
            try:
                self._last(end)
            except LeaseLostError as exc:
                self.lost = exc
            else:
                self._ended = True
                return result
        return self._taken(result)

    async def ended(
        self, result: RunResult, *, approvals: Mapping[str, Any] | None = None
    ) -> RunResult:
        """:meth:`finished`, waiting for the disk without blocking the event loop.

        In ``async`` mode the runs of this process that end at the same moment share one
        durable commit (:meth:`~taskdecomp.writer.GroupWriter.end`).

        Raises:
            StoreError: a queued write failed, or the end cannot be stored.
        """
        if self._writer is None:
            return self.finished(result, approvals=approvals)
        result, end = self._end(result, approvals)
        if end is not None:
            error = None
            try:
                await self._writer.end(end)
            except Exception as exc:  # after the writes queued before it have reported
                error = exc
            try:
                self._raise_failed(error)
            except LeaseLostError as exc:
                self.lost = exc
            else:
                self._ended = True
                return result
        return self._taken(result)

    def _end(
        self, result: RunResult, approvals: Mapping[str, Any] | None
    ) -> tuple[RunResult, Callable[[], None] | None]:
        """``result`` as stored, and the write that stores it (``None``: the lease is lost).

        Raises:
            StoreError: a queued write failed.
        """
        if self.lost is None and self.failed is not None:
            self.close_writer()
            raise self.failed
        result, approvals = self.redactor.value((result, approvals))
        if self.lost is not None:
            return result, None
        events, lease = self.drain(), self.lease

        def end() -> None:
            if self.failed is not None:  # a write queued before it failed: no end
                raise self.failed
            self.store.finish_run(
                self.run_id, result, events=events, lease=lease, approvals=approvals
            )

        return result, end

    def _taken(self, result: RunResult) -> RunResult:
        """``result`` as the ``lease_lost`` stop of a run another process owns."""
        return replace(
            result,
            status="stopped",
            stop_reason=stops.LEASE_LOST,
            answer=None,
            message=str(self.lost),
        )

    def _last(self, write: Callable[[], None]) -> None:
        """Make ``write`` durably after every queued write, then stop the writer."""
        if self._writer is None:
            write()
            return
        error = None
        try:
            self._writer.last(write)
        except Exception as exc:  # after the writes queued before it have reported
            error = exc
        self._raise_failed(error)

    def _raise_failed(self, error: Exception | None) -> None:
        """Raise why the end was not stored: a lost lease, an earlier write's, ``error``."""
        if self.lost is not None:
            raise self.lost  # a write queued before it found the run taken over
        if self.failed is not None:
            raise self.failed
        if error is not None:
            raise error

    @property
    def beating(self) -> bool:
        """Whether the lease is still renewed: neither lost nor ended."""
        return self.lost is None and not self._ended

    def renew(self) -> None:
        """Renew the lease now; a lost lease is remembered, a store failure only logged."""
        if self.lost is not None or self._ended:
            return
        if self._creating is not None and not self._creating.done():
            return  # the row is not there yet; the lease it is stored with lasts longer
        try:
            self.lease = self.store.renew_lease(self.lease)
        except LeaseLostError as exc:
            self.lost = exc
            logger.warning("%s", exc)
        except StoreError:
            logger.exception("could not renew the lease on run %r; trying again", self.run_id)

    def release(self) -> None:
        """Give the lease up, unless the run finished or another process owns it.

        Queued writes are committed first, so a resume finds them.
        """
        self.close_writer()
        if self.lost is not None or self._ended:
            return
        self._ended = True
        try:
            self.store.release_lease(self.lease)
        except StoreError:
            logger.exception("could not release the lease on run %r", self.run_id)

    def usage(self) -> Usage:
        """What the run has spent so far, across segments."""
        return self._usage()

    def flush(self) -> None:
        """Block until every queued write is on disk (``async``; ``sync`` writes already are).

        Raises:
            StopRun: ``lease_lost``: a queued write found the run taken over.
            StoreError: a queued write failed.
        """
        if self._writer is not None:
            self._writer.flush()
        self.check()

    def close_writer(self) -> None:
        """Commit every queued write and stop the writer (``async`` only)."""
        if self._writer is not None:
            self._writer.close()

    def record(self, write: Callable[[], object], *, best_effort: str | None = None) -> None:
        """Make a fenced write: now (``sync``), or in the next group (``async``).

        With ``best_effort`` (what the write records), a queued write that fails is logged
        instead of failing the run.

        Raises:
            StopRun: ``lease_lost``: the lease was lost before or by this write.
            StoreError: this write (``sync``) or an earlier queued one failed.
        """
        if self._held is not None:
            self._held.append((write, best_effort))
            return
        if self._writer is None:
            self.fenced(write)
            return
        self.check()
        on_error = (
            self._strict_failed if best_effort is None else partial(self._write_failed, best_effort)
        )
        self._writer.post(write, on_error=on_error)

    async def durably(self, write: Callable[[], _T]) -> _T:
        """Make a fenced write that is on disk, with every write before it, when this returns.

        Raises:
            StopRun: ``lease_lost``: the lease was lost before or by this write.
            StoreError: this write or an earlier queued one failed.
        """
        if self._writer is None:
            return self.fenced(write)
        self.check()
        try:
            return await self._writer.durable(write)
        except LeaseLostError as exc:
            self.lost = exc
            raise StopRun(stops.LEASE_LOST, message=str(exc)) from exc

    def _write_failed(self, best_effort: str | None, exc: BaseException) -> None:
        """Remember how a queued write failed (runs on the writer's thread)."""
        if isinstance(exc, LeaseLostError):
            self.lost = self.lost or exc
        elif best_effort is not None:
            logger.error("could not record %s", best_effort, exc_info=exc)
        elif self.failed is None:
            self.failed = exc

    def fenced(self, write: Callable[[], _T]) -> _T:
        """Run a fenced store write; a lost lease stops the run.

        Raises:
            StopRun: ``lease_lost``: the lease was lost before or by this write.
        """
        self.check()
        try:
            return write()
        except LeaseLostError as exc:
            self.lost = exc
            raise StopRun(stops.LEASE_LOST, message=str(exc)) from exc


def interrupted(stored: StoredRun, step_id: TaskId) -> StopRun:
    """The stop for an ``unsafe`` step whose outcome is unknown."""
    step = next((s for s in stored.plan.steps if s.id == step_id), None) if stored.plan else None
    tool = (
        "an unsafe tool" if step is None or step.tool is None else f"the unsafe tool {step.tool!r}"
    )
    return StopRun(
        stops.interrupted_unknown_outcome(step_id),
        message=f"step {step_id!r} called {tool} and the run was "
        "interrupted before its result was stored; it may or may not have taken effect, so it "
        "is not called again: check by hand",
    )


def _same_answer(record: EventRecord, delta: AnswerDelta) -> bool:
    """Whether ``delta`` goes on with the answer ``record`` holds (the same attempt)."""
    return record.kind == "AnswerDelta" and record.data.get("attempt") == delta.attempt
