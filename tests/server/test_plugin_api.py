"""The service uses a plugin's strategy, model provider and toolset source (``tests/plugin``).

A real ``taskdecomp serve`` process is started with ``--tools notes=notes:DIR`` and an
``echo:`` model behind ``--base-url``; its OpenAPI document lists the installed strategies,
and ``POST /runs`` runs the plugin's ``one_call`` strategy.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server.support import ServeProcess, wait_for


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServeProcess]:
    serving = ServeProcess(
        ["--tools", f"notes=notes:{tmp_path / 'notes'}", "--model", "echo:served",
         "--base-url", "http://127.0.0.1:9/v1", "--db", str(tmp_path / "runs.db")],
    )  # fmt: skip
    serving.start()
    yield serving
    serving.stop()


def finished(client: httpx.Client, run_id: str) -> dict:
    return wait_for(
        lambda: (
            (view := client.get(f"/runs/{run_id}").json())["status"] in ("ok", "stopped") and view
        )
    )


def test_the_openapi_document_lists_the_installed_strategies(server: ServeProcess) -> None:
    schema = httpx.get(f"{server.url}/openapi.json", timeout=30).json()
    strategy = schema["components"]["schemas"]["RunIn"]["properties"]["strategy"]
    assert {"plan_execute", "replan", "one_call"} <= set(strategy["enum"])
    assert "workflow" not in strategy["enum"]  # it starts from a workspace, not a goal


def test_a_run_of_the_plugins_strategy_ends_with_its_tools_result(server: ServeProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        body = {
            "goal": "one note",
            "toolset": "notes",
            "strategy": "one_call",
            "options": {"tool": "note", "args": {"text": "served"}},
        }
        response = client.post("/runs", json=body)
        assert response.status_code == 202, response.text
        view = finished(client, response.json()["run_id"])
        assert view["stop_reason"] == "success", view
        assert '"last": "served"' in view["answer"]


def test_the_plugins_provider_is_connected_where_the_server_was_told(
    server: ServeProcess,
) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        response = client.post("/runs", json={"goal": "three notes", "toolset": "notes"})
        assert response.status_code == 202, response.text
        view = finished(client, response.json()["run_id"])
        assert view["answer"] == "served said three times, via http://127.0.0.1:9/v1"


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"strategy": "one_call", "options": {"colour": "red"}}, "unknown option 'colour'"),
        ({"strategy": "workflow"}, "does not start from a goal"),
        ({"strategy": "nope"}, "unknown strategy 'nope'"),
        ({"strategy": "replan", "options": {"prompts": "/etc"}}, "cannot be set over HTTP"),
    ],
)
def test_options_a_client_may_not_give_are_refused(
    server: ServeProcess, body: dict, detail: str
) -> None:
    response = httpx.post(
        f"{server.url}/runs", json={"goal": "x", "toolset": "notes", **body}, timeout=30
    )
    assert response.status_code == 422, response.text
    assert detail in response.json()["detail"]
