"""Admission of new runs: stored and answered at once, a bounded queue, slots, 429, restarts."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from taskdecomp.errors import ConfigError
from taskdecomp.run import RunId
from taskdecomp.server import ServerConfig
from taskdecomp.server.config import DEFAULT_MAX_QUEUED, DEFAULT_MAX_RUNNING
from taskdecomp.server.trim import TRIM_AFTER_RUNS
from taskdecomp.store import open_store
from tests.clitools import CHILD, cli
from tests.server.support import Served, ServeProcess, run_model, sse_events, wait_for


@pytest.fixture
def one_slot(config: ServerConfig) -> Iterator[Served]:
    """A server that executes one run at a time and lets two more wait."""
    with Served(dataclasses.replace(config, max_running=1, max_queued=2)) as server:
        yield server


def start(client: httpx.Client, goal: str, **extra: Any) -> dict[str, Any]:
    response = client.post("/runs", json={"goal": goal, "toolset": "demo", **extra})
    assert response.status_code == 202, response.text
    body: dict[str, Any] = response.json()
    return body


def blocked(client: httpx.Client) -> str:
    """A run that holds the only slot until the release file exists."""
    run_id: str = start(client, "block")["run_id"]
    wait_for(lambda: client.get(f"/runs/{run_id}").json()["history"])  # it runs its tool
    return run_id


def ended(client: httpx.Client, run_id: str) -> dict[str, Any]:
    view: dict[str, Any] = wait_for(
        lambda: (v := client.get(f"/runs/{run_id}").json())["status"] in ("ok", "stopped") and v,
        timeout=60,
    )
    return view


def test_a_post_answers_202_with_the_run_queued_and_it_runs_once_a_slot_frees(
    one_slot: Served, toolset: Path
) -> None:
    with one_slot.client() as client:
        first = blocked(client)
        posted = start(client, "a dag run")
        run_id = posted["run_id"]
        assert posted["status"] == "queued" and posted["stored_status"] == "queued"
        assert posted["queued_at"] is not None and posted["queue_position"] == 1
        assert posted["segments"] == 0 and posted["history"] == []
        waiting = wait_for(
            lambda: (v := client.get(f"/runs/{run_id}").json())["queued_seconds"] > 0.2 and v
        )
        assert waiting["status"] == "queued" and waiting["lease"] is None
        listed = client.get("/runs", params={"status": "queued"}).json()["runs"]
        assert [r["run_id"] for r in listed] == [run_id]
        toolset.with_name("release").write_text("go")
        assert ended(client, first)["status"] == "ok"
        view = ended(client, run_id)
        events = sse_events(client, f"/runs/{run_id}/events")
        again = client.get(f"/runs/{run_id}").json()
    assert view["status"] == "ok" and view["stop_reason"] == "success"
    assert view["queued_seconds"] >= waiting["queued_seconds"] and view["queue_position"] is None
    assert again["queued_seconds"] == view["queued_seconds"]  # it stopped counting at the start
    assert [e["plan_step"]["id"] for e in view["history"]] == ["a", "b", "c", "d"]
    assert events[0]["event"] == "RunStarted" and events[-1]["event"] == "end"


def test_beyond_the_queue_a_post_is_refused_with_429_and_retry_after_and_nothing_stored(
    one_slot: Served, toolset: Path
) -> None:
    with one_slot.client() as client:
        first = blocked(client)
        queued = [start(client, f"a dag run {n}")["run_id"] for n in range(2)]
        refused = client.post("/runs", json={"goal": "a dag run too many", "toolset": "demo"})
        assert refused.status_code == 429, refused.text
        assert refused.headers["content-type"] == "application/problem+json"
        assert int(refused.headers["retry-after"]) >= 1
        problem = refused.json()
        assert problem["status"] == 429 and "--max-queued" in problem["detail"]
        listing = client.get("/runs").json()
        assert len(listing["runs"]) == 3  # the refused run was not stored
        assert "too many" not in str(listing)
        toolset.with_name("release").write_text("go")
        views = [ended(client, run_id) for run_id in [first, *queued]]
        assert start(client, "a dag run after")["status"] in ("queued", "running", "ok")
    assert [v["stop_reason"] for v in views] == ["success"] * 3


def test_a_queued_runs_deadline_counts_from_its_start_not_from_the_post(
    one_slot: Served, toolset: Path
) -> None:
    with one_slot.client() as client:
        first = blocked(client)
        run_id = start(client, "a dag run", budget={"max_seconds": 1})["run_id"]
        wait_for(lambda: client.get(f"/runs/{run_id}").json()["queued_seconds"] > 2, timeout=60)
        toolset.with_name("release").write_text("go")
        ended(client, first)
        view = ended(client, run_id)
    assert view["queued_seconds"] > 2  # it waited twice its deadline
    assert view["status"] == "ok" and view["stop_reason"] == "success"


def test_cancel_of_a_queued_run_ends_it_cancelled_without_running(
    one_slot: Served, toolset: Path
) -> None:
    with one_slot.client() as client:
        first = blocked(client)
        run_id = start(client, "a dag run")["run_id"]
        early = client.post(f"/runs/{run_id}/resume")
        assert early.status_code == 409 and "waits in this server's queue" in early.json()["detail"]
        cancelled = client.post(f"/runs/{run_id}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        view = cancelled.json()
        assert view["status"] == "stopped" and view["stop_reason"] == "cancelled"
        resumed = client.post(f"/runs/{first}/resume")
        assert resumed.status_code == 409  # the first is still executing
        toolset.with_name("release").write_text("go")
        assert ended(client, first)["status"] == "ok"
        after = start(client, "a dag run after")["run_id"]  # the line moved on past it
        assert ended(client, after)["status"] == "ok"
        events = sse_events(client, f"/runs/{run_id}/events")
        final = client.get(f"/runs/{run_id}").json()
    assert final["stop_reason"] == "cancelled" and final["history"] == [] and final["plan"] is None
    assert final["usage"]["llm_calls"] == 0  # it never planned
    assert "StepFinished" not in {e["event"] for e in events}


def serve(tmp_path: Path, toolset: Path) -> ServeProcess:
    return ServeProcess(
        ["--tools", f"demo={toolset}", "--model", run_model(tmp_path),
         "--db", str(tmp_path / "runs.db"), "--max-running", "1", "--max-queued", "5"],
        env={**os.environ, "TASKDECOMP_LEASE_SECONDS": "1"},
    )  # fmt: skip


def test_shutdown_leaves_queued_runs_queued_for_a_restart_or_resume(
    tmp_path: Path, toolset: Path
) -> None:
    server = serve(tmp_path, toolset).start()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        first = blocked(client)
        later = [start(client, f"a dag run {n}")["run_id"] for n in range(3)]
    code, output = server.stop(signal.SIGTERM)
    assert code in (0, -signal.SIGTERM), output  # uvicorn re-raises the signal once done
    assert "Traceback" not in output
    store = open_store(str(tmp_path / "runs.db"))
    try:
        left = [store.load_run(RunId(run_id)) for run_id in later]
        interrupted = store.load_run(RunId(first)).summary
    finally:
        store.close()
    assert [s.summary.status for s in left] == ["queued"] * 3
    assert [s.segments for s in left] == [0] * 3 and all(s.lease is None for s in left)
    assert interrupted.stop_reason == "cancelled"
    resumed = subprocess.run(
        [*CHILD, "resume", later[1], "--db", str(tmp_path / "runs.db"), "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    toolset.with_name("release").write_text("go")
    again = serve(tmp_path, toolset).start()
    try:
        with httpx.Client(base_url=again.url, timeout=30) as client:
            views = [ended(client, run_id) for run_id in later]
            first_view = client.get(f"/runs/{first}").json()
    finally:
        again.stop()
    assert [v["stop_reason"] for v in views] == ["success"] * 3
    assert [v["segments"] for v in views] == [1] * 3  # each ran once: the restart or the resume
    began = [v["queued_at"] + v["queued_seconds"] for v in views]
    assert began[0] < began[2]  # the restarted server kept their order
    assert first_view["stop_reason"] == "cancelled"  # a cancelled run waits for a resume


def test_after_a_burst_nothing_of_the_runs_stays_and_the_allocator_is_trimmed(
    config: ServerConfig,
) -> None:
    with Served(dataclasses.replace(config, max_running=4)) as server, server.client() as client:
        run_ids = [start(client, f"a dag run {n}")["run_id"] for n in range(TRIM_AFTER_RUNS)]
        views = [ended(client, run_id) for run_id in run_ids]
        runs = server.service.runs
        wait_for(lambda: not runs.admission.running and runs._trimmer.trims == 1)
        assert not runs._active and not runs._listeners and not runs.admission.waiting
    assert {v["stop_reason"] for v in views} == {"success"}


def test_a_model_that_cannot_be_made_is_refused_before_anything_is_stored(
    config: ServerConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    keyless = dataclasses.replace(config, models=(*config.models, "openai:gpt-4.1-mini"))
    with Served(keyless) as server, server.client() as client:
        refused = client.post(
            "/runs", json={"goal": "a dag run", "toolset": "demo", "model": "openai:gpt-4.1-mini"}
        )
        assert refused.status_code == 409, refused.text
        assert "OPENAI_API_KEY" in refused.json()["detail"]
        assert client.get("/runs").json()["runs"] == []  # nothing waits for a model it lacks
        assert start(client, "a dag run")["status"] == "queued"  # the other model still works


def test_a_queued_run_whose_start_meets_a_locked_store_starts_once_it_is_free(
    one_slot: Served, toolset: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="taskdecomp.server.runs")
    with one_slot.client() as client:
        first = blocked(client)
        second = start(client, "a dag run")["run_id"]
        lock = sqlite3.connect(one_slot.config.store_url, isolation_level=None)
        lock.execute("BEGIN EXCLUSIVE")  # another process holds the store's write lock
        try:
            toolset.with_name("release").write_text("go")  # the first run ends: a slot frees
            wait_for(
                lambda: any("could not start" in r.getMessage() for r in caplog.records),
                timeout=120,
            )  # the second run's start met the lock: it was not dropped
        finally:
            lock.execute("COMMIT")
            lock.close()
        view = ended(client, second)
        assert view["stop_reason"] == "success" and view["queue_position"] is None
        assert client.get(f"/runs/{first}").status_code == 200  # its own end met the lock


def test_serve_states_its_admission_limits(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = cli(capsys, "serve", "--help")
    assert code == 0
    assert f"[default: {DEFAULT_MAX_RUNNING}]" in out and f"[default: {DEFAULT_MAX_QUEUED}]" in out


@pytest.mark.parametrize(("running", "waiting"), [(0, 10), (1, -1)])
def test_limits_out_of_range_are_refused(config: ServerConfig, running: int, waiting: int) -> None:
    with pytest.raises(ConfigError, match="--max-running must be at least 1"):
        dataclasses.replace(config, max_running=running, max_queued=waiting)


def test_a_runs_place_is_read_from_another_thread_while_the_line_changes() -> None:
    """A run view (on a worker thread) asks for a place while the loop adds and withdraws."""
    from taskdecomp.server.admission import Admission, Waiting
    from taskdecomp.tools import Toolset

    line = Admission(max_running=1, max_queued=10_000)
    tools = Toolset.from_functions([])
    watched = RunId("watched")
    line.add(Waiting(run_id=watched, toolset=tools, model="m"), reserved=False)
    stop, failures, places = threading.Event(), [], set()

    def ask() -> None:
        while not stop.is_set():
            try:
                places.add(line.position(watched))
            except Exception as exc:  # the assert below names it
                failures.append(exc)
                return

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    asker = threading.Thread(target=ask)
    asker.start()
    try:
        for n in range(20_000):
            run_id = RunId(f"r{n}")
            line.add(Waiting(run_id=run_id, toolset=tools, model="m"), reserved=False)
            if n % 2:
                line.withdraw(RunId(f"r{n - 1}"))
    finally:
        stop.set()
        asker.join()
        sys.setswitchinterval(switch)
    assert failures == []
    assert places == {1}  # it stays first: the others come after it
