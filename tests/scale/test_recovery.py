"""Workers that die: their runs move to another worker, by the side-effect rules of durable runs.

A worker killed with SIGKILL keeps its runs' leases until they expire (``LEASE``); then
another worker's sweep delivers them again. Read-only steps in flight run again, an
idempotent one with the same key, an unsafe one in doubt stops the run; finished steps
never run again. A run that kills every worker is parked, and a run's deadline counts
from its first start, whichever worker it is on.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import psycopg
import pytest

from taskdecomp.run import RunId
from taskdecomp.store.base import RunSummary
from tests.scale.conftest import LEASE, SETTLE, TERMINAL, Cluster, starts, step, wait_for


def test_a_run_that_kills_its_worker_every_time_is_parked_as_poisoned(cluster: Cluster) -> None:
    model = cluster.model(
        "deadly", step("s1", "look", 1), step("s2", "crash", 2, ms=300), step("s3", "look", 3)
    )
    options = ("--max-recoveries", "2")
    cluster.start(*options)
    run_id = cluster.submit("kills its worker", model)

    def ended_with_workers_replaced() -> RunSummary | None:
        if not cluster.alive():
            cluster.start(*options)
        found = cluster.summaries().get(run_id)
        return found if found is not None and found.status in TERMINAL else None

    ended = wait_for(
        ended_with_workers_replaced,
        timeout=60,
        what=lambda: f"{run_id} did not end\n{cluster.logs()}",
    )

    assert (ended.status, ended.stop_reason) == ("stopped", "poisoned")
    # the first start and two recoveries; the third recovery parks the run unstarted
    crashes = [c for c in cluster.calls() if c.tool == "crash"]
    assert [c.key for c in crashes] == [f"{run_id}:s2"] * 3
    assert len({c.pid for c in crashes}) == 3
    assert [w.returncode for w in cluster.workers[:3]] == [-signal.SIGKILL] * 3
    assert cluster.alive() == cluster.workers[3:]
    assert starts(cluster.calls()) == Counter({(run_id, "s1"): 1, (run_id, "s2"): 3})
    assert cluster.recoveries()[run_id] == 3


@pytest.mark.parametrize(
    ("tool", "stop_reason", "s2_calls"),
    [
        ("look", "success", 2),
        ("put", "success", 2),
        ("charge", "interrupted_unknown_outcome:s2", 1),
    ],
)
def test_a_run_whose_worker_is_killed_in_a_step_ends_on_another_worker(
    cluster: Cluster, tool: str, stop_reason: str, s2_calls: int
) -> None:
    model = cluster.model(
        "plan", step("s1", "look", 1), step("s2", tool, 2, ms=1500), step("s3", "look", 3)
    )
    workers = cluster.start(count=2)
    run_id = cluster.submit(f"a {tool} step in flight", model)

    doomed = cluster.kill_during(run_id, "s2")

    ended = cluster.ended([run_id], timeout=LEASE + 120)[run_id]
    assert ended.stop_reason == stop_reason
    (survivor,) = {w.pid for w in workers} - {doomed.pid}
    calls = [c for c in cluster.calls() if c.event == "start"]
    second = [c for c in calls if c.step == "s2"]
    assert [(c.tool, c.key) for c in second] == [(tool, f"{run_id}:s2")] * s2_calls
    assert [c.pid for c in second] == [doomed.pid, survivor][:s2_calls]
    finished = ("s1", "s3") if stop_reason == "success" else ("s1",)
    assert starts(calls) == Counter({(run_id, "s2"): s2_calls} | {(run_id, s): 1 for s in finished})
    assert [c.pid for c in calls if c.step == "s3"] == ([survivor] if "s3" in finished else [])
    assert cluster.recoveries()[run_id] == 1


def test_the_deadline_counts_from_the_first_start_across_a_recovery(cluster: Cluster) -> None:
    model = cluster.model(
        "plan", step("s1", "look", 1, ms=2500), step("s2", "look", 2), step("s3", "look", 3)
    )
    cluster.start(count=2)
    on_time = cluster.submit("finishes within its deadline", model, max_seconds=4)
    assert cluster.ended([on_time], timeout=120)[on_time].stop_reason == "success"
    run_id = cluster.submit("would finish if its clock started again", model, max_seconds=4)

    cluster.kill_during(run_id, "s1")

    ended = cluster.ended([run_id], timeout=LEASE + 120)[run_id]
    assert (ended.status, ended.stop_reason) == ("stopped", "max_seconds")
    assert cluster.recoveries()[run_id] == 1
    assert not any(c.run_id == run_id and c.step in ("s2", "s3") for c in cluster.calls())


def test_a_worker_that_wakes_up_after_its_run_moved_on_records_and_calls_nothing(
    cluster: Cluster,
) -> None:
    model = cluster.model(
        "plan", step("s1", "look", 1), step("s2", "put", 2, ms=1000), step("s3", "look", 3)
    )
    workers = cluster.start(count=2)
    run_id = cluster.submit("its first worker stalls", model)
    stalled = cluster.started(run_id, "s2", timeout=120)
    time.sleep(SETTLE)
    os.kill(stalled.pid, signal.SIGSTOP)
    try:
        ended = cluster.ended([run_id], timeout=LEASE + 120)[run_id]
        assert ended.stop_reason == "success"
        (other,) = (w for w in workers if w.pid != stalled.pid)
        cluster.kill(other.pid)  # what follows can only run on the stalled worker
        stored = cluster.store.load_run(RunId(run_id))
        events = cluster.store.load_events(RunId(run_id))
    finally:
        os.kill(stalled.pid, signal.SIGCONT)

    wait_for(  # its call of s2 returns, into a run it no longer holds
        lambda: "stopped without writing" in cluster.stderr(stalled.pid),
        timeout=60,
        what=cluster.logs,
    )
    later = cluster.submit("after the stalled worker woke up", model)
    assert cluster.ended([later], timeout=120)[later].stop_reason == "success"
    assert cluster.store.load_run(RunId(run_id)) == stored
    assert cluster.store.load_events(RunId(run_id)) == events
    calls = [c for c in cluster.calls() if c.event == "start"]
    assert [c.pid for c in calls if c.key == f"{run_id}:s2"] == [stalled.pid, other.pid]
    assert [c.pid for c in calls if c.key == f"{run_id}:s3"] == [other.pid]
    assert {c.pid for c in calls if c.run_id == later} == {stalled.pid}
    # the delivery the sweep cancelled under it ends quietly, not with DBOS's traceback
    assert "Traceback" not in cluster.stderr(stalled.pid)


def test_a_run_whose_worker_died_before_starting_it_is_delivered_again(cluster: Cluster) -> None:
    model = cluster.model(
        "plan", step("s1", "look", 1), step("s2", "put", 2), step("s3", "look", 3)
    )
    run_id = cluster.submit("its first worker dies as it takes it", model)
    with (
        psycopg.connect(cluster.db) as holder,
        psycopg.connect(cluster.db, autocommit=True) as watcher,
    ):
        # the run's row is locked, so the worker that takes its delivery off the queue
        # waits in the middle of starting it: then it is killed
        holder.execute("SELECT id FROM runs WHERE id = %s FOR UPDATE", (run_id,))
        (doomed,) = cluster.start()
        wait_for(
            lambda: (
                watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                ).fetchone()
                == (1,)
            ),
            timeout=120,
            what=cluster.logs,
        )
        cluster.kill(doomed.pid)
        holder.rollback()
    cluster.start()

    ended = cluster.ended([run_id], timeout=LEASE + 120)[run_id]

    assert ended.stop_reason == "success"
    assert starts(cluster.calls()) == Counter({(run_id, s): 1 for s in ("s1", "s2", "s3")})
