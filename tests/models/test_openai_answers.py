"""Streamed and typed answers through the openai provider, against a server of ours."""

from __future__ import annotations

import json

from stub_servers.openai_server import FakeOpenAI, Reply, completion

from taskdecomp import AnswerDelta, run_sync
from taskdecomp.events import Event
from taskdecomp.models.openai import OpenAIModel, RetryPolicy
from tests.conftest import SALES_TOOLS
from tests.support import SEED_GOAL, seed_plan

PLAN = json.dumps(seed_plan())
ANSWER = "April 2026: gross 28,195 USD, refunds 1,370 USD, net 26,825 USD; one risk noted."
SCHEMA = {
    "type": "object",
    "properties": {"net_usd": {"type": "integer"}, "risk": {"type": "string"}},
    "required": ["net_usd", "risk"],
    "additionalProperties": False,
}


def model(server: FakeOpenAI) -> OpenAIModel:
    retry = RetryPolicy(attempts=2, backoff_seconds=0.01, max_backoff_seconds=0.05)
    return OpenAIModel("fake-model", base_url=server.url, timeout=5.0, retry=retry)


def test_the_answer_deltas_concatenate_to_the_answer(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(Reply(body=completion(PLAN)), Reply(body=completion(ANSWER)))
    events: list[Event] = []
    result = run_sync(
        SEED_GOAL, tools=SALES_TOOLS, model=model(fake_openai), on_event=events.append
    )
    assert result.stop_reason == "success" and result.answer == ANSWER
    deltas = [e.text for e in events if isinstance(e, AnswerDelta)]
    assert len(deltas) > 2  # the server sent the answer in pieces of 8 characters
    assert "".join(deltas) == ANSWER
    finalize = fake_openai.requests[-1]
    assert finalize["stream"] is True and "response_format" not in finalize


def test_a_typed_answer_is_asked_under_its_schema_and_streamed(fake_openai: FakeOpenAI) -> None:
    typed = json.dumps({"net_usd": 26825, "risk": "refunds rose"})
    fake_openai.queue(Reply(body=completion(PLAN)), Reply(body=completion(typed)))
    events: list[Event] = []
    result = run_sync(
        SEED_GOAL,
        tools=SALES_TOOLS,
        model=model(fake_openai),
        on_event=events.append,
        output_type=SCHEMA,
    )
    assert result.stop_reason == "success"
    assert result.output == {"net_usd": 26825, "risk": "refunds rose"}
    assert "".join(e.text for e in events if isinstance(e, AnswerDelta)) == typed
    finalize = fake_openai.requests[-1]
    assert "answer" in json.dumps(finalize.get("response_format") or finalize.get("tools"))
