"""Runs the server executes hold the run lease like CLI runs: neither can resume the other's."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.clitools import CHILD
from tests.server.support import Served, wait_for


def test_the_cli_cannot_resume_a_run_the_server_executes(served: Served, toolset: Path) -> None:
    with served.client() as client:
        run_id = client.post("/runs", json={"goal": "block", "toolset": "demo"}).json()["run_id"]
        wait_for(lambda: client.get(f"/runs/{run_id}").json()["history"])
        done = subprocess.run(
            [*CHILD, "resume", run_id, "--db", served.config.store_url],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        view = client.get(f"/runs/{run_id}").json()
        toolset.with_name("release").write_text("go")
        ended = wait_for(
            lambda: (v := client.get(f"/runs/{run_id}").json())["status"] == "ok" and v
        )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and run_id in lines[0] and "Traceback" not in done.stderr
    assert view["status"] == "running" and view["active"] is True
    assert view["lease"]["epoch"] == 1
    assert [e["plan_step"]["id"] for e in ended["history"]] == ["first", "wait", "last"]
    assert ended["segments"] == 1  # the refused resume wrote nothing


def test_the_server_cannot_resume_a_run_the_cli_executes(
    served: Served, toolset: Path, tmp_path: Path
) -> None:
    model = served.config.models[0]
    cli = subprocess.Popen(
        [*CHILD, "run", "block", "--tools", str(toolset), "--model", model,
         "--db", served.config.store_url, "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
    )  # fmt: skip
    try:
        with served.client() as client:
            run_id = wait_for(
                lambda: (
                    (runs := client.get("/runs").json()["runs"])
                    and client.get(f"/runs/{runs[0]['run_id']}").json()["history"]
                    and runs[0]["run_id"]
                )
            )
            view = client.get(f"/runs/{run_id}").json()
            resumed = client.post(f"/runs/{run_id}/resume")
            cancelled = client.post(f"/runs/{run_id}/cancel")
            toolset.with_name("release").write_text("go")
            _out, err = cli.communicate(timeout=60)
            ended = client.get(f"/runs/{run_id}").json()
    finally:
        if cli.poll() is None:
            cli.kill()
    assert view["status"] == "running" and view["active"] is False  # leased by the CLI
    assert view["toolset"] == "demo"
    assert resumed.status_code == 409, resumed.text
    assert resumed.headers["content-type"] == "application/problem+json"
    assert run_id in resumed.json()["detail"]
    assert cancelled.status_code == 409 and "not executing in this server" in cancelled.text
    assert cli.returncode == 0, err
    assert ended["status"] == "ok" and ended["segments"] == 1
