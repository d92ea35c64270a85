"""Runs the service stores before it executes them, and how it starts them later.

A new run is stored as ``queued`` in the server's own queue (:data:`LOCAL_QUEUE`: a
``runs`` row with no lease and a ``queued_runs`` row, as a run submitted to the workers'
queue is), so it is on disk from its first moment. When it has a slot, :func:`execute`
takes its lease and notes when it started in one transaction, then continues it with the
engine's :func:`~taskdecomp.engine.continue_run`, as a resume does: its deadline counts
from there. A run the server never started (it was stopped first) stays ``queued``: a
restarted server starts it again, and ``taskdecomp resume`` continues it from anywhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from taskdecomp import durable, owners, runconfig, stops
from taskdecomp.budget import Budget, Usage
from taskdecomp.engine import Environment, continue_run
from taskdecomp.events import Subscriber
from taskdecomp.models import Model
from taskdecomp.run import RunId, RunResult
from taskdecomp.server.admission import Waiting
from taskdecomp.store import RunSummary, SqlStore, StoredRun
from taskdecomp.store.base import NewRun
from taskdecomp.strategies import registry
from taskdecomp.tools import Toolset

LOCAL_QUEUE = "serve:process"
"""The queue name of runs waiting in a server's own process (not on the workers' queue)."""

MAX_RECOVERIES = 3
"""Times a run's process may die running it before it is parked as ``poisoned``."""

QUIET_TURNS = 2
"""Turns of the event loop without a new run that close a group of runs to store: a
request read in one turn reaches :meth:`Submitter.submit` in the next."""

GATHER_SECONDS = 0.05
"""Most seconds the first of a group of runs to store waits for more to join it."""


def new_run(
    run_id: RunId,
    goal: str,
    *,
    toolset: Toolset,
    model: str,
    allow: Iterable[str] | None,
    budget: Budget,
    strategy: str,
    options: Any,
    answer_schema: dict[str, Any] | None = None,
) -> NewRun:
    """What to store of a run that waits for a slot: what :func:`taskdecomp.run` stores."""
    chosen = registry.strategy(strategy)
    settings = registry.options_for(chosen, options)
    return runconfig.new_run(
        run_id,
        goal,
        tools=toolset,
        model=model,
        allow=toolset.keys() if allow is None else allow,
        budget=budget,
        strategy=chosen.name,
        options=chosen.encode(settings),
        answer_schema=answer_schema,
    )


class Submitter:
    """Stores new runs as queued, in groups that share one transaction.

    Every run posted while the group before was being written goes in the next group: a
    burst of ``POST /runs`` would otherwise wait for the disk once per run, one after the
    other. The first group waits for the requests the loop is still reading (see
    :meth:`_gather`); a group goes in with two statements (:meth:`SqlStore.submit_runs`).
    Each run is reported to ``settled`` on the event loop, stored or not, whether or not
    the request that posted it still waits.

    Args:
        store: the run store.
        settled: called with each run's waiting entry and whether it is on disk.
    """

    def __init__(self, store: SqlStore, settled: Callable[[Waiting, bool], None]) -> None:
        self.store = store
        self.settled = settled
        self._pending: list[tuple[NewRun, Waiting, asyncio.Future[float]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def submit(self, run: NewRun, waiting: Waiting) -> float:
        """Store ``run`` as queued; return when it was queued, once it is on disk.

        Raises:
            StoreError: the store cannot be written.
        """
        done = asyncio.get_running_loop().create_future()
        self._pending.append((run, waiting, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_groups(), name="store queued runs")
        return await asyncio.shield(done)

    async def _write_groups(self) -> None:
        await self._gather()  # later groups gather while the one before is written
        while self._pending:
            group, self._pending = self._pending, []
            runs = [run for run, _waiting, _done in group]
            outcomes: list[float | BaseException]
            try:
                outcomes = list(await asyncio.to_thread(self._write, runs))
            except Exception:  # one bad run must not fail the others: write each alone
                outcomes = list(await asyncio.gather(*(self._alone(run) for run in runs)))
            for (_run, _waiting, done), outcome in zip(group, outcomes, strict=True):
                if isinstance(outcome, float):
                    done.set_result(outcome)
                else:
                    done.set_exception(outcome)
                    done.exception()  # retrieved: the request that posted it may be gone
            for (_run, waiting, _done), outcome in zip(group, outcomes, strict=True):
                self.settled(waiting, isinstance(outcome, float))

    async def _gather(self) -> None:
        """Let the runs of a burst's other requests join the first group while they come.

        The group closes after :data:`QUIET_TURNS` turns of the event loop that bring no
        new run, or :data:`GATHER_SECONDS` after it opened: no time at all for a lone
        request, while a burst's runs share one commit instead of its first run waiting
        for the disk alone and all the others waiting for it, then for their own.
        """
        loop = asyncio.get_running_loop()
        closes = loop.time() + GATHER_SECONDS
        quiet = 0
        while quiet < QUIET_TURNS and loop.time() < closes:
            seen = len(self._pending)
            await asyncio.sleep(0)  # one turn: the requests read meanwhile reach submit()
            quiet = quiet + 1 if len(self._pending) == seen else 0

    def _write(self, runs: list[NewRun]) -> list[float]:
        """Store ``runs`` in one transaction; return when each was queued.

        The times are a microsecond apart, so that the queue's order outlives the process.
        """
        now = self.store.now()
        times = [now + n * 1e-6 for n in range(len(runs))]
        if len(runs) == 1:
            self.store.submit_run(runs[0], queue=LOCAL_QUEUE, now=times[0])
        else:
            self.store.submit_runs(list(zip(runs, times, strict=True)), queue=LOCAL_QUEUE)
        return times

    async def _alone(self, run: NewRun) -> float | BaseException:
        try:
            return (await asyncio.to_thread(self._write, [run]))[0]
        except Exception as exc:
            return exc


def as_stored(run: NewRun, queued_at: float) -> StoredRun:
    """``run`` as the store has it from ``queued_at`` until it starts."""
    summary = RunSummary(
        run_id=run.run_id,
        goal=run.goal,
        status="queued",
        stop_reason=None,
        started_at=queued_at,
        finished_at=None,
    )
    return StoredRun(
        summary=summary,
        model=run.model,
        tools=run.tools,
        config=run.config,
        segments=0,
        usage=Usage(),
        plan=None,
        history=(),
        attempts=(),
    )


async def execute(
    run_id: RunId,
    *,
    store: SqlStore,
    tools: Toolset,
    model: Model,
    on_event: Subscriber,
    env: Environment,
) -> RunResult:
    """Start queued run ``run_id`` now: its result, or the stored one if it had ended.

    Nothing between taking the lease and the run's first event waits, so a cancel either
    finds the run still ``queued`` (the task never began) or stores it ``cancelled``.

    Raises:
        RunLeasedError: another process took the run first (``taskdecomp resume``).
    """
    with store.batch(durable=False):  # the run's first checkpoint makes it durable
        admission = store.admit_run(
            run_id,
            owner=owners.new_owner_id(),
            ttl=durable.lease_seconds(env.lease_seconds),
            max_recoveries=MAX_RECOVERIES,
            reopen=True,  # taken, reopened and read in one transaction
        )
    lease, taken = admission.lease, admission.run
    if lease is None or taken is None:  # it ended meanwhile
        return store.load_run(run_id).result()
    if admission.start in ("cancelled", "poisoned"):
        reason, message = (stops.CANCELLED, "cancelled before it started")
        if admission.start == "poisoned":
            reason, message = (stops.POISONED, f"its process died {admission.recoveries} times")
        from taskdecomp.scale.runs import end

        await end(store, lease, reason, message, stored=taken)
        return store.load_run(run_id).result()
    return await continue_run(
        run_id, prepare=_as_is, tools=tools, model=model, on_event=on_event, lease=lease,
        taken=taken, env=env,
    )  # fmt: skip


async def refuse(
    run_id: RunId, *, store: SqlStore, env: Environment, reason: stops.StopReason, message: str
) -> RunResult:
    """End queued run ``run_id`` with ``reason`` without running anything of it."""
    with store.batch(durable=False):
        admission = store.admit_run(
            run_id,
            owner=owners.new_owner_id(),
            ttl=durable.lease_seconds(env.lease_seconds),
            max_recoveries=MAX_RECOVERIES,
        )
    if admission.lease is not None:
        from taskdecomp.scale.runs import end

        await end(store, admission.lease, reason, message)
    return store.load_run(run_id).result()


def _as_is(stored: StoredRun) -> StoredRun:
    return stored
