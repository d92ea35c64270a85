"""Typed and streamed answers over HTTP: POST /runs with answer_schema, AnswerDelta on SSE."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from taskdecomp.server import ServerConfig
from tests.server.support import Served, dag_plan, sse_events, wait_for

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"done": {"type": "integer"}, "summary": {"type": "string"}},
    "required": ["done", "summary"],
}


def streaming_model(tmp_path: Path) -> str:
    """Plans 'dag' goals; answers the typed combine call with JSON, any other with text."""
    path = tmp_path / "answers.json"
    script = {
        "rules": [
            {"match": "task decomposition planner.*dag", "response": dag_plan()},
            {"match": "answer schema", "response": {"done": 4, "summary": "all four ran"}},
            {"match": "reporting assistant", "response": "All four steps are done."},
        ],
        "stream_ms": 40,
    }
    path.write_text(json.dumps(script))
    return f"scripted:{path}"


def ended(client: Any, run_id: str) -> dict[str, Any]:
    return wait_for(  # type: ignore[no-any-return]
        lambda: (v := client.get(f"/runs/{run_id}").json())["status"] in ("ok", "stopped") and v
    )


def test_a_run_posted_with_an_answer_schema_returns_its_typed_output(
    tmp_path: Path, config: ServerConfig
) -> None:
    streaming = dataclasses.replace(config, models=(streaming_model(tmp_path),))
    with Served(streaming) as server, server.client() as client:
        body = {"goal": "dag", "toolset": "demo", "answer_schema": SCHEMA}
        response = client.post("/runs", json=body)
        assert response.status_code == 202, response.text
        run_id = response.json()["run_id"]
        view = ended(client, run_id)
        messages = sse_events(client, f"/runs/{run_id}/events")
    assert view["stop_reason"] == "success"
    assert view["output"] == {"done": 4, "summary": "all four ran"}
    assert view["config"]["answer_schema"] == SCHEMA
    deltas = [m["data"]["data"] for m in messages if m["event"] == "AnswerDelta"]
    assert deltas  # the pieces written between two checkpoints are stored as one record
    assert json.loads("".join(d["text"] for d in deltas)) == view["output"]


def test_the_event_stream_carries_a_plain_answer_as_it_was_streamed(
    tmp_path: Path, config: ServerConfig
) -> None:
    streaming = dataclasses.replace(config, models=(streaming_model(tmp_path),))
    with Served(streaming) as server, server.client() as client:
        response = client.post("/runs", json={"goal": "dag", "toolset": "demo"})
        run_id = response.json()["run_id"]
        view = ended(client, run_id)
        messages = sse_events(client, f"/runs/{run_id}/events")
    kinds = [m["event"] for m in messages]
    assert kinds.index("AnswerDelta") < kinds.index("RunStopped")
    text = "".join(m["data"]["data"]["text"] for m in messages if m["event"] == "AnswerDelta")
    assert text == view["answer"] == "All four steps are done."
    assert view["output"] is None


def test_a_schema_that_is_not_a_json_schema_is_refused(served: Served) -> None:
    with served.client() as client:
        body = {"goal": "dag", "toolset": "demo", "answer_schema": {"type": "no-such-type"}}
        response = client.post("/runs", json=body)
    assert response.status_code == 422
    assert "answer_schema" in response.text
