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
from typing import Any

from taskdecomp.run import RunId
from taskdecomp.scale import engine
from taskdecomp.scale.runs import Execution, execute

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.25
"""How often a worker looks for queued runs (DBOS's default, 1 s, makes every run wait half
a second on average)."""
DRAIN_SECONDS = 60
"""How long a stopping worker waits for its runs in flight."""

_current: Execution | None = None
"""What the DBOS step executes with, in this process."""
_registered = False


def _register() -> None:
    """Define the workflow that delivers a run (once per process, before DBOS launches)."""
    global _registered
    if _registered:
        return
    dbos = engine.dbos().DBOS

    @dbos.step(name="taskdecomp.execute")  # type: ignore[untyped-decorator]
    def execute_step(run_id: str) -> str:
        if _current is None:
            raise RuntimeError("this process is not a taskdecomp worker")
        return asyncio.run(execute(RunId(run_id), _current))

    @dbos.workflow(name=engine.WORKFLOW, max_recovery_attempts=1_000_000)  # type: ignore[untyped-decorator]
    def deliver(run_id: str) -> str:
        return str(execute_step(run_id))

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
        concurrency: runs executed at once by each worker of the queue.
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
        executor_id: str | None = None,
        log_level: str = "WARNING",
    ) -> None:
        self.db, self.how, self.queue = db, how, queue
        self.log_level = log_level
        self.concurrency = concurrency
        self.executor_id = executor_id
        self._stop = threading.Event()
        self._client: Any = None

    def serve(self) -> None:
        """Take and execute runs until :meth:`stop` (or Ctrl-C)."""
        global _current
        module = engine.dbos()
        _current = self.how
        _register()
        settings = engine.config(self.db, executor_id=self.executor_id, log_level=self.log_level)
        module.DBOS(config=settings)
        logging.getLogger("dbos").addFilter(_MovedOnDeliveries())
        module.DBOS.listen_queues([self.queue])
        module.DBOS.launch()
        try:
            module.DBOS.register_queue(
                self.queue,
                worker_concurrency=self.concurrency,
                polling_interval_sec=POLL_SECONDS,
                on_conflict="always_update",
            )
            self._client = engine.client(self.db)
            sweeper = threading.Thread(target=self._sweep_forever, name="sweeper", daemon=True)
            sweeper.start()
            self._stop.wait()
        finally:
            if self._client is not None:
                self._client.destroy()
            # runs in flight finish first (a longer one is taken over once its lease ends)
            module.DBOS.destroy(workflow_completion_timeout_sec=DRAIN_SECONDS)
            _current = None

    def stop(self) -> None:
        """Make :meth:`serve` return."""
        self._stop.set()

    def _sweep_forever(self) -> None:
        period = max(0.2, self.how.lease_seconds / 3)
        while not self._stop.wait(period):
            try:
                self.sweep()
            except Exception:  # the store or DBOS is away: try again next period
                logger.warning("sweeping queue %r failed", self.queue, exc_info=True)

    def sweep(self) -> list[str]:
        """Deliver again the runs that need it; return the new deliveries' ids."""
        dbos = engine.dbos().DBOS
        sent = []
        for stale in self.how.store.stale_runs(self.queue, grace=self.how.lease_seconds):
            if stale.delivery is not None:
                status = dbos.get_workflow_status(stale.delivery)
                state = status.status if status is not None else None
                if state == "ENQUEUED":
                    continue  # waiting for a worker
                if state == "PENDING":  # taken a lease ago and still not held: its worker died
                    dbos.cancel_workflow(stale.delivery)
            bucket = int(time.time() // max(1.0, self.how.lease_seconds))
            delivery = f"{stale.run_id}:r{stale.recoveries + 1}:{bucket}"
            engine.enqueue(self._client, stale.run_id, queue=self.queue, delivery=delivery)
            self.how.store.note_delivery(stale.run_id, delivery)
            sent.append(delivery)
        return sent
