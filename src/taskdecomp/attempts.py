"""One attempt at a step, as the journal records it: its intent, its checkpoint, its end.

:meth:`Journal.begin <taskdecomp.durable.Journal.begin>` returns an :class:`Attempt`; the
scheduler ends it with exactly one of :meth:`~Attempt.succeeded` (the checkpoint),
:meth:`~Attempt.failed` or :meth:`~Attempt.cancelled`. An ``unsafe`` attempt's end is on
disk before the run goes on; the others join the journal's next group commit.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from taskdecomp.errors import StoreError, StoreValueError
from taskdecomp.eventrecords import MAX_STORED_ERROR_CHARS
from taskdecomp.run import HistoryEntry, RunId, TraceEntry
from taskdecomp.stops import StopRun, with_detail
from taskdecomp.store.base import AttemptStart, AttemptState, Checkpoint, Lease, Store
from taskdecomp.store.codec import encode_json
from taskdecomp.writer import Joinable

if TYPE_CHECKING:
    from taskdecomp.durable import Journal

logger = logging.getLogger(__name__)


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
        what = f"the observation of step {self._start.step_id!r}"
        try:
            text = encode_json(self._journal.redactor.value(observation), what=what)
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
        if strategy_state is not None:  # the agent's turn lists grow after this returns
            strategy_state = frozen(strategy_state)
        entry, history, strategy_state = journal.redactor.value((entry, history, strategy_state))
        if entry.error is not None and len(entry.error) > MAX_STORED_ERROR_CHARS:
            entry = replace(entry, error=entry.error[:MAX_STORED_ERROR_CHARS] + " [cut]")
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
        return CheckpointWrite(
            store=journal.store, run_id=journal.run_id, lease=journal.lease, checkpoint=checkpoint
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointWrite:
    """One checkpoint, which a group commit may join with the run's next ones."""

    store: Store
    run_id: RunId
    lease: Lease
    checkpoint: Checkpoint

    @property
    def join_key(self) -> tuple[int, RunId, str, int]:
        """Writes with one key (the same store, run and lease) may share a statement."""
        return (id(self.store), self.run_id, self.lease.owner, self.lease.epoch)

    def __call__(self) -> None:
        """Make the write alone."""
        self.store.checkpoint(self.run_id, self.checkpoint, lease=self.lease)

    def join(self, writes: Sequence[Joinable]) -> None:
        """Make this write and ``writes`` (same key) in one call."""
        checkpoints = [w.checkpoint for w in writes if isinstance(w, CheckpointWrite)]
        self.store.checkpoints(self.run_id, checkpoints, lease=self.lease)


def frozen(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """A copy of ``data`` as it is now, for a write made later on another thread."""
    return json.loads(encode_json(dict(data), what="the run's state"))  # type: ignore[no-any-return]
