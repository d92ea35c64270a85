"""The sweep never cancels a run by cancelling the delivery it would make itself.

A sweep names a new delivery by the run, its recoveries and the lease-long period it
makes it in. A delivery a worker has taken and not yet started (it holds no lease yet) can
be found again by a sweep in the same period: it is the very delivery that sweep would make.
Cancelling it would leave the run's latest delivery cancelled, which reads as the user's
``dbos workflow cancel``, and the run would end ``cancelled``.

The test builds that state for runs whose deliveries are named for the next periods, one
period each, taken by a worker that is gone: whichever period the worker's first sweep
falls in, one run's delivery is the one it would make.
"""

from __future__ import annotations

import time

import psycopg

from taskdecomp.scale import engine
from tests.scale.conftest import LEASE, Cluster, starts, step

PERIODS = 20
"""Periods covered (a lease each): longer than a worker takes to start and sweep once."""


def test_a_taken_delivery_found_again_in_its_own_period_is_left_to_start(
    cluster: Cluster,
) -> None:
    model = cluster.model("plan", *(step(f"s{n}", "look", n) for n in (1, 2, 3)))
    run_ids = [cluster.submit(f"taken {n}", model) for n in range(PERIODS)]
    now = int(time.time() // LEASE)
    deliveries = {run_id: f"{run_id}:r1:{now + n}" for n, run_id in enumerate(run_ids)}
    client = engine.client(cluster.db)
    try:
        for run_id, delivery in deliveries.items():
            engine.enqueue(client, run_id, queue=cluster.queue, delivery=delivery)
    finally:
        client.destroy()
    with psycopg.connect(cluster.db) as conn:  # taken by a worker that is gone, long ago
        conn.execute(
            "UPDATE dbos.workflow_status SET status = 'PENDING', executor_id = 'gone'"
            " WHERE workflow_uuid = ANY(%s)",
            (list(deliveries.values()),),
        )
        conn.execute(  # the submit's own deliveries were replaced by those
            "UPDATE dbos.workflow_status SET status = 'CANCELLED' WHERE workflow_uuid = ANY(%s)",
            (run_ids,),
        )
        for run_id, delivery in deliveries.items():
            conn.execute(
                "UPDATE queued_runs SET delivery = %s, enqueued_at = enqueued_at - 600"
                " WHERE run_id = %s",
                (delivery, run_id),
            )

    cluster.start()
    ended = cluster.ended(run_ids, timeout=120)

    reasons = {run_id: ended[run_id].stop_reason for run_id in run_ids}
    assert reasons == dict.fromkeys(run_ids, "success"), (reasons, cluster.deliveries(run_ids))
    begun = starts(cluster.calls())
    assert {(r, s): begun[(r, s)] for r in run_ids for s in ("s1", "s2", "s3")} == {
        (r, s): 1 for r in run_ids for s in ("s1", "s2", "s3")
    }
