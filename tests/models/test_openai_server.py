"""End to end: the openai provider against a real OpenAI-compatible server.

The server is ``python -m llama_cpp.server`` serving SmolLM2-135M-Instruct on 127.0.0.1.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from taskdecomp import run_sync
from taskdecomp.models.openai import OpenAIModel
from tests.conftest import SALES_TOOLS
from tests.models.conftest import LlamaServer
from tests.support import SEED_GOAL, SEED_TOOLS

pytestmark = pytest.mark.slow


def served(server: LlamaServer) -> OpenAIModel:
    # This server accepts response_format json_schema but ignores it; it applies a schema
    # given in json_object mode, as a grammar.
    return OpenAIModel(
        server.model, base_url=server.url, timeout=120, structured_output="json_object+schema"
    )


def test_a_full_plan_execute_run_against_the_llama_cpp_server(llama_server: LlamaServer) -> None:
    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=served(llama_server))

    # The plan is schema-valid (the server's grammar), passes the policy boundary, and
    # the tools run.
    assert result.plan is not None, (result.stop_reason, result.raw_plan, result.message)
    assert 3 <= len(result.plan.steps) <= 6
    assert {step.tool for step in result.plan.steps} <= set(SEED_TOOLS)
    assert not result.stop_reason.startswith(("invalid_plan", "llm_")), result.stop_reason
    assert len(result.trace) >= 1
    assert result.usage.llm_calls >= 1
    assert result.usage.tokens_in > 500  # counted by the server
    assert result.usage.cost_usd == 0


def test_the_server_constrains_json_object_answers_to_the_schema(
    llama_server: LlamaServer,
) -> None:
    schema = {
        "type": "object",
        "properties": {"colour": {"type": "string", "enum": ["red", "green"]}},
        "required": ["colour"],
        "additionalProperties": False,
    }
    body = {
        "model": llama_server.model,
        "messages": [{"role": "user", "content": "Name a fruit. Answer in JSON."}],
        "temperature": 0,
        "max_tokens": 32,
        "response_format": {"type": "json_object", "schema": schema},
    }
    request = urllib.request.Request(
        f"{llama_server.url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )

    with urllib.request.urlopen(request, timeout=120) as answer:
        content = json.load(answer)["choices"][0]["message"]["content"]

    assert json.loads(content) in ({"colour": "red"}, {"colour": "green"})
