"""Runs survive the server: SIGKILL mid-run, restart, replay, resume; SIGTERM cancels cleanly."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from pathlib import Path

import httpx

from tests.server.support import ServeProcess, run_model, sse_events, sse_iter, wait_for


def serve(tmp_path: Path, toolset: Path) -> ServeProcess:
    return ServeProcess(
        ["--tools", f"demo={toolset}", "--model", run_model(tmp_path),
         "--db", str(tmp_path / "runs.db")],
        env={**os.environ, "TASKDECOMP_LEASE_SECONDS": "1"},  # a dead server's lease expires fast
    )  # fmt: skip


def test_a_run_in_flight_when_the_server_died_is_interrupted_and_resumes(
    tmp_path: Path, toolset: Path
) -> None:
    first = serve(tmp_path, toolset).start()
    with httpx.Client(base_url=first.url, timeout=30) as client:
        run_id = client.post("/runs", json={"goal": "block", "toolset": "demo"}).json()["run_id"]
        wait_for(lambda: client.get(f"/runs/{run_id}").json()["history"])  # "first" is stored
        before = sse_events(client, f"/runs/{run_id}/events", limit=3)
    first.stop(signal.SIGKILL)
    toolset.with_name("release").write_text("go")
    second = serve(tmp_path, toolset).start()
    try:
        with httpx.Client(base_url=second.url, timeout=30) as client:
            view = wait_for(  # until the dead server's lease has expired
                lambda: (v := client.get(f"/runs/{run_id}").json())["status"] == "interrupted" and v
            )
            assert view["stored_status"] == "running" and view["lease"] is not None
            assert [e["plan_step"]["id"] for e in view["history"]] == ["first"]
            listed = client.get("/runs", params={"status": "interrupted"}).json()["runs"]
            assert [r["run_id"] for r in listed] == [run_id]
            resumed = client.post(f"/runs/{run_id}/resume")
            assert resumed.status_code == 202, resumed.text
            rest = sse_events(client, f"/runs/{run_id}/events", last_event_id=before[-1]["id"])
            whole = sse_events(client, f"/runs/{run_id}/events")
            view = client.get(f"/runs/{run_id}").json()
    finally:
        second.stop()
    assert before + rest == whole  # no gap, no duplicate, across the crash and the restart
    assert [m["id"] for m in whole[:-1]] == list(range(1, len(whole)))
    assert view["status"] == "ok" and view["segments"] == 2
    assert [e["plan_step"]["id"] for e in view["history"]] == ["first", "wait", "last"]


def test_sigterm_cancels_runs_in_flight_and_exits(tmp_path: Path, toolset: Path) -> None:
    server = serve(tmp_path, toolset).start()
    client = httpx.Client(base_url=server.url, timeout=30)
    run_id = client.post("/runs", json={"goal": "block", "toolset": "demo"}).json()["run_id"]
    wait_for(lambda: client.get(f"/runs/{run_id}").json()["history"])
    streamed: list[dict] = []
    stream_ended = threading.Event()

    def watch() -> None:
        with (
            httpx.Client(base_url=server.url, timeout=60) as own,
            contextlib.suppress(httpx.HTTPError),
        ):
            streamed.extend(sse_iter(own, f"/runs/{run_id}/events"))
        stream_ended.set()

    threading.Thread(target=watch, daemon=True).start()
    wait_for(lambda: streamed)
    code, err = server.stop(signal.SIGTERM)  # its run blocks until released: it must cancel it
    client.close()
    assert code in (0, -signal.SIGTERM), err  # uvicorn re-raises the signal once it is done
    assert stream_ended.wait(60)
    assert "Traceback" not in err
    toolset.with_name("release").write_text("go")
    again = serve(tmp_path, toolset).start()
    try:
        with httpx.Client(base_url=again.url, timeout=30) as client:
            view = client.get(f"/runs/{run_id}").json()
            assert view["status"] == "stopped" and view["stop_reason"] == "cancelled"
            assert client.post(f"/runs/{run_id}/resume").status_code == 202
            view = wait_for(
                lambda: (v := client.get(f"/runs/{run_id}").json())["status"] == "ok" and v
            )
    finally:
        again.stop()
    assert [e["plan_step"]["id"] for e in view["history"]] == ["first", "wait", "last"]
