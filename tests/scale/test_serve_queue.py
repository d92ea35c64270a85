"""``taskdecomp serve --executor queue``: the service submits runs, worker processes run them.

Everything is real: the server is a ``taskdecomp serve`` child process spoken to over HTTP,
the workers are ``taskdecomp worker`` child processes, both on the module's PostgreSQL
database.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.clitools import ENTRY
from tests.scale.conftest import LEASE, TOOLS, Cluster, starts, step, wait_for
from tests.server.support import ServeProcess, sse_events

PLAN = (step("s1", "look", 1), step("s2", "put", 2, ms=100), step("s3", "charge", 3))


@pytest.fixture
def server(cluster: Cluster) -> Iterator[ServeProcess]:
    """The service on the cluster's queue, offering the models registered before it starts."""
    cluster.model("three", *PLAN)
    cluster.model("slow", step("s1", "look", 1, ms=30_000), *PLAN[1:])
    models = [arg for name in cluster.models for arg in ("--model", name)]
    argv = [
        "--executor", "queue", "--queue", cluster.queue, "--db", cluster.db,
        "--tools", f"scale={TOOLS}", *models,
    ]  # fmt: skip
    served = ServeProcess(
        argv,
        env={**os.environ, "TASKDECOMP_LEASE_SECONDS": str(LEASE)},
    )
    served.start()
    try:
        yield served
    finally:
        served.stop()


def client(server: ServeProcess) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=30)


def status_of(http: httpx.Client, run_id: str) -> str:
    return str(http.get(f"/runs/{run_id}").json()["status"])


def test_a_run_posted_to_the_service_is_queued_then_run_by_a_worker(
    cluster: Cluster, server: ServeProcess
) -> None:
    with client(server) as http:
        posted = http.post(
            "/runs", json={"goal": "two steps", "toolset": "scale", "model": "three"}
        )
        assert posted.status_code == 202, posted.text
        run_id = posted.json()["run_id"]
        assert posted.json()["status"] == "queued"  # no worker yet: it waits in the queue
        assert posted.json()["toolset"] == "scale"
        listed = http.get("/runs", params={"status": "queued"}).json()["runs"]
        assert run_id in [row["run_id"] for row in listed]

        cluster.start()
        events = sse_events(http, f"/runs/{run_id}/events", timeout=120)
        view = http.get(f"/runs/{run_id}").json()

    assert events[-1]["event"] == "end", events
    assert view["status"] == "ok", (view["stop_reason"], view.get("answer"), cluster.logs())
    assert view["status"] == "ok" and view["stop_reason"] == "success"
    assert starts(cluster.calls()) == {(run_id, s["id"]): 1 for s in PLAN}
    assert {call.pid for call in cluster.calls()} == {cluster.workers[0].pid}


def test_the_same_idempotency_key_posted_twice_gives_one_run(
    cluster: Cluster, server: ServeProcess
) -> None:
    goal = f"once on {cluster.queue}"
    body = {"goal": goal, "toolset": "scale", "model": "three", "idempotency_key": "k-1"}
    with client(server) as http:
        first = http.post("/runs", json=body).json()["run_id"]
        second = http.post("/runs", json=body).json()["run_id"]
        cluster.start()
        wait_for(lambda: status_of(http, first) == "ok", timeout=120, what=cluster.logs)
        runs = http.get("/runs", params={"limit": 500}).json()["runs"]
    assert first == second
    assert [run["run_id"] for run in runs if run["goal"] == goal] == [first]
    assert starts(cluster.calls()) == {(first, s["id"]): 1 for s in PLAN}


def test_a_queued_run_cancelled_through_the_service_never_runs(
    cluster: Cluster, server: ServeProcess
) -> None:
    with client(server) as http:
        run_id = http.post(
            "/runs", json={"goal": "g", "toolset": "scale", "model": "three"}
        ).json()["run_id"]
        cancelled = http.post(f"/runs/{run_id}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["status"] == "stopped"
        assert cancelled.json()["stop_reason"] == "cancelled"
        again = http.post(f"/runs/{run_id}/cancel")
    cluster.start()
    # the worker takes the delivery, finds the run ended, and calls nothing
    wait_for(
        lambda: cluster.deliveries([run_id]).count("SUCCESS") >= 1, timeout=60, what=cluster.logs
    )
    assert cluster.calls() == []
    assert again.status_code == 409
    assert "already ended" in again.json()["detail"]


def test_a_running_run_is_cancelled_through_the_service_on_its_worker(
    cluster: Cluster, server: ServeProcess
) -> None:
    cluster.start()
    with client(server) as http:
        run_id = http.post("/runs", json={"goal": "g", "toolset": "scale", "model": "slow"}).json()[
            "run_id"
        ]
        cluster.started(run_id, "s1", timeout=60)
        assert status_of(http, run_id) == "running"
        assert http.post(f"/runs/{run_id}/cancel").status_code == 200
        wait_for(lambda: status_of(http, run_id) == "stopped", timeout=30, what=cluster.logs)
        view = http.get(f"/runs/{run_id}").json()
    assert view["stop_reason"] == "cancelled"


def test_the_service_refuses_unknown_names_and_a_queue_on_sqlite(
    server: ServeProcess, tmp_path: Path
) -> None:
    with client(server) as http:
        unknown_model = http.post("/runs", json={"goal": "g", "toolset": "scale", "model": "x"})
        unknown_tools = http.post("/runs", json={"goal": "g", "toolset": "nope"})
    assert unknown_model.status_code == 422 and "not offered" in unknown_model.json()["detail"]
    assert unknown_tools.status_code == 422 and "unknown toolset" in unknown_tools.json()["detail"]

    argv = [
        *ENTRY, "serve", "--executor", "queue",
        "--db", f"sqlite:///{tmp_path}/runs.db", "--tools", f"s={TOOLS}", "--model", "m",
    ]  # fmt: skip
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "--executor queue needs a PostgreSQL store" in done.stderr
