"""How workers take runs: woken by a submit, several processes, their own limits, DBOS's cancel.

A worker claims runs when a submit notifies its queue (the fallback poll is set to an
hour here, so a run taken at all was taken through the notification); ``--processes``
starts several worker processes under one command; a worker's ``--concurrency`` holds
whatever another worker of the queue says; a provider's rate limit holds across two
workers; and cancelling a run's delivery with DBOS cancels the run.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterable
from typing import Any

import psycopg

from taskdecomp.run import RunId
from taskdecomp.scale import engine, wakeup
from tests.scale.conftest import Call, Cluster, starts, step, wait_for

HOUR = ("--poll-seconds", "3600")
"""A fallback poll no test waits for: a run is taken only when a submit wakes a worker."""


def looks(ms: int) -> tuple[dict[str, Any], ...]:
    """A plan of three read-only steps of ``ms`` milliseconds each (plans need three)."""
    return tuple(step(f"s{n}", "look", n, ms=ms) for n in (1, 2, 3))


def listening(cluster: Cluster, count: int) -> None:
    """Wait until ``count`` worker processes listen for submits on the test's database."""

    def check() -> bool:
        with psycopg.connect(cluster.db) as conn:
            found = conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND query = %s",
                (f"LISTEN {wakeup.CHANNEL}",),
            ).fetchone()
        return found is not None and found[0] >= count

    wait_for(check, timeout=60, what=cluster.logs)


def most_at_once(calls: Iterable[Call], pid: int) -> int:
    """The most calls worker ``pid`` had under way at the same moment."""
    edges = sorted(
        (c.t, 1 if c.event == "start" else -1) for c in calls if c.pid == pid
    )  # an end sorts before a start at the same time
    busy = most = 0
    for _, change in edges:
        busy += change
        most = max(most, busy)
    return most


def test_a_submitted_run_is_taken_at_once_without_waiting_for_a_poll(cluster: Cluster) -> None:
    model = cluster.model("plan", *looks(0))
    cluster.start(*HOUR)
    listening(cluster, 1)

    run_ids = [cluster.submit(f"woken {n}", model) for n in range(3)]

    ended = cluster.ended(run_ids, timeout=60)
    assert {r: s.stop_reason for r, s in ended.items()} == dict.fromkeys(run_ids, "success")


def test_processes_start_that_many_workers_under_one_command(cluster: Cluster) -> None:
    model = cluster.model("plan", *looks(300))
    (parent,) = cluster.start("--processes", "2", "--concurrency", "1", *HOUR)
    listening(cluster, 2)

    run_ids = [cluster.submit(f"spread {n}", model) for n in range(6)]

    ended = cluster.ended(run_ids, timeout=120)
    assert {s.stop_reason for s in ended.values()} == {"success"}
    pids = {c.pid for c in cluster.calls()}
    assert len(pids) == 2
    assert parent.pid not in pids  # the command's own process only waits for its workers
    assert all(most_at_once(cluster.calls(), pid) == 1 for pid in pids)
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=60) == 0


def test_a_workers_concurrency_holds_whatever_a_later_worker_says(cluster: Cluster) -> None:
    model = cluster.model("slow", *looks(500))
    (wide,) = cluster.start("--concurrency", "4", *HOUR)
    listening(cluster, 1)
    (narrow,) = cluster.start("--concurrency", "1", *HOUR)  # it used to set 1 for both
    listening(cluster, 2)

    run_ids = [cluster.submit(f"busy {n}", model) for n in range(8)]

    ended = cluster.ended(run_ids, timeout=120)
    assert {s.stop_reason for s in ended.values()} == {"success"}
    calls = cluster.calls()
    assert starts(calls) == Counter({(r, s): 1 for r in run_ids for s in ("s1", "s2", "s3")})
    assert most_at_once(calls, wide.pid) == 4
    assert most_at_once(calls, narrow.pid) <= 1


def test_a_rate_limit_holds_across_two_workers(cluster: Cluster) -> None:
    model = cluster.model("plan", *looks(0))
    limit = ("--rate-limit", "scripted=2/s", "--concurrency", "2")  # five runs need both
    cluster.start(*limit, *HOUR, count=2)
    listening(cluster, 2)

    run_ids = [cluster.submit(f"limited {n}", model) for n in range(5)]

    ended = cluster.ended(run_ids, timeout=120)
    assert {s.stop_reason for s in ended.values()} == {"success"}
    calls = sorted(
        event.at
        for run_id in run_ids
        for event in cluster.store.load_events(RunId(run_id))
        if event.kind == "ModelCalled"
    )
    assert len(calls) == 10  # a plan and a combine call a run
    workers = {c.pid for c in cluster.calls()}
    assert len(workers) == 2
    # no three calls within one period (less the scheduling slack between a call's start,
    # which the limit counts, and its end, which the stored event's time is)
    assert all(later - first >= 0.8 for first, later in zip(calls, calls[2:], strict=False))


def test_cancelling_a_running_runs_delivery_with_dbos_cancels_the_run(cluster: Cluster) -> None:
    model = cluster.model(  # s2 takes ten minutes: the run can only end by being cancelled
        "slow", step("s1", "look", 1), step("s2", "look", 2, ms=600_000), step("s3", "look", 3)
    )
    cluster.start()
    run_id = cluster.submit("cancelled by dbos", model)
    cluster.started(run_id, "s2", timeout=120)
    client = engine.client(cluster.db)
    try:
        client.cancel_workflow(run_id)  # the first delivery's workflow id is the run id
    finally:
        client.destroy()

    ended = cluster.ended([run_id], timeout=60)[run_id]

    assert (ended.status, ended.stop_reason) == ("stopped", "cancelled")
    assert [c.step for c in cluster.calls() if c.event == "end"] == ["s1"]  # s2 never returned


def test_cancelling_a_queued_runs_delivery_with_dbos_ends_the_run_unstarted(
    cluster: Cluster,
) -> None:
    model = cluster.model("plan", *looks(0))
    run_id = cluster.submit("cancelled by dbos before it started", model)
    client = engine.client(cluster.db)
    try:
        client.cancel_workflow(run_id)
    finally:
        client.destroy()
    cluster.start()

    ended = cluster.ended([run_id], timeout=60)[run_id]

    assert (ended.status, ended.stop_reason) == ("stopped", "cancelled")
    assert cluster.calls() == []
