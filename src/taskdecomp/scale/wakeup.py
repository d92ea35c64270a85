"""Waking workers when a run is queued: PostgreSQL ``LISTEN``/``NOTIFY`` on one channel.

A submit, once DBOS holds its delivery, notes the delivery and notifies
:data:`CHANNEL` with the queue's name in one transaction (PostgreSQL sends the
notification when it commits, so a woken worker always finds the delivery). Every worker
listens on a connection of its own and wakes its dispatcher when its queue is named. A
notification that is lost (the listener was reconnecting) costs at most the dispatcher's
fallback poll: the queue tables stay the truth, notifications only say "look now". It
needs psycopg 3.2 or later (``notifies(timeout=)``), which the project's dependencies pin.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg
from sqlalchemy import text

from taskdecomp.run import RunId
from taskdecomp.store import queue as queues
from taskdecomp.store import rows
from taskdecomp.store.sql import SqlStore

logger = logging.getLogger(__name__)

CHANNEL = "taskdecomp_queue"
"""The channel submits notify; the payload is the queue's name."""
RECONNECT_SECONDS = 1.0
"""How long a listener that lost its connection waits before it connects again."""
_NOTIFY = text("SELECT pg_notify(:channel, :queue)")
_REPLACE = text(
    "UPDATE queued_runs SET delivery = :new "
    "WHERE run_id = :run_id AND delivery IS NOT DISTINCT FROM :old"
)


def announce(store: SqlStore, run_id: RunId, *, queue: str, delivery: str) -> None:
    """Record ``delivery`` as ``run_id``'s latest and wake the workers of ``queue``, at once.

    Raises:
        StoreError: the store cannot be written.
    """
    with store.write() as conn:
        queues.note_delivery(conn, run_id, delivery)
        conn.execute(_NOTIFY, {"channel": CHANNEL, "queue": queue})


def replace(
    store: SqlStore, run_id: RunId, *, queue: str, old: str | None, new: str, wake: bool = True
) -> bool:
    """Make ``new`` ``run_id``'s latest delivery if ``old`` still is, and wake the workers.

    ``wake=False`` leaves the waking to the caller (a sweep that enqueues ``new`` after
    replacing: a worker woken before would not find it).

    Whether it did: ``False`` means another sweep replaced ``old`` first (its delivery is
    the run's now, and only that sweep may cancel ``old``). A sweep that replaces
    deliveries only this way never makes a delivery the latest again once it was replaced,
    so a run's latest delivery that DBOS says is cancelled was cancelled by someone else.

    Raises:
        StoreError: the store cannot be written.
    """
    with store.write() as conn:
        values = {"run_id": rows.key(run_id), "old": old, "new": new}
        if conn.execute(_REPLACE, values).rowcount != 1:
            return False
        if wake:
            conn.execute(_NOTIFY, {"channel": CHANNEL, "queue": queue})
    return True


def notify(store: SqlStore, queue: str) -> None:
    """Wake the workers of ``queue`` (after a delivery made without :func:`announce`)."""
    with store.write() as conn:
        conn.execute(_NOTIFY, {"channel": CHANNEL, "queue": queue})


class Listener:
    """A thread that calls ``wake()`` whenever a submit names ``queue``.

    Args:
        url: the database, as psycopg takes it (``postgresql://...``).
        queue: the queue to listen for.
        wake: what to call (from the listener's thread).
    """

    def __init__(self, url: str, queue: str, wake: Callable[[], None]) -> None:
        self.url, self.queue, self.wake = url, queue, wake
        self.heard = 0
        """Notifications for this queue received so far."""
        self._stop = threading.Event()
        self._listening = threading.Event()
        self._thread = threading.Thread(target=self._listen_forever, name="listener", daemon=True)

    def start(self, timeout: float = 10.0) -> bool:
        """Start listening; whether the first ``LISTEN`` was in place within ``timeout``."""
        self._thread.start()
        return self._listening.wait(timeout)

    def stop(self) -> None:
        """Stop listening (within about a second)."""
        self._stop.set()

    def _listen_forever(self) -> None:
        while not self._stop.is_set():
            try:
                self._listen()
            except Exception as exc:  # psycopg's, or anything else: the poll still runs
                message = " ".join(str(exc).split()) or type(exc).__name__
                logger.warning("listening for queued runs failed (%s); polling meanwhile", message)
                self.wake()  # something may have been queued while the connection was away
                self._stop.wait(RECONNECT_SECONDS)

    def _listen(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            self._listening.set()
            while not self._stop.is_set():
                for note in conn.notifies(timeout=1.0):
                    if note.payload == self.queue:
                        self.heard += 1
                        self.wake()
                    if self._stop.is_set():
                        return
