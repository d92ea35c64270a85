"""Deliveries that DBOS still counts as running though nothing will ever end them.

A worker that dies after its run ended but before DBOS recorded the delivery's end, or
whose delivery was replaced by a sweep that then could not cancel it, leaves the
delivery ``PENDING`` for good. DBOS counts ``PENDING`` deliveries against a queue's global
limit, so each such leftover takes a slot of the limit away from every worker forever.
The sweep cancels them: a ``PENDING`` delivery of its queue not updated for a lease whose
run has ended, or that is no longer its run's latest delivery (the run moved on). A
delivery that still runs its run is its run's latest, and its run has not ended, so it is
never one of them; cancelling a delivery that is not the run's latest does not cancel the
run (:mod:`taskdecomp.scale.cancels`).
"""

from __future__ import annotations

from sqlalchemy import text

from taskdecomp.scale import engine
from taskdecomp.store.sql import SqlStore

_LEFT_OVER = text(
    "SELECT w.workflow_uuid FROM dbos.workflow_status w "
    "JOIN queued_runs q ON q.run_id = split_part(w.workflow_uuid, ':', 1) "
    "JOIN runs r ON r.id = q.run_id "
    "WHERE w.status = 'PENDING' AND w.queue_name = :queue AND w.name = :workflow "
    "AND w.updated_at < :before_ms "
    "AND (r.status IN ('ok', 'stopped') OR q.delivery IS DISTINCT FROM w.workflow_uuid)"
)


def find(store: SqlStore, queue: str, *, older_than: float) -> list[str]:
    """The left-over deliveries of ``queue`` not updated for ``older_than`` seconds.

    Raises:
        StoreError: the store cannot be read.
    """
    before_ms = int((store.now() - older_than) * 1000)
    values = {"queue": queue, "workflow": engine.WORKFLOW, "before_ms": before_ms}
    with store.read() as conn:
        return [str(found) for found in conn.execute(_LEFT_OVER, values).scalars()]
