"""The store interface and the records it reads and writes.

A store keeps runs durably: the run itself (goal, settings, status, stop reason, usage), its
plan, one row per finished step (the history), one row per attempt at a step (the trace, and
the intent committed before an ``unsafe`` call) and the run's events. Every write is one
transaction. :class:`~taskdecomp.store.sql.SqlStore` implements it for SQLite and PostgreSQL.

A run in flight is owned by one process at a time through a :class:`Lease` (owner, epoch,
expiry, on the store's clock). Every write given a lease is *fenced*: it first checks, in
its own transaction, that the run is still at that epoch and owner, and raises
:class:`~taskdecomp.errors.LeaseLostError` with nothing written otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, overload

from taskdecomp import stops
from taskdecomp.budget import Usage
from taskdecomp.durability import DEFAULT_LEASE_SECONDS as DEFAULT_LEASE_SECONDS
from taskdecomp.plan import Plan, TaskId
from taskdecomp.run import HistoryEntry, RunId, RunResult, TraceEntry
from taskdecomp.stops import LlmPhase, StopReason
from taskdecomp.tools import SideEffects

RunState = Literal["queued", "running", "ok", "stopped", "paused"]
"""``running`` until the run ends (or while it is crashed), then the result's status;
``paused`` while it waits for a human."""

AttemptState = Literal["started", "ok", "failed", "cancelled"]
"""``started``: the intent is committed and no outcome is known yet."""

RESUMABLE_STOPS = frozenset({stops.MAX_SECONDS, stops.CANCELLED})
"""Stop reasons a run may be resumed from; any other stop is final."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Lease:
    """One process's ownership of a run; only the holder of the current epoch may write it."""

    run_id: RunId
    owner: str
    """Who holds it: host name, process id and a random suffix."""
    epoch: int
    """Grows by one at every acquisition; a fenced write with an older one is refused."""
    ttl: float
    """Seconds each renewal extends the lease by."""
    expires_at: float
    """Store-clock time after which another process may take the run over."""


@dataclass(frozen=True, kw_only=True, slots=True)
class EventRecord:
    """One event of a run, as stored."""

    kind: str
    """The event's type name, e.g. ``StepFinished``."""
    at: float
    """Wall-clock time, seconds since the epoch."""
    data: Mapping[str, Any]
    """The event's JSON fields."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NewRun:
    """What is stored when a run starts."""

    run_id: RunId
    goal: str
    model: str | None
    """The planner's model string, so a resume can default to it."""
    tools: str | None
    """The toolset path or module, when the run was given one."""
    config: Mapping[str, Any]
    """JSON settings of the run: ``budget``, ``allow``, ``combiner_model``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AttemptStart:
    """The intent to call a step's tool, committed before an ``unsafe`` call."""

    step_no: int
    step_id: TaskId
    segment: int
    """1 for the first execution of the run, 2 for its first resume, and so on."""
    side_effects: SideEffects
    idempotency_key: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Checkpoint:
    """How one attempt at a step ended; written in one transaction."""

    attempt: AttemptStart
    attempt_id: int | None
    """The committed intent's row, or ``None`` when no intent was written."""
    state: AttemptState
    trace: TraceEntry
    history: HistoryEntry | None = None
    """The finished step, when the attempt succeeded."""
    observation_json: str | None = None
    """The history's observation as stored, when it was encoded already (checked before)."""
    usage: Usage
    """What the run has spent so far."""
    events: Sequence[EventRecord] = ()
    strategy_state: Mapping[str, Any] | None = None
    """The strategy's state to store with this checkpoint (an agent's turns), if any."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSummary:
    """One line of the run list."""

    run_id: RunId
    goal: str
    status: RunState
    stop_reason: StopReason | None
    started_at: float
    finished_at: float | None

    @property
    def seconds(self) -> float | None:
        """Wall time from start to finish, when finished."""
        return None if self.finished_at is None else self.finished_at - self.started_at


@dataclass(frozen=True, kw_only=True, slots=True)
class AttemptRecord:
    """One stored attempt at a step."""

    id: int
    start: AttemptStart
    state: AttemptState
    trace: TraceEntry | None
    """``None`` until the attempt ended."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredRun:
    """Everything stored about one run."""

    summary: RunSummary
    model: str | None
    tools: str | None
    config: Mapping[str, Any]
    segments: int
    """How many times the run was started (1 + resumes)."""
    usage: Usage
    plan: Plan | None
    history: tuple[HistoryEntry, ...]
    """Finished steps, by step number."""
    attempts: tuple[AttemptRecord, ...]
    """Every attempt, in the order they started."""
    answer: str | None = None
    output: Any = None
    """The typed answer's JSON value, for a run with an answer type."""
    raw_plan: Any = None
    llm_phase: LlmPhase | None = None
    message: str | None = None
    state: Mapping[str, Any] = field(default_factory=dict)
    """The strategy's own checkpointed state (``{"replan": {...}}``)."""
    approvals: Mapping[str, Any] = field(default_factory=dict)
    """``approved`` digests and the ``pending`` request, when the run had approvals."""
    lease: Lease | None = None
    """Who holds the run now (a run in flight, or one whose owner died), if anyone."""

    @property
    def run_id(self) -> RunId:
        """The run's id."""
        return self.summary.run_id

    @property
    def trace(self) -> tuple[TraceEntry, ...]:
        """The trace entries of every ended attempt, in order."""
        return tuple(a.trace for a in self.attempts if a.trace is not None)

    @property
    def resumable(self) -> bool:
        """Whether resume has work to do: the run crashed, or stopped on a deadline."""
        status, reason = self.summary.status, self.summary.stop_reason
        if status in ("running", "queued"):
            return True
        return status == "stopped" and reason in RESUMABLE_STOPS

    def finished_steps(self) -> frozenset[TaskId]:
        """Ids of the steps whose result is stored."""
        return frozenset(entry.plan_step.id for entry in self.history)

    def in_doubt(self) -> TaskId | None:
        """The first step with an ``unsafe`` call that started and left no outcome.

        A call that ended (``ok`` or ``failed``) has its outcome stored: a tool step's
        result, or an executor agent's turn in the strategy state, written in the same
        transaction.
        """
        done = self.finished_steps()
        for attempt in self.attempts:
            start = attempt.start
            if start.side_effects != "unsafe" or start.step_id in done:
                continue
            if attempt.state in ("started", "cancelled"):
                return start.step_id
        return None

    def result(self) -> RunResult:
        """The stored run as a result.

        Raises:
            ValueError: the run has not ended (it is running, or it crashed).
        """
        if self.summary.stop_reason is None:
            raise ValueError(f"run {self.run_id!r} has not ended; resume it first")
        return self._result(self.summary.stop_reason)

    def _result(self, reason: StopReason) -> RunResult:
        status = self.summary.status
        return RunResult(
            run_id=self.run_id,
            status=status if status in ("ok", "paused") else "stopped",
            stop_reason=reason,
            answer=self.answer,
            output=self.output,
            plan=self.plan,
            raw_plan=self.raw_plan,
            llm_phase=self.llm_phase,
            message=self.message,
            trace=self.trace,
            history=self.history,
            usage=self.usage,
            approval=self.pending_approval(),
        )

    def pending_approval(self) -> dict[str, Any] | None:
        """What waits for a human, while the run is paused."""
        pending = self.approvals.get("pending")
        return dict(pending) if self.summary.status == "paused" and pending else None

    def ended(self, reason: StopReason, message: str | None) -> RunResult:
        """This run as a result that ended with ``reason`` now (a rejection)."""
        return replace(self._result(reason), status="stopped", message=message, approval=None)

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the result JSON with the stored status, plus what the store knows."""
        summary = self.summary
        data = self._result(summary.stop_reason or StopReason("")).to_dict()
        data.update(
            status=summary.status,
            stop_reason=summary.stop_reason,
            goal=summary.goal,
            model=self.model,
            tools=self.tools,
            config=dict(self.config),
            segments=self.segments,
            started_at=summary.started_at,
            finished_at=summary.finished_at,
            state=dict(self.state),
            lease=None
            if self.lease is None
            else {
                "owner": self.lease.owner,
                "epoch": self.lease.epoch,
                "expires_at": self.lease.expires_at,
            },
        )
        return data


class Store(Protocol):
    """Durable storage for runs. Every method is one transaction, unless made in a batch.

    The writes a run makes while in flight take its ``lease`` and are fenced by it (see the
    module docstring); ``lease=None`` writes unfenced, for tools and tests.
    """

    @overload
    def create_run(self, run: NewRun) -> None: ...

    @overload
    def create_run(self, run: NewRun, *, owner: str, ttl: float) -> Lease: ...

    def create_run(
        self, run: NewRun, *, owner: str | None = None, ttl: float = DEFAULT_LEASE_SECONDS
    ) -> Lease | None:
        """Store a new run in the ``running`` state; with ``owner``, leased to it (epoch 1).

        Raises:
            StoreError: the id is taken, or the store cannot be written.
        """
        ...

    def acquire_lease(self, run_id: RunId, *, owner: str, ttl: float) -> Lease:
        """Take the run's lease, at the next epoch, if nobody holds it or it has expired.

        Raises:
            RunNotFoundError: no run has this id.
            RunLeasedError: another owner holds an unexpired lease.
        """
        ...

    def renew_lease(self, lease: Lease) -> Lease:
        """Extend ``lease`` by its ``ttl`` from now; return it with the new expiry.

        Raises:
            LeaseLostError: the run has another owner or a newer epoch.
        """
        ...

    def release_lease(self, lease: Lease) -> None:
        """Give the run up, if ``lease`` still holds it (the epoch is kept)."""
        ...

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
            StoreError: the run is not at segment ``segment - 1`` (resumed elsewhere).
            LeaseLostError: ``lease`` no longer holds the run.
        """
        ...

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
        ...

    def record_intent(
        self, run_id: RunId, attempt: AttemptStart, *, lease: Lease | None = None
    ) -> int:
        """Commit the intent to call a step's tool; return the attempt's id.

        Raises:
            LeaseLostError: ``lease`` no longer holds the run; the tool must not be called.
        """
        ...

    def checkpoint(
        self, run_id: RunId, checkpoint: Checkpoint, *, lease: Lease | None = None
    ) -> None:
        """Store how an attempt ended, with its trace, history entry, usage and events.

        Raises:
            LeaseLostError: ``lease`` no longer holds the run.
        """
        ...

    def checkpoints(
        self, run_id: RunId, checkpoints: Sequence[Checkpoint], *, lease: Lease | None = None
    ) -> None:
        """Store several checkpoints of one run, in order, in one transaction.

        Raises:
            LeaseLostError: ``lease`` no longer holds the run.
        """
        ...

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
        ...

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
        ...

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
        ...

    def load_run(self, run_id: RunId) -> StoredRun:
        """Everything stored about a run.

        Raises:
            RunNotFoundError: no run has this id.
            CorruptRecordError: a row does not decode.
        """
        ...

    def list_runs(self, *, limit: int | None = None) -> list[RunSummary]:
        """Stored runs, newest first, at most ``limit`` of them."""
        ...

    def load_events(self, run_id: RunId) -> list[EventRecord]:
        """A run's stored events, in order."""
        ...

    def batch(self, *, durable: bool = True) -> AbstractContextManager[None]:
        """Make the writes this thread makes inside it one transaction (see ``SqlStore``)."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...
