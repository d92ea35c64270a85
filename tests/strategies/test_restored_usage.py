"""A resumed run keeps what its first segment spent, estimated token counts included."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from stub_servers.openai_server import FakeOpenAI, Reply, completion

from taskdecomp import Budget, approve_sync, run_sync, tool
from taskdecomp.models.openai import OpenAIModel
from taskdecomp.models.scripted import ScriptedModel
from taskdecomp.store import open_store

PLAN = {
    "kind": "plan",
    "steps": [
        {"id": "ship", "title": "Ship it", "tool": "publish", "args": {"name": "report"}},
    ],
}


@tool(needs_approval=True, side_effects="idempotent")
def publish(name: str) -> dict[str, str]:
    """Publish a report."""
    return {"published": name}


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    server.start()
    yield server
    server.stop()


def test_a_run_planned_on_estimated_counts_stays_estimated_after_resume(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.queue(Reply(body=completion(json.dumps(PLAN), tokens=None)))  # no usage sent
    planner = OpenAIModel("fake-model", base_url=fake_openai.url, timeout=5.0)
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        budget = Budget(min_plan_steps=1)
        paused = run_sync("Ship the report.", tools=[publish], model=planner, store=store,
                          budget=budget)  # fmt: skip
        assert paused.stop_reason == "awaiting_approval" and paused.usage.estimated
        combiner = ScriptedModel(
            responses=[PLAN, "Shipped."]
        )  # goes on after the plan; not estimates
        done = approve_sync(paused.run_id, store=store, tools=[publish], model=combiner)
    finally:
        store.close()
    assert done.stop_reason == "success", done.message
    assert done.usage.llm_calls == 2 and done.usage.estimated
