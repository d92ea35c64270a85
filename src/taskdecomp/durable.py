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

Writes are synchronous and short (about a millisecond a checkpoint on SQLite, see
``bench/store.py``): a write cannot be torn by the cancellation of the task that makes it,
and writes happen in the order the engine made them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TypeVar, assert_never

from pydantic import BaseModel, ConfigDict, ValidationError

from taskdecomp import stops
from taskdecomp.budget import Budget, Usage
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

logger = logging.getLogger(__name__)

MAX_STORED_ERROR_CHARS = 100_000
"""A stored error message longer than this is cut (the run's own result keeps it whole)."""

MIN_LEASE_SECONDS = 0.1
"""The shortest lease a run may take (it is renewed every third of its length)."""

_T = TypeVar("_T")


def new_owner_id() -> str:
    """A lease owner id: host name, process id and a random suffix, e.g. ``box:4242:9f3a1c``."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


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
    """

    def __init__(
        self,
        store: Store,
        lease: Lease,
        *,
        segment: int,
        usage: Callable[[], Usage],
        now: Callable[[], float] = time.time,
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
        self._events: list[EventRecord] = []
        self._ended = False

    def __call__(self, event: Event) -> None:
        """Keep ``event`` for the next write (the journal is an event subscriber)."""
        if isinstance(event, ModelProgress):  # live only: a display's, not the record's
            return
        self._events.append(
            EventRecord(kind=type(event).__name__, at=self._now(), data=_event_data(event))
        )

    def drain(self) -> list[EventRecord]:
        """The events kept since the last write; the journal forgets them."""
        events, self._events = self._events, []
        return events

    def check(self) -> None:
        """Stop the run if its lease is known to be lost.

        Raises:
            StopRun: ``lease_lost``, naming the run's new owner.
        """
        if self.lost is not None:
            raise StopRun(stops.LEASE_LOST, message=str(self.lost))

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
        self.fenced(
            lambda: self.store.save_plan(self.run_id, plan, events=self.drain(), lease=self.lease)
        )

    def begin(self, step_no: int, step: Step, *, side_effects: SideEffects, key: str) -> Attempt:
        """Start an attempt at ``step``; for an ``unsafe`` tool, commit the intent first.

        The intent is the fence before an ``unsafe`` call: when it cannot be written, the
        tool is not called.

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
            attempt_id = self.fenced(
                lambda: self.store.record_intent(self.run_id, start, lease=self.lease)
            )
        return Attempt(self, start, attempt_id)

    def step_done(self, entry: HistoryEntry) -> None:
        """Checkpoint a step that finished without a call of its own (an instruction step).

        Raises:
            StopRun: ``lease_lost``: another process owns the run; nothing was written.
        """
        self.fenced(
            lambda: self.store.save_step(
                self.run_id, entry, usage=self.usage(), events=self.drain(), lease=self.lease
            )
        )

    def state_saved(
        self, plan: Plan, state: Mapping[str, Any], *, approvals: Mapping[str, Any]
    ) -> None:
        """Checkpoint the strategy's state, the run's current plan and its approvals.

        Raises:
            StopRun: ``lease_lost``: another process owns the run; nothing was written.
        """
        self.fenced(
            lambda: self.store.save_state(
                self.run_id,
                plan,
                state,
                approvals=approvals,
                usage=self.usage(),
                events=self.drain(),
                lease=self.lease,
            )
        )

    def finished(
        self, result: RunResult, *, approvals: Mapping[str, Any] | None = None
    ) -> RunResult:
        """Store how the run ended, which ends the lease; return the result to hand back.

        ``approvals`` are stored with it when the run had any. The result is ``result``
        itself, unless another process owns the run: then nothing is stored and the result
        is a ``lease_lost`` stop naming the new owner.
        """
        if self.lost is None:
            try:
                self.store.finish_run(
                    self.run_id,
                    result,
                    events=self.drain(),
                    lease=self.lease,
                    approvals=approvals,
                )
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
        """Give the lease up, unless the run finished or another process owns it."""
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

    def check(self, tool: str, observation: Any) -> None:
        """Refuse an observation the store cannot keep, before anything is recorded.

        Raises:
            StopRun: ``tool_error:<tool>`` saying why the value cannot be stored.
        """
        try:
            encode_json(observation, what=f"the observation of step {self._start.step_id!r}")
        except StoreValueError as exc:
            raise StopRun(with_detail("tool_error", tool), message=str(exc)) from exc

    def succeeded(
        self,
        entry: TraceEntry,
        history: HistoryEntry | None,
        *,
        state: Mapping[str, Any] | None = None,
    ) -> None:
        """The checkpoint, in one transaction.

        The call's trace, the step's result (when the call ended the step), usage, events,
        and the strategy's state when given (an executor agent's turn).

        Raises:
            StopRun: ``lease_lost``: another process owns the run; nothing was written.
        """
        self._write("ok", entry, history, state)

    def failed(self, entry: TraceEntry) -> None:
        """The tool failed or the gateway refused it; the outcome is known.

        Raises:
            StopRun: ``lease_lost``: another process owns the run; nothing was written.
        """
        self._write("failed", entry, None)

    def cancelled(self, entry: TraceEntry) -> None:
        """The attempt was cancelled before it ended; an ``unsafe`` outcome stays unknown.

        A failed write is logged, not raised, so the cancellation goes on; the attempt then
        reads as a crash, which resume treats the same way. Without the lease nothing is
        written.
        """
        try:
            self._write("cancelled", entry, None)
        except StopRun:
            pass  # the lease is lost: the run's new owner decides about this attempt
        except StoreError:
            logger.exception("could not record the cancelled attempt at %r", self._start.step_id)

    def _write(
        self,
        state: AttemptState,
        entry: TraceEntry,
        history: HistoryEntry | None,
        strategy_state: Mapping[str, Any] | None = None,
    ) -> None:
        journal = self._journal
        if entry.error is not None and len(entry.error) > MAX_STORED_ERROR_CHARS:
            entry = replace(entry, error=entry.error[:MAX_STORED_ERROR_CHARS] + " [cut]")
        checkpoint = Checkpoint(
            attempt=self._start,
            attempt_id=self._attempt_id,
            state=state,
            trace=entry,
            history=history,
            usage=journal.usage(),
            events=journal.drain(),
            strategy_state=strategy_state,
        )
        journal.fenced(
            lambda: journal.store.checkpoint(journal.run_id, checkpoint, lease=journal.lease)
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredConfig:
    """The settings a run was stored with; a resume defaults to them."""

    budget: Budget
    allow: tuple[str, ...]
    """The tools the run allowed."""
    combiner_model: str | None
    strategy: str = "plan_execute"
    """The strategy the run uses."""
    replan: Mapping[str, Any] | None = None
    """The ``replan`` strategy's options."""


class _ConfigModel(BaseModel):
    model_config = ConfigDict(extra="ignore")
    budget: dict[str, Any]
    allow: list[str]
    combiner_model: str | None = None
    strategy: str = "plan_execute"
    replan: dict[str, Any] | None = None


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
    replan: Mapping[str, Any] | None = None,
) -> NewRun:
    """What to store when a run starts: enough for a resume to rebuild it."""
    config: dict[str, Any] = {
        "budget": asdict(budget),
        "allow": sorted(allow),
        "combiner_model": model_name(combiner_model),
        "strategy": strategy,
    }
    if replan is not None:
        config["replan"] = dict(replan)
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
        replan=raw.replan,
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
