"""A delivery DBOS still counts as running after its run ended (its worker died before DBOS
recorded the end) is cancelled by the sweep, so it stops holding a slot of the queue's
global limit; the run it delivered keeps its result."""

from __future__ import annotations

import psycopg

from tests.scale.conftest import Cluster, wait_for
from tests.scale.test_workers import HOUR, listening, looks


def test_the_sweep_cancels_a_delivery_left_running_after_its_run_ended(cluster: Cluster) -> None:
    model = cluster.model("plan", *looks(0))
    cluster.start("--concurrency", "2", "--global-concurrency", "1", *HOUR)
    listening(cluster, 1)
    first = cluster.submit("ends, its delivery is left running", model)
    cluster.ended([first], timeout=60)
    with psycopg.connect(cluster.db, autocommit=True) as conn:  # as if its worker died there
        conn.execute(
            "UPDATE dbos.workflow_status SET status = 'PENDING', updated_at = 0"
            " WHERE workflow_uuid = %s",
            (first,),
        )

    def status() -> str | None:
        with psycopg.connect(cluster.db) as conn:
            row = conn.execute(
                "SELECT status FROM dbos.workflow_status WHERE workflow_uuid = %s", (first,)
            ).fetchone()
        return None if row is None else str(row[0])

    wait_for(lambda: status() == "CANCELLED", timeout=60, what=cluster.logs)
    summary = cluster.summary(first)
    assert (summary.status, summary.stop_reason) == ("ok", "success")
    second = cluster.submit("takes the slot the leftover held", model)  # the limit is 1
    assert cluster.ended([second], timeout=60)[second].stop_reason == "success"
