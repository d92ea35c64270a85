"""End to end: the openai provider against a real OpenAI-compatible server.

The server is ``python -m llama_cpp.server`` serving SmolLM2-135M-Instruct on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import pytest

from taskdecomp import Budget, ModelRequest, run_sync
from taskdecomp.models.openai import OpenAIModel
from tests.conftest import SALES_TOOLS
from tests.models.conftest import LlamaServer
from tests.support import SEED_GOAL, SEED_TOOLS

# Deadlines are sized for a busy 2-core machine (the server's start counts too); the model's
# speed is measured by bench/models.py, never asserted here.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]
LOADED = Budget(max_seconds=600)


def served(server: LlamaServer) -> OpenAIModel:
    # As a user gets it from --model openai:NAME --base-url: no output mode given.
    return OpenAIModel(server.model, base_url=server.url, timeout=600)


COLOUR = {
    "type": "object",
    "properties": {"colour": {"type": "string", "enum": ["red", "green"]}},
    "required": ["colour"],
    "additionalProperties": False,
}


def colour_request() -> ModelRequest:
    return ModelRequest(
        phase="plan",
        messages=({"role": "user", "content": "Name a fruit's colour. Answer in JSON."},),
        json_schema=COLOUR,
        schema_name="colour",
    )


def test_a_full_plan_execute_run_against_the_llama_cpp_server(llama_server: LlamaServer) -> None:
    model = served(llama_server)

    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model, budget=LOADED)

    # The server answers response_format json_schema with a 500 that names it; the provider
    # falls back to a forced tool call, whose parameters the server applies as a grammar.
    # So the plan is schema-valid, passes the policy boundary, and the tools run.
    assert result.plan is not None, (result.stop_reason, result.raw_plan, result.message)
    assert 3 <= len(result.plan.steps) <= 6
    assert {step.tool for step in result.plan.steps} <= set(SEED_TOOLS)
    assert not result.stop_reason.startswith(("invalid_plan", "llm_")), result.stop_reason
    assert len(result.trace) >= 1
    assert result.usage.llm_calls >= 1
    assert result.usage.tokens_in > 500  # counted by the server
    assert result.usage.cost_usd is None  # a model the price table does not know
    # The working mode is remembered for this server, by a new model object too.
    assert model.output_mode == "tool"
    assert served(llama_server).output_mode == "tool"


def test_the_server_answers_in_json_mode_under_the_schema(llama_server: LlamaServer) -> None:
    model = OpenAIModel(
        llama_server.model, base_url=llama_server.url, timeout=600, output_mode="json"
    )

    response = asyncio.run(model.complete(colour_request()))

    # llama-cpp-python applies the schema sent with json_object as a grammar
    assert json.loads(response.text) in ({"colour": "red"}, {"colour": "green"})
    assert model.output_mode == "json"
    assert not response.estimated and response.tokens_in > 20  # counted by the server


def test_the_server_answers_in_prompt_mode_with_no_response_format(
    llama_server: LlamaServer,
) -> None:
    model = OpenAIModel(
        llama_server.model,
        base_url=llama_server.url,
        timeout=600,
        output_mode="prompt",
        max_output_tokens=48,
    )
    pieces: list[str] = []
    streamed = ModelRequest(
        phase="plan", messages=colour_request().messages, json_schema=COLOUR, on_text=pieces.append
    )

    whole = asyncio.run(model.complete(colour_request()))
    response = asyncio.run(model.complete(streamed))

    # No grammar constrains a prompt-mode answer: a 135M model need not write JSON, but the
    # server answers the call (no response_format to refuse) and the mode is remembered.
    assert whole.text and not whole.estimated and whole.tokens_in > 20
    assert response.text and response.tokens_out >= 1
    assert response.estimated  # this server sends no usage in a stream
    assert model.output_mode == "prompt"


def test_the_server_refuses_json_schema_with_a_500_that_names_it(
    llama_server: LlamaServer,
) -> None:
    body = {
        "model": llama_server.model,
        "messages": [{"role": "user", "content": "Name a colour. Answer in JSON."}],
        "max_tokens": 8,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "colour", "schema": {"type": "object"}},
        },
    }
    request = urllib.request.Request(
        f"{llama_server.url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )

    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=600)

    assert refused.value.code == 500
    assert "response_format" in refused.value.read().decode()


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

    with urllib.request.urlopen(request, timeout=600) as answer:
        content = json.load(answer)["choices"][0]["message"]["content"]

    assert json.loads(content) in ({"colour": "red"}, {"colour": "green"})


def test_the_server_streams_an_answer_piece_by_piece(llama_server: LlamaServer) -> None:
    pieces: list[str] = []
    request = ModelRequest(
        phase="finalize",
        messages=({"role": "user", "content": "Say hello in five words."},),
        on_text=pieces.append,
    )

    response = asyncio.run(served(llama_server).complete(request))

    assert len(pieces) > 1 and "".join(pieces) == response.text
    assert response.tokens_out >= 1
