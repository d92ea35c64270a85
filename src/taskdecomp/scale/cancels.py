"""Whether a running queued run should stop: a ``taskdecomp cancel``, or DBOS's own cancel.

Two ways to cancel a queued run reach the worker executing it: the run's cancel request
in the store (``taskdecomp cancel``, ``POST /runs/{id}/cancel``), and a cancel of its
delivery in DBOS (``dbos workflow cancel``, ``DBOS.cancel_workflow``), which marks the
delivery's workflow ``CANCELLED`` and interrupts nothing. Only the run's latest delivery
counts: the sweep cancels a dead worker's delivery itself, after queueing the next one.
The worker reads both in one query, and records a DBOS cancel as the run's cancel
request too, so a delivery of the run that comes after (a recovery) ends it as cancelled
instead of running it.
"""

from __future__ import annotations

from sqlalchemy import text

from taskdecomp.run import RunId
from taskdecomp.store import rows
from taskdecomp.store.sql import SqlStore

_BOTH = text(
    "SELECT q.cancel_requested, q.delivery, "
    "(SELECT w.status FROM dbos.workflow_status w WHERE w.workflow_uuid = :delivery) "
    "FROM queued_runs q WHERE q.run_id = :run_id"
)
_STORE_ONLY = text("SELECT cancel_requested, NULL, NULL FROM queued_runs WHERE run_id = :run_id")


def asked(store: SqlStore, run_id: RunId, delivery: str | None) -> bool:
    """Whether ``run_id`` (delivered by ``delivery``) was asked to stop, either way.

    Raises:
        StoreError: the store cannot be read.
    """
    key = rows.key(run_id)
    query, values = _BOTH, {"run_id": key, "delivery": delivery}
    if delivery is None:
        query, values = _STORE_ONLY, {"run_id": key}
    with store.read() as conn:
        row = conn.execute(query, values).one_or_none()
    if row is None:
        return False
    requested, latest, state = bool(row[0]), row[1], row[2]
    # only the run's latest delivery speaks for it: the sweep cancels a dead worker's
    # delivery after it has queued the next one, and that cancel is not the user's
    if state == "CANCELLED" and latest == delivery and not requested:
        store.request_cancel(run_id)
        return True
    return requested


_LATEST = text("SELECT delivery FROM queued_runs WHERE run_id = :run_id")


def is_latest(store: SqlStore, run_id: RunId, delivery: str) -> bool:
    """Whether ``delivery`` is still ``run_id``'s latest delivery, as the store says now.

    A sweep that read a run's delivery before another worker's sweep replaced and
    cancelled it finds the cancel, and must not take it for the user's.

    Raises:
        StoreError: the store cannot be read.
    """
    with store.read() as conn:
        found = conn.execute(_LATEST, {"run_id": rows.key(run_id)}).scalar_one_or_none()
    return found == delivery
