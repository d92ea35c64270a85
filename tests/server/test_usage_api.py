"""A run's usage over HTTP says whether its token counts are estimates."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stub_servers.openai_server import FakeOpenAI, Reply, completion

from taskdecomp.models import Connection
from taskdecomp.server import ServerConfig
from tests.server.support import Served, dag_plan, wait_for


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    server.start()
    yield server
    server.stop()


def finished(client: Any, run_id: str) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        view: dict[str, Any] = client.get(f"/runs/{run_id}").json()
        return view if view["status"] in ("ok", "stopped") else None

    found: dict[str, Any] = wait_for(ended)
    return found


def test_the_run_view_marks_estimated_usage(
    fake_openai: FakeOpenAI, tmp_path: Path, toolset: Path
) -> None:
    plan = json.dumps(dag_plan())
    fake_openai.queue(
        Reply(body=completion(plan, tokens=None)),  # the server sends no usage: estimated
        Reply(body=completion("All steps are done.", tokens=None)),
        Reply(body=completion(plan, tokens=(300, 90))),  # the server counts
        Reply(body=completion("All steps are done.", tokens=(500, 30))),
    )
    config = ServerConfig(
        store_url=str(tmp_path / "runs.db"),
        toolsets={"demo": str(toolset)},
        models=("openai:fake-model",),
        connection=Connection(base_url=fake_openai.url),
        poll_seconds=0.1,
    )
    views = []
    with Served(config) as served, served.client() as client:
        for _ in range(2):
            started = client.post("/runs", json={"goal": "a dag run", "toolset": "demo"})
            assert started.status_code == 202, started.text
            views.append(finished(client, started.json()["run_id"]))
    assert [view["stop_reason"] for view in views] == ["success", "success"]
    assert [view["usage"]["estimated"] for view in views] == [True, False]
    assert (views[1]["usage"]["tokens_in"], views[1]["usage"]["tokens_out"]) == (800, 120)
