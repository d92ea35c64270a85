"""Taking deliveries off a DBOS queue: at once when woken, in batches sized to free slots.

DBOS's own queue thread looks at a queue once per polling interval, and reads the queue's
``worker_concurrency`` from the queue's row, which every worker of the queue shares (the
last worker to register it sets it for all). A worker therefore does not let DBOS poll its
queue (``DBOS.listen_queues([])``); its :class:`Dispatcher` claims deliveries itself:

- when woken: by a submit's notification (:mod:`taskdecomp.scale.wakeup`), or by a run of
  its own ending while the queue may hold more;
- otherwise every ``poll_seconds``, the fallback for a lost notification;
- as many as the worker has free slots, in one claim: DBOS's own statement
  (``SystemDatabase.start_queued_workflows``, ``FOR UPDATE SKIP LOCKED``), given this
  worker's own limit instead of the shared one, and the queue's global limit and rate
  limit as DBOS stores them;
- and it starts each claimed workflow as DBOS's queue thread does
  (``execute_dequeued_workflow``), so DBOS records, recovers and cancels them as usual.

These are DBOS internals (``dbos._sys_db``, ``dbos._core``), pinned by the ``dbos``
version in the project's dependencies (``>=3.4,<3.5``); this module is the only place that
touches them, and :func:`require_internals` checks them as a worker starts, so another
DBOS version fails in one line instead of never claiming or ignoring ``--concurrency``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy.exc import DBAPIError

from taskdecomp.errors import ConfigError

logger = logging.getLogger(__name__)

POLL_SECONDS = 1.0
"""How often a worker looks at its queue when nothing woke it."""
QUEUE_REFRESH_SECONDS = 5.0
"""How often the queue's stored limits (global concurrency, rate limit) are read again."""
GATHER_SECONDS = 0.005
"""How long a woken worker waits before it claims, so that a burst of submits (a script
queueing hundreds of runs) is claimed in a few batches instead of one claim a run."""
CONFLICT_RETRIES = 20
"""Claims tried again at once when another worker holds the queue's rows (global limits)."""


class Slots:
    """The deliveries a worker is executing, against its own limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: set[str] = set()
        self._lock = threading.Lock()
        self.most = 0
        """The most deliveries held at once so far."""

    def free(self) -> int:
        """Slots not taken."""
        with self._lock:
            return max(0, self.limit - len(self._held))

    def busy(self) -> int:
        """Slots taken."""
        with self._lock:
            return len(self._held)

    def take(self, ids: Iterable[str]) -> None:
        """Count ``ids`` as executing here."""
        with self._lock:
            self._held.update(ids)
            self.most = max(self.most, len(self._held))

    def give_back(self, delivery: str) -> bool:
        """Free ``delivery``'s slot; whether it held one."""
        with self._lock:
            if delivery not in self._held:
                return False
            self._held.discard(delivery)
            return True


class Dispatcher:
    """Claims and starts deliveries of ``queue`` for this process.

    Args:
        queue: the queue's name.
        concurrency: the most deliveries this worker executes at once.
        poll_seconds: how often it looks without being woken.
    """

    def __init__(
        self,
        queue: str,
        concurrency: int,
        *,
        poll_seconds: float = POLL_SECONDS,
        settled: Callable[[], None] | None = None,
    ):
        self.queue = queue
        self.settled = settled
        """Called (from a DBOS thread) when DBOS has recorded the end of a delivery of a
        queue with a limit shared by every worker: it tells the other workers (a NOTIFY)
        that a slot of the shared limit is free."""
        self.slots = Slots(concurrency)
        self.poll_seconds = poll_seconds
        self.wakeups = 0
        """Times it looked at the queue because something woke it (not the fallback poll)."""
        self.claimed = 0
        """Deliveries claimed so far."""
        self._wake = threading.Event()
        self._more = False  # the last claim left work behind: the queue may hold more
        self._view: Any = None
        self._view_at = 0.0
        self._latest = True  # whether this version is the latest, as last read with the view

    def wake(self) -> None:
        """Look at the queue now (from any thread)."""
        self._wake.set()

    def done(self, delivery: str) -> None:
        """``delivery`` has ended here: free its slot, and look again if work may wait."""
        if self.slots.give_back(delivery) and self._more:
            self._wake.set()

    def run(self, stop: threading.Event) -> None:
        """Claim and start deliveries until ``stop`` is set."""
        while not stop.is_set():
            woken = self._wake.wait(self.poll_seconds)
            self._wake.clear()
            if stop.is_set():
                return
            self.wakeups += woken
            if woken:
                stop.wait(GATHER_SECONDS)
                self._wake.clear()
            try:
                self._fill()
            except Exception:  # the database is away: the next look tries again
                logger.warning("taking runs off queue %r failed", self.queue, exc_info=True)
                stop.wait(self.poll_seconds)

    def _fill(self) -> None:
        while (free := self.slots.free()) > 0:
            ids, owner, why = self._claim()
            filled = len(ids) >= free
            # work may wait when the claim filled every free slot, when a limit cut it (a
            # limit shared by all workers cuts a claim without saying so when it takes
            # some), or when the claim gave up on other workers' locks
            self._more = filled or why is not None or self._shared()
            if not ids:
                return
            self._start(ids, owner)
            if not filled:
                return

    def _shared(self) -> bool:
        """Whether the queue has a limit that every worker of it shares (as last read)."""
        view = self._view
        return view is not None and (view._concurrency is not None or view._limiter is not None)

    def _claim(self) -> tuple[list[str], str, str | None]:
        """Claim up to the free slots' worth of deliveries.

        Returns:
            Their ids, the claim's token, and why none could be claimed when a limit
            (DBOS's reason) or other workers' locks (``"locked"``) left no room.
        """
        dbos = _instance()
        for _ in range(CONFLICT_RETRIES):
            owner = _utils().generate_uuid()
            try:
                ids, why = dbos._sys_db.start_queued_workflows(
                    self._queue_view(dbos),
                    executor_id=_utils().GlobalParams.executor_id,
                    app_version=_utils().GlobalParams.app_version,
                    queue_partition_key=None,
                    local_running_count=self.slots.busy(),
                    owner_xid=owner,
                    is_latest_version=self._latest,
                )
            except Exception as exc:
                if not _conflict(dbos, exc):
                    raise
                time.sleep(random.uniform(0.002, 0.01))  # another worker is claiming
                continue
            self.slots.take(ids)
            self.claimed += len(ids)
            return list(ids), owner, why
        self._wake.set()  # try again soon rather than at the next poll
        return [], "", "locked"

    def _start(self, ids: list[str], owner: str) -> None:
        dbos = _instance()
        try:
            found = {s["workflow_uuid"]: s for s in dbos._sys_db.get_workflow_statuses(ids)}
        except Exception:
            logger.warning("reading claimed deliveries failed", exc_info=True)
            found = {}
        execute = importlib.import_module("dbos._core").execute_dequeued_workflow
        for delivery in ids:
            try:
                status = found.get(delivery) or dbos._sys_db.get_workflow_status(delivery)
                if status is None:
                    raise LookupError(f"delivery {delivery!r} has no status")
                if status["status"] != "PENDING":
                    # moved on since the claim (a sweep replaced and cancelled it): DBOS
                    # would not run it, so no run's end would give its slot back
                    self.slots.give_back(delivery)
                    continue
                handle = execute(dbos, status, owner)
                future = getattr(handle, "future", None)
                if future is not None and self._shared():
                    future.add_done_callback(self._recorded)
            except Exception:
                logger.warning("could not start delivery %s", delivery, exc_info=True)
                self.slots.give_back(delivery)

    def _recorded(self, _: object) -> None:
        """A delivery of a queue with a shared limit has ended and DBOS has recorded it.

        The claim counts the shared limit from DBOS's rows, which say the delivery is
        running until its end is recorded: only now may this worker, and the others,
        claim in its place.
        """
        self._wake.set()
        if self.settled is not None:
            try:
                self.settled()
            except Exception:  # the others find the free slot at their next poll
                logger.warning("telling the other workers of a free slot failed", exc_info=True)

    def _queue_view(self, dbos: Any) -> Any:
        """The queue as stored (global limit, rate limit), with this worker's own limit.

        Whether this application version is the latest is read with it, not in every
        claim (DBOS's own claim would read it each time): it only lets a claim take
        deliveries enqueued without a version, and every submit names one.
        """
        now = time.monotonic()
        if self._view is None or now - self._view_at > QUEUE_REFRESH_SECONDS:
            stored = dbos._sys_db.get_queue(self.queue)
            if stored is None:
                raise LookupError(f"queue {self.queue!r} is not registered")
            self._latest = bool(dbos._sys_db._is_latest_version(_utils().GlobalParams.app_version))
            self._view, self._view_at = stored, now
        self._view._worker_concurrency = self.slots.limit
        return self._view


_CLAIM_PARAMETERS = {
    "queue",
    "executor_id",
    "app_version",
    "queue_partition_key",
    "local_running_count",
    "owner_xid",
    "is_latest_version",
}
_QUEUE_FIELDS = ("_worker_concurrency", "_concurrency", "_limiter")


def require_internals(queue: str) -> None:
    """Check that the launched DBOS has the internals a dispatcher uses (after launch).

    Raises:
        ConfigError: one is missing or changed (another DBOS version than the pinned one).
    """
    missing = []
    dbos = _instance()
    sys_db = dbos._sys_db
    for name in ("get_workflow_statuses", "get_workflow_status", "get_queue", "_is_latest_version"):
        if not callable(getattr(sys_db, name, None)):
            missing.append(f"SystemDatabase.{name}")
    for name in ("is_lock_conflict", "is_serialization_conflict"):
        if not callable(getattr(sys_db, name, None)):
            missing.append(f"SystemDatabase.{name}")
    claim = getattr(sys_db, "start_queued_workflows", None)
    if claim is None or not set(inspect.signature(claim).parameters) >= _CLAIM_PARAMETERS:
        missing.append("SystemDatabase.start_queued_workflows(...)")
    core = importlib.import_module("dbos._core")
    execute = getattr(core, "execute_dequeued_workflow", None)
    if execute is None or list(inspect.signature(execute).parameters)[:3] != [
        "dbos",
        "status",
        "owner_xid",
    ]:
        missing.append("execute_dequeued_workflow(dbos, status, owner_xid)")
    utils = _utils()
    if not callable(getattr(utils, "generate_uuid", None)) or not all(
        hasattr(utils.GlobalParams, name) for name in ("executor_id", "app_version")
    ):
        missing.append("dbos._utils")
    if not missing and claim is not None:
        stored = sys_db.get_queue(queue)
        if stored is None or not all(hasattr(stored, name) for name in _QUEUE_FIELDS):
            missing.append("Queue." + "/".join(_QUEUE_FIELDS))
    if missing:
        try:
            version = importlib.metadata.version("dbos")
        except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a source tree
            version = "as installed"
        raise ConfigError(
            f"DBOS {version} lacks what queued runs use ({', '.join(missing)}); "
            "install the pinned version: pip install 'dbos>=3.4,<3.5'"
        )


def _instance() -> Any:
    """The launched DBOS of this process."""
    return importlib.import_module("dbos._dbos")._get_dbos_instance()


def _utils() -> Any:
    return importlib.import_module("dbos._utils")


def _conflict(dbos: Any, exc: Exception) -> bool:
    """Whether ``exc`` is another worker holding the rows a claim wanted."""
    if not isinstance(exc, DBAPIError):
        return False
    sys_db = dbos._sys_db
    return bool(sys_db.is_lock_conflict(exc) or sys_db.is_serialization_conflict(exc))
