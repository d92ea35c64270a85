"""The service never shows or stores a key: run views, event streams, the store, the log."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from taskdecomp.redact import REDACTED
from tests.server.support import ServeProcess, sse_events, wait_for
from tests.test_redaction import (
    ANSWER_GOAL,
    ERROR_GOAL,
    LEAKY_TOOLS,
    leaky_script,
    new_secret,
    stored_bytes,
)


@dataclass
class Leaky:
    """``taskdecomp serve`` whose toolset and model leak ``secret`` (``OPENAI_API_KEY``)."""

    server: ServeProcess
    client: httpx.Client
    secret: str
    db: Path

    def finished(self, goal: str) -> dict[str, Any]:
        """Start a run of ``goal`` and wait until it ends: its view."""
        started = self.client.post("/runs", json={"goal": goal, "toolset": "leaky"})
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        view: dict[str, Any] = wait_for(
            lambda: (
                (v := self.client.get(f"/runs/{run_id}").json())["status"] in ("ok", "stopped")
                and v
            ),
            timeout=60,
        )
        return view


@pytest.fixture
def leaky(tmp_path: Path) -> Iterator[Leaky]:
    secret = new_secret()
    tools = tmp_path / "leaky_tools.py"
    tools.write_text(LEAKY_TOOLS)
    db = tmp_path / "runs.db"
    model = leaky_script(tmp_path / "leaky.json", secret)
    server = ServeProcess(
        ["--tools", f"leaky={tools}", "--model", model, "--db", str(db)],
        env={**os.environ, "OPENAI_API_KEY": secret, "FOO_TOKEN": "1"},
    ).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            yield Leaky(server=server, client=client, secret=secret, db=db)
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.stop()


def test_run_views_and_event_streams_never_show_the_key(leaky: Leaky) -> None:
    answered = leaky.finished(ANSWER_GOAL)
    failed = leaky.finished(ERROR_GOAL)
    assert answered["status"] == "ok" and answered["answer"] == f"The key is {REDACTED}; flag 1"
    assert answered["history"][1]["observation"] == {
        "variable": "OPENAI_API_KEY",
        "value": REDACTED,
        "flag": "1",  # FOO_TOKEN=1 is too short to be a secret: kept as it is
    }
    assert failed["stop_reason"] == "tool_error:call_api"
    assert f"key {REDACTED} is revoked" in failed["message"]
    assert [t["error"] for t in failed["trace"] if not t["ok"]] == [failed["message"]]
    streams = [sse_events(leaky.client, f"/runs/{v['run_id']}/events") for v in (answered, failed)]
    errors = [e["data"]["data"].get("error") for e in streams[1] if e["event"] == "StepFinished"]
    assert f"key {REDACTED} is revoked" in "".join(error or "" for error in errors)
    listed = leaky.client.get("/runs").text
    everything = json.dumps([answered, failed, streams]) + listed
    assert leaky.secret not in everything


def test_the_store_and_its_write_ahead_log_never_hold_the_key(leaky: Leaky) -> None:
    leaky.finished(ANSWER_GOAL)
    leaky.finished(ERROR_GOAL)
    typed = leaky.finished(f"{ANSWER_GOAL} (the key is {leaky.secret})")  # typed into a goal
    assert typed["goal"].endswith(f"(the key is {REDACTED})")
    assert leaky.secret not in leaky.client.get("/runs").text
    stored = stored_bytes(leaky.db)  # read while the server runs: its WAL is still there
    assert leaky.db.with_name("runs.db-wal").exists()
    assert leaky.secret.encode() not in stored
    assert REDACTED.encode() in stored


def test_the_server_log_never_shows_the_key(leaky: Leaky) -> None:
    leaky.finished(ERROR_GOAL)
    _code, output = leaky.server.stop()
    assert f"calling upstream with key {REDACTED}" in output  # the tool's own warning
    assert leaky.secret not in output
