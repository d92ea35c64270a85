"""A worker process: DBOS delivers run ids from a queue, the worker executes them.

Start as many as needed, on as many machines, all pointing at one PostgreSQL::

    taskdecomp worker --db postgresql://... --tools sales=examples/sales_report/tools.py

Each worker also sweeps: every third of the lease it looks for runs of its queue that a
worker started and no longer holds (it died: its lease ran out) or that were never
delivered, and delivers them again. DBOS alone would only recover a dead worker's runs
when a worker with the same executor id starts again; the run lease closes that gap, and
makes a second delivery of the same run harmless (it finds the run taken).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from taskdecomp.run import RunId
from taskdecomp.scale import cancels, dispatch, engine, leftovers, ratelimit, wakeup
from taskdecomp.scale.dispatch import POLL_SECONDS, Dispatcher
from taskdecomp.scale.runs import Execution, execute

logger = logging.getLogger(__name__)

DRAIN_SECONDS = 60
"""How long a stopping worker waits for its runs in flight."""

T = TypeVar("T")

_current: Worker | None = None
"""The worker of this process, which the delivery workflow executes runs with."""
_registered = False


def _register() -> None:
    """Define the workflow that delivers a run (once per process, before DBOS launches).

    The workflow executes the run in its body, with no DBOS step: the run lease, not a
    recorded step, keeps a second execution of a delivery from doing anything, so a step
    would only add two round trips to the system database per run.
    """
    global _registered
    if _registered:
        return
    dbos = engine.dbos().DBOS

    @dbos.workflow(name=engine.WORKFLOW, max_recovery_attempts=1_000_000)  # type: ignore[untyped-decorator]
    def deliver(run_id: str) -> str:
        delivery = str(dbos.workflow_id)
        worker = _current
        try:
            if worker is None:
                raise RuntimeError("this process is not a taskdecomp worker")
            return worker.call(execute(RunId(run_id), worker.how, delivery=delivery))
        finally:
            if worker is not None:
                worker.dispatcher.done(delivery)

    _registered = True


class _MovedOnDeliveries(logging.Filter):
    """DBOS's traceback for a delivery the sweep cancelled, as the one line it means.

    A worker that stalls past its lease finds, when it wakes, that its run moved on: the
    run lease already refused its writes (and said so), and DBOS then reports the
    cancelled delivery as an error with a traceback. It is expected; say it in one line.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        cancelled = engine.dbos().error.DBOSAwaitedWorkflowCancelledError
        if isinstance(error, cancelled):
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg, record.args = "a delivery that moved on to another worker ended here", ()
            record.exc_info = record.exc_text = None
        return True


class Worker:
    """One worker process.

    Args:
        db: the PostgreSQL URL of the run store (DBOS keeps its queue tables there too).
        how: the store, registry and limits runs execute with.
        queue: the queue to take runs from.
        concurrency: runs this worker executes at once (whatever other workers say).
        global_concurrency: runs all workers of the queue execute at once; ``None`` leaves
            the queue's stored limit as it is (none unless a worker set one).
        poll_seconds: how often it looks at the queue when no submit woke it.
        executor_id: this process's name in DBOS (default: host and process id).
        log_level: how much DBOS logs.
    """

    def __init__(
        self,
        db: str,
        how: Execution,
        *,
        queue: str = engine.DEFAULT_QUEUE,
        concurrency: int = 8,
        global_concurrency: int | None = None,
        poll_seconds: float = POLL_SECONDS,
        executor_id: str | None = None,
        log_level: str = "WARNING",
    ) -> None:
        self.db, self.how, self.queue = db, how, queue
        self.log_level = log_level
        self.concurrency = concurrency
        self.global_concurrency = global_concurrency
        self.executor_id = executor_id
        self.dispatcher = Dispatcher(
            queue, concurrency, poll_seconds=poll_seconds, settled=self._slot_freed
        )
        self._stop = threading.Event()
        self._client: Any = None
        self._loop = asyncio.new_event_loop()
        self._calls: set[Future[Any]] = set()
        self._calls_lock = threading.Lock()
        self._closing = False

    def call(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` on this worker's event loop (from a DBOS thread) and return its result.

        Every run of the process shares one loop: no loop is made per run, and the runs'
        checkpoints meet in the store's writer thread.
        """
        future = asyncio.run_coroutine_threadsafe(work, self._loop)
        with self._calls_lock:
            self._calls.add(future)
        future.add_done_callback(self._call_ended)
        return future.result()

    def _call_ended(self, future: Future[Any]) -> None:
        with self._calls_lock:
            self._calls.discard(future)
            last = self._closing and not self._calls
        if last:
            self._loop.call_soon_threadsafe(self._loop.stop)

    def _close_loop(self) -> bool:
        """Stop the runs' loop once no call is under way; whether it is stopping now.

        A run that outlasts the drain keeps the loop: its DBOS thread waits in
        :meth:`call`, and Python waits for that thread at exit, so the process ends as the
        run does (as a run's own loop did), with the run finished, not cancelled.
        """
        with self._calls_lock:
            self._closing = True
            idle = not self._calls
        if idle:
            self._loop.call_soon_threadsafe(self._loop.stop)
        return idle

    def serve(self) -> None:
        """Take and execute runs until :meth:`stop` (or Ctrl-C)."""
        global _current
        module = engine.dbos()
        _current = self
        _register()
        looping = threading.Thread(target=self._loop.run_forever, name="runs", daemon=True)
        looping.start()
        settings = engine.config(self.db, executor_id=self.executor_id, log_level=self.log_level)
        module.DBOS(config=settings)
        logging.getLogger("dbos").addFilter(_MovedOnDeliveries())
        module.DBOS.listen_queues([])  # the dispatcher takes this queue's runs, not DBOS's poll
        module.DBOS.launch()
        listener = wakeup.Listener(engine.system_url(self.db), self.queue, self.dispatcher.wake)
        try:
            if self.how.limits:
                ratelimit.prepare(self.how.store)
            self._register_queue(module.DBOS)
            dispatch.require_internals(self.queue)
            self._client = engine.client(self.db)
            if not listener.start():
                logger.warning("not listening for submits yet: runs wait for a poll meanwhile")
            threads = [
                threading.Thread(target=self._sweep_forever, name="sweeper", daemon=True),
                threading.Thread(target=self.dispatcher.run, args=(self._stop,), name="dispatch"),
            ]
            for thread in threads:
                thread.start()
            self.dispatcher.wake()  # runs queued while no worker was there
            self._stop.wait()
            self.dispatcher.wake()
            threads[1].join()
        finally:
            listener.stop()
            if self._client is not None:
                self._client.destroy()
            # runs in flight finish first (a longer one is taken over once its lease ends)
            module.DBOS.destroy(workflow_completion_timeout_sec=DRAIN_SECONDS)
            if self._close_loop():
                looping.join(timeout=5)
            else:
                logger.warning("runs still under way after the drain: the worker ends with them")
            _current = None

    def _slot_freed(self) -> None:
        """Wake every worker of the queue: a delivery counted by its shared limit ended."""
        wakeup.notify(self.how.store, self.queue)

    def _register_queue(self, dbos: Any) -> None:
        """Make sure the queue exists; set its global limit when this worker was given one."""
        if self.global_concurrency is None:
            dbos.register_queue(self.queue, on_conflict="never_update")
        else:
            dbos.register_queue(
                self.queue, global_concurrency=self.global_concurrency, on_conflict="always_update"
            )

    def stop(self) -> None:
        """Make :meth:`serve` return."""
        self._stop.set()

    def _sweep_forever(self) -> None:
        period = max(0.2, self.how.lease_seconds / 3)
        while not self._stop.wait(period):
            try:
                self.sweep()
                self.cancel_leftovers()
            except Exception:  # the store or DBOS is away: try again next period
                logger.warning("sweeping queue %r failed", self.queue, exc_info=True)

    def cancel_leftovers(self) -> list[str]:
        """Cancel the deliveries DBOS counts as running that nothing will end; their ids.

        See :mod:`taskdecomp.scale.leftovers`: left ``PENDING``, they would hold slots of
        the queue's global limit forever.
        """
        dbos = engine.dbos().DBOS
        found = leftovers.find(self.how.store, self.queue, older_than=self.how.lease_seconds)
        for delivery in found:
            dbos.cancel_workflow(delivery)
        return found

    def sweep(self) -> list[str]:
        """Deliver again the runs that need it; return the new deliveries' ids.

        A run whose latest delivery DBOS says is ``CANCELLED`` was cancelled with DBOS
        (``dbos workflow cancel``): the sweep cancels a delivery only after it made another
        one the run's latest in its place (:func:`~taskdecomp.scale.wakeup.replace`), so it
        never leaves one of its own cancels as a run's latest. Such a run is cancelled as
        ``taskdecomp cancel`` does.

        A delivery is named by the run, its recoveries and the lease-long period it was
        made in, so sweeps of several workers that find the same run make the same one. A
        delivery taken and not yet started may be found again in the period it was made
        in: it is the one the sweep would make, so the sweep leaves it alone (cancelling
        the run's latest delivery would cancel the run). A later period's sweep replaces
        it, which is harmless if it was starting after all: a replaced delivery's cancel is
        not the user's, and the run's lease lets only one of the two execute the run.
        """
        dbos = engine.dbos().DBOS
        sent = []
        for stale in self.how.store.stale_runs(self.queue, grace=self.how.lease_seconds):
            state = None
            if stale.delivery is not None:
                status = dbos.get_workflow_status(stale.delivery)
                state = status.status if status is not None else None
                if state == "ENQUEUED":
                    continue  # waiting for a worker
            if state == "CANCELLED":
                if stale.delivery is None or not cancels.is_latest(
                    self.how.store, stale.run_id, stale.delivery
                ):
                    continue  # another sweep replaced that delivery, then cancelled it
                self.how.store.request_cancel(stale.run_id)  # the next delivery ends it
            bucket = int(time.time() // max(1.0, self.how.lease_seconds))
            delivery = f"{stale.run_id}:r{stale.recoveries + 1}:{bucket}"
            if delivery == stale.delivery and state is not None:
                continue  # made this period: taken (and maybe starting), or cancelled above
            # replaced first, then enqueued: a sweep that loses the race enqueues nothing
            # (an extra delivery would hold a slot and run nothing); one that dies between
            # leaves a latest delivery DBOS lacks, which the next sweep replaces
            if not wakeup.replace(
                self.how.store,
                stale.run_id,
                queue=self.queue,
                old=stale.delivery,
                new=delivery,
                wake=False,
            ):
                continue  # another sweep moved the run on first; that sweep cancels the old one
            engine.enqueue(self._client, stale.run_id, queue=self.queue, delivery=delivery)
            wakeup.notify(self.how.store, self.queue)
            if state == "PENDING":  # taken a lease ago and still not held: its worker died
                dbos.cancel_workflow(stale.delivery)
            sent.append(delivery)
        return sent
