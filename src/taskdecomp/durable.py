"""The journal: how a run in flight writes itself to a store.

A :class:`Journal` belongs to one segment of one run (the first execution, or a resume). It
subscribes to the run's events and keeps them until the next write, so events land in the
same transaction as the plan, the checkpoint or the end they belong to. The scheduler calls
it around every step:

- :meth:`Journal.begin` commits the intent before an ``unsafe`` tool is called (other
  classes may run again, so they write nothing yet);
- :meth:`Attempt.succeeded` is the checkpoint: attempt, trace entry, history entry, usage
  and events in one transaction, before the next step can start;
- :meth:`Attempt.failed` and :meth:`Attempt.cancelled` record attempts that ended otherwise.

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
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, assert_never

from pydantic import BaseModel, ConfigDict, ValidationError

from taskdecomp import stops
from taskdecomp.budget import Budget, Usage
from taskdecomp.durability import DEFAULT_DURABILITY as DEFAULT_DURABILITY
from taskdecomp.durability import DURABILITIES as DURABILITIES
from taskdecomp.durability import Durability as Durability
from taskdecomp.errors import (
    ConfigError,
    CorruptRecordError,
    LeaseLostError,
    StoreError,
    StoreValueError,
)
from taskdecomp.events import (
    AgentTurn,
    ApprovalDecided,
    ApprovalRequested,
    Event,
    ModelCalled,
    ModelProgress,
    PlanCreated,
    PlanRevised,
    ReplanDecided,
    RunStarted,
    RunStopped,
    StepFinished,
    StepStarted,
)
from taskdecomp.owners import new_owner_id
from taskdecomp.plan import Plan, Step, TaskId
from taskdecomp.run import HistoryEntry, RunId, RunResult, TraceEntry
from taskdecomp.stops import StopRun, with_detail
from taskdecomp.store.base import (
    AttemptStart,
    AttemptState,
    Checkpoint,
    EventRecord,
    Lease,
    NewRun,
    Store,
    StoredRun,
)
from taskdecomp.store.codec import encode_json
from taskdecomp.tools import SideEffects, Toolset
from taskdecomp.writer import GroupWriter, Joinable

logger = logging.getLogger(__name__)

MAX_STORED_ERROR_CHARS = 100_000
"""A stored error message longer than this is cut (the run's own result keeps it whole)."""

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
    beat = asyncio.create_task(journal.heartbeat(), name=f"lease of run {journal.run_id}")
    try:
        yield
    finally:
        beat.cancel()
        await asyncio.gather(beat, return_exceptions=True)
        journal.release()


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
    ) -> None:
        self.store = store
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
        self._held: list[tuple[Callable[[], object], str | None]] | None = None
        self.failed: BaseException | None = None
        """Why a queued write failed (other than a lost lease); raised at the next write."""
        self._strict_failed = partial(self._write_failed, None)
        self._writer = (
            GroupWriter(store, name=f"writer of run {self.run_id}")
            if durability == "async"
            else None
        )

    def __call__(self, event: Event) -> None:
        """Keep ``event`` for the next write (the journal is an event subscriber)."""
        if isinstance(event, ModelProgress):  # live only: a display's, not the record's
            return
        self._events.append(
            EventRecord(kind=type(event).__name__, at=self._now(), data=_event_data(event))
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

    def reopened(self) -> None:
        """Mark the stored run ``running`` again for this segment.

        Raises:
            LeaseLostError: the run was taken over right after this process acquired it.
        """
        try:
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
        lease = self.lease

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
        frozen = (state[0], _frozen(state[1]), _frozen(state[2])) if state else None

        def save() -> None:
            self.store.save_step(self.run_id, entry, usage=usage, events=events, lease=lease)
            if frozen is not None:
                plan, strategy, approvals = frozen
                self.store.save_state(
                    self.run_id, plan, strategy, approvals=approvals, usage=usage, events=(),
                    lease=lease,
                )  # fmt: skip

        def write() -> None:
            if self._writer is None and frozen is not None:  # sync: one transaction
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
        state, approvals = _frozen(state), _frozen(approvals)
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
        itself, unless another process owns the run: then nothing is stored and the result
        is a ``lease_lost`` stop naming the new owner. The end is on disk, with every write
        queued before it (in one commit), when this returns.

        Raises:
            StoreError: a queued write failed, or the end cannot be stored.
        """
        if self.lost is None and self.failed is not None:
            self.close_writer()
            raise self.failed
        if self.lost is None:
            events, lease = self.drain(), self.lease

            def end() -> None:
                if self.failed is not None:  # a write queued before it failed: no end
                    raise self.failed
                self.store.finish_run(
                    self.run_id, result, events=events, lease=lease, approvals=approvals
                )

            try:
                self._last(end)
            except LeaseLostError as exc:
                self.lost = exc
            else:
                self._ended = True
                return result
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
        if self.lost is not None:
            raise self.lost  # a write queued before it found the run taken over
        if self.failed is not None:
            raise self.failed
        if error is not None:
            raise error

    async def heartbeat(self) -> None:
        """Renew the lease every third of its length until cancelled, lost or ended."""
        while self.lost is None and not self._ended:
            await asyncio.sleep(self.lease.ttl / 3)
            self.renew()

    def renew(self) -> None:
        """Renew the lease now; a lost lease is remembered, a store failure only logged."""
        if self.lost is not None or self._ended:
            return
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


class Attempt:
    """One attempt at a step; ends with exactly one of the methods below."""

    def __init__(self, journal: Journal, start: AttemptStart, attempt_id: int | None) -> None:
        self._journal = journal
        self._start = start
        self._attempt_id = attempt_id
        self._observation_json: str | None = None
        """The checked observation's stored form, encoded once (as it was then)."""

    def check(self, tool: str, observation: Any) -> None:
        """Refuse an observation the store cannot keep, before anything is recorded.

        Raises:
            StopRun: ``tool_error:<tool>`` saying why the value cannot be stored.
        """
        try:
            text = encode_json(observation, what=f"the observation of step {self._start.step_id!r}")
        except StoreValueError as exc:
            raise StopRun(with_detail("tool_error", tool), message=str(exc)) from exc
        self._observation_json = text

    async def succeeded(
        self,
        entry: TraceEntry,
        history: HistoryEntry | None,
        *,
        state: Mapping[str, Any] | None = None,
    ) -> None:
        """The checkpoint, in one transaction.

        The call's trace, the step's result (when the call ended the step), usage, events,
        and the strategy's state when given (an executor agent's turn). An ``unsafe``
        call's outcome is on disk before this returns, so a crash cannot leave it in doubt.

        Raises:
            StopRun: ``lease_lost``: another process owns the run; nothing was written.
        """
        await self._end(self._checkpoint("ok", entry, history, state))

    async def failed(self, entry: TraceEntry) -> None:
        """The tool failed or the gateway refused it; the outcome is known.

        Raises:
            StopRun: ``lease_lost``: another process owns the run; nothing was written.
        """
        await self._end(self._checkpoint("failed", entry, None))

    def cancelled(self, entry: TraceEntry) -> None:
        """The attempt was cancelled before it ended; an ``unsafe`` outcome stays unknown.

        A failed write is logged, not raised, so the cancellation goes on; the attempt then
        reads as a crash, which resume treats the same way. Without the lease nothing is
        written.
        """
        what = f"the cancelled attempt at {self._start.step_id!r}"
        try:
            self._journal.record(self._checkpoint("cancelled", entry, None), best_effort=what)
        except StopRun:
            pass  # the lease is lost: the run's new owner decides about this attempt
        except StoreError:
            logger.exception("could not record %s", what)

    async def _end(self, write: Callable[[], None]) -> None:
        if self._start.side_effects == "unsafe":
            await self._journal.durably(write)
        else:
            self._journal.record(write)

    def _checkpoint(
        self,
        state: AttemptState,
        entry: TraceEntry,
        history: HistoryEntry | None,
        strategy_state: Mapping[str, Any] | None = None,
    ) -> Callable[[], None]:
        """The write that stores this attempt's end, with what it carries as of now."""
        journal = self._journal
        if entry.error is not None and len(entry.error) > MAX_STORED_ERROR_CHARS:
            entry = replace(entry, error=entry.error[:MAX_STORED_ERROR_CHARS] + " [cut]")
        if strategy_state is not None:  # the agent's turn lists grow after this returns
            strategy_state = _frozen(strategy_state)
        checkpoint = Checkpoint(
            attempt=self._start,
            attempt_id=self._attempt_id,
            state=state,
            trace=entry,
            history=history,
            observation_json=self._observation_json if history is not None else None,
            usage=journal.usage(),
            events=journal.drain(),
            strategy_state=strategy_state,
        )
        return _CheckpointWrite(
            store=journal.store, run_id=journal.run_id, lease=journal.lease, checkpoint=checkpoint
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class _CheckpointWrite:
    """One checkpoint, which a group commit may join with the run's next ones."""

    store: Store
    run_id: RunId
    lease: Lease
    checkpoint: Checkpoint

    @property
    def join_key(self) -> tuple[int, RunId, str, int]:
        return (id(self.store), self.run_id, self.lease.owner, self.lease.epoch)

    def __call__(self) -> None:
        self.store.checkpoint(self.run_id, self.checkpoint, lease=self.lease)

    def join(self, writes: Sequence[Joinable]) -> None:
        checkpoints = [w.checkpoint for w in writes if isinstance(w, _CheckpointWrite)]
        self.store.checkpoints(self.run_id, checkpoints, lease=self.lease)


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredConfig:
    """The settings a run was stored with; a resume defaults to them."""

    budget: Budget
    allow: tuple[str, ...]
    """The tools the run allowed."""
    combiner_model: str | None
    strategy: str = "plan_execute"
    """The strategy the run uses."""
    options: Mapping[str, Any] | None = None
    """The strategy's options in their JSON form (stored under the strategy's name)."""


class _ConfigModel(BaseModel):
    model_config = ConfigDict(extra="allow")  # a strategy's options, under its name
    budget: dict[str, Any]
    allow: list[str]
    combiner_model: str | None = None
    strategy: str = "plan_execute"


def new_run(
    run_id: RunId,
    goal: str,
    *,
    tools: object,
    model: object,
    combiner_model: object,
    allow: Iterable[str],
    budget: Budget,
    strategy: str = "plan_execute",
    options: Mapping[str, Any] | None = None,
) -> NewRun:
    """What to store when a run starts: enough for a resume to rebuild it.

    ``options`` (the strategy's, in their JSON form) are stored under the strategy's name.
    """
    config: dict[str, Any] = {
        "budget": asdict(budget),
        "allow": sorted(allow),
        "combiner_model": model_name(combiner_model),
        "strategy": strategy,
    }
    if options is not None:
        config[strategy] = dict(options)
    return NewRun(
        run_id=run_id, goal=goal, model=model_name(model), tools=tools_name(tools), config=config
    )


def model_name(model: object) -> str | None:
    """A model's string: the string itself, or a model object's ``name``."""
    if model is None or isinstance(model, str):
        return model
    name = getattr(model, "name", None)
    return name if isinstance(name, str) else None


def tools_name(tools: object) -> str | None:
    """A toolset's source: a module name, or a file's absolute path; ``None`` for objects."""
    if isinstance(tools, Toolset):
        return tools.source
    if not isinstance(tools, str | Path):
        return None
    path = Path(tools)
    return str(path.resolve()) if path.is_file() else str(tools)


def stored_config(stored: StoredRun) -> StoredConfig:
    """Decode the settings stored with a run.

    Raises:
        CorruptRecordError: they do not decode.
    """
    try:
        raw = _ConfigModel.model_validate(stored.config)
        budget = Budget(**raw.budget)
        options = stored.config.get(raw.strategy)
        if options is not None and not isinstance(options, Mapping):
            raise ValueError(f"the {raw.strategy} options are not an object")
    except (ValidationError, TypeError, ValueError) as exc:
        problem = str(exc).strip().splitlines()[0]
        raise CorruptRecordError(
            f"stored run {stored.run_id!r}: runs.config does not decode ({problem}); "
            "refusing to use it"
        ) from exc
    return StoredConfig(
        budget=budget,
        allow=tuple(raw.allow),
        combiner_model=raw.combiner_model,
        strategy=raw.strategy,
        options=options,
    )


def require(value: str | None, what: str, run_id: RunId) -> str:
    """A stored default that a resume needs.

    Raises:
        ConfigError: the run was stored without it (it was given as an object).
    """
    if value is None:
        raise ConfigError(
            f"run {run_id!r} was started with {what} given as Python objects, so none is "
            f"stored; pass {what}= to resume (--{what} on the command line)"
        )
    return value


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


def _frozen(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """A copy of ``data`` as it is now, for a write made later on another thread."""
    return json.loads(encode_json(dict(data), what="the run's state"))  # type: ignore[no-any-return]


def _event_data(event: Event) -> Mapping[str, Any]:
    if isinstance(event, RunStarted):
        return {}
    if isinstance(event, ModelProgress):
        return {"phase": event.phase, "stage": event.stage, "tokens_out": event.tokens_out}
    if isinstance(event, ModelCalled):
        return {
            "phase": event.phase,
            "ok": event.ok,
            "tokens_in": event.tokens_in,
            "tokens_out": event.tokens_out,
            "seconds": round(event.seconds, 6),
        }
    if isinstance(event, PlanCreated):
        return {"steps": len(event.plan.steps)}
    if isinstance(event, StepStarted):
        return {"step_no": event.step_no, "step_id": event.step.id, "tool": event.step.tool}
    if isinstance(event, StepFinished):
        return _short(event.entry.to_dict())
    return _replan_event_data(event)


def _replan_event_data(
    event: ReplanDecided
    | PlanRevised
    | AgentTurn
    | ApprovalRequested
    | ApprovalDecided
    | RunStopped,
) -> Mapping[str, Any]:
    if isinstance(event, ReplanDecided):
        return {"iteration": event.iteration, "kind": event.kind}
    if isinstance(event, PlanRevised):
        return {
            "iteration": event.iteration,
            "steps": len(event.plan.steps),
            "changed": event.changed,
        }
    if isinstance(event, AgentTurn):
        return {
            "step_no": event.step_no,
            "step_id": event.step_id,
            "turn": event.turn,
            "action": event.action,
            "tool": event.tool,
        }
    if isinstance(event, ApprovalRequested):
        return {"kind": event.request.kind, "digest": event.request.digest}
    if isinstance(event, ApprovalDecided):
        return {
            "digest": event.digest,
            "approved": event.approved,
            "reason": event.reason,
            "edited": event.edited,
        }
    if isinstance(event, RunStopped):
        return {"status": event.result.status, "stop_reason": event.result.stop_reason}
    assert_never(event)


def _short(data: dict[str, Any]) -> dict[str, Any]:
    error = data.get("error")
    if isinstance(error, str) and len(error) > MAX_STORED_ERROR_CHARS:
        data["error"] = error[:MAX_STORED_ERROR_CHARS] + " [cut]"
    return data
