"""Queued runs on worker processes: delivery to several workers, idempotent submit, cancel."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from taskdecomp.scale import engine
from tests.scale.conftest import Cluster, cli, fresh_database, starts, step, wait_for

STEPS = ("s1", "s2", "s3")
PLAN = (step("s1", "look", 1), step("s2", "put", 2), step("s3", "charge", 3))


def test_runs_submitted_to_two_workers_all_succeed_and_call_each_step_once(
    cluster: Cluster,
) -> None:
    model = cluster.model("plan", *PLAN, latency_ms=50)
    workers = cluster.start(count=2)
    run_ids = [cluster.submit(f"report {n}", model) for n in range(8)]

    ended = cluster.ended(run_ids, timeout=120)

    assert {r: (s.status, s.stop_reason) for r, s in ended.items()} == {
        r: ("ok", "success") for r in run_ids
    }
    listed = json.loads(cli("runs", "--json", "--limit", "0", "--db", cluster.db).stdout)
    shown = {r["run_id"]: (r["goal"], r["status"]) for r in listed if r["run_id"] in run_ids}
    assert shown == {r: (f"report {n}", "ok") for n, r in enumerate(run_ids)}
    calls = cluster.calls()
    assert starts(calls) == Counter({(r, s): 1 for r in run_ids for s in STEPS})
    assert {c.pid for c in calls} <= {w.pid for w in workers}


def test_the_same_idempotency_key_submitted_twice_gives_one_run(cluster: Cluster) -> None:
    model = cluster.model("plan", *PLAN)
    key = f"nightly-{uuid.uuid4().hex[:8]}"
    goal = f"nightly report {key}"
    argv = ("submit", goal, "--tools", "scale", "--model", model, "--queue", cluster.queue,
            "--idempotency-key", key, "--db", cluster.db, "--json")  # fmt: skip

    first = json.loads(cli(*argv).stdout)
    second = json.loads(cli(*argv).stdout)
    again = cluster.submit("another goal, same key", model, idempotency_key=key)

    assert first["new"] is True
    assert second == {"run_id": first["run_id"], "new": False}
    assert again == first["run_id"]
    cluster.start()
    ended = cluster.ended([first["run_id"]], timeout=120)[first["run_id"]]
    assert (ended.status, ended.stop_reason, ended.goal) == ("ok", "success", goal)
    listed = json.loads(cli("runs", "--json", "--limit", "0", "--db", cluster.db).stdout)
    assert [r["run_id"] for r in listed if key in r["goal"]] == [first["run_id"]]
    assert starts(cluster.calls()) == Counter({(first["run_id"], s): 1 for s in STEPS})


def test_a_run_cancelled_while_queued_never_runs(cluster: Cluster) -> None:
    model = cluster.model("plan", *PLAN)
    cancelled = cluster.submit("cancelled while queued", model)

    said = cli("cancel", cancelled, "--db", cluster.db).stderr

    assert "cancelled before it started" in said
    before = cluster.summary(cancelled)
    assert (before.status, before.stop_reason) == ("stopped", "cancelled")
    cluster.start()
    later = cluster.submit("submitted after the cancel", model)
    assert cluster.ended([later], timeout=120)[later].stop_reason == "success"
    client = engine.client(cluster.db)

    def delivered() -> Any:  # the cancelled run's own delivery, once a worker is done with it
        status = client.retrieve_workflow(cancelled).get_status()
        return status if status.status == "SUCCESS" else None

    try:
        delivery = wait_for(delivered, timeout=120, what=cluster.logs)
    finally:
        client.destroy()
    assert delivery.output == "ended"
    assert cluster.summary(cancelled) == before
    assert [c for c in cluster.calls() if c.run_id == cancelled] == []
    assert starts(cluster.calls()) == Counter({(later, s): 1 for s in STEPS})


def test_a_running_run_is_cancelled_on_whichever_worker_runs_it(cluster: Cluster) -> None:
    model = cluster.model(  # s2 takes ten minutes: the run can only end by being cancelled
        "slow", step("s1", "look", 1), step("s2", "look", 2, ms=600_000), step("s3", "look", 3)
    )
    workers = cluster.start(count=2)
    run_id = cluster.submit("cancelled while running", model)
    running = cluster.started(run_id, "s2", timeout=120)
    assert running.pid in {w.pid for w in workers}

    said = cli("cancel", run_id, "--db", cluster.db).stderr

    assert "asked to stop" in said
    ended = cluster.ended([run_id], timeout=120)[run_id]
    assert (ended.status, ended.stop_reason) == ("stopped", "cancelled")
    assert starts(cluster.calls()) == Counter({(run_id, "s1"): 1, (run_id, "s2"): 1})
    assert [c.step for c in cluster.calls() if c.event == "end"] == ["s1"]  # s2 never returned
    assert all(w.poll() is None for w in workers)


def test_a_run_submitted_before_any_worker_ever_started_on_the_database_runs(
    tmp_path: Path,
) -> None:
    with fresh_database() as db:  # no worker has made DBOS's tables in it yet
        cluster = Cluster(db=db, home=tmp_path)
        try:
            model = cluster.model("plan", *PLAN)
            done = cli("submit", "the first run ever", "--tools", "scale", "--model", model,
                       "--queue", cluster.queue, "--db", db, "--json")  # fmt: skip
            run_id = json.loads(done.stdout)["run_id"]
            assert cluster.summary(run_id).status == "queued"
            cluster.start()
            ended = cluster.ended([run_id], timeout=120)[run_id]
            assert (ended.status, ended.stop_reason) == ("ok", "success")
            assert starts(cluster.calls()) == Counter({(run_id, s): 1 for s in STEPS})
        finally:
            cluster.close()
