"""The anthropic provider, through the official SDK, against a Messages API server of ours."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from stub_servers.anthropic_server import AnthropicServer, Reply, fail, message, ok, serve

from taskdecomp import ConfigError, ModelError, ModelRequest, ModelTimeoutError, run_sync
from taskdecomp.models import Connection, resolve_model
from taskdecomp.models.anthropic import AnthropicModel, fits_native, tool_input_schema
from taskdecomp.models.outputs import MEMORY, OutputMode
from taskdecomp.models.retry import RetryPolicy
from taskdecomp.strategies.replan import ReplanOptions
from tests.conftest import SALES_TOOLS
from tests.support import SEED_GOAL, seed_plan

FAST_RETRY = RetryPolicy(attempts=3, backoff_seconds=0.01, max_backoff_seconds=0.05)
PLAN = seed_plan()
ANSWER = "April 2026: gross 28,195 USD, refunds 1,370 USD, net 26,825 USD."
CLOSED = {
    "type": "object",
    "properties": {"total": {"type": "integer"}, "currency": {"type": "string"}},
    "required": ["total", "currency"],
    "additionalProperties": False,
}


@pytest.fixture(autouse=True)
def no_anthropic_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No ``ANTHROPIC_*`` variable of the machine leaks in; no mode is remembered."""
    for name in ("API_KEY", "MODEL", "BASE_URL", "TIMEOUT_SECONDS", "AUTH_TOKEN"):
        monkeypatch.delenv(f"ANTHROPIC_{name}", raising=False)
    MEMORY.forget()
    yield
    MEMORY.forget()


@pytest.fixture
def server() -> Iterator[AnthropicServer]:
    yield from serve()


class Waits:
    """Records the waits between attempts instead of sleeping."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.seconds.append(seconds)


def model(server: AnthropicServer, **kwargs: Any) -> AnthropicModel:
    options: dict[str, Any] = {
        "api_key": server.key,
        "base_url": server.url,
        "timeout": 5.0,
        "retry": FAST_RETRY,
        "sleep": Waits(),
        **kwargs,
    }
    return AnthropicModel("claude-x", **options)


def ask(chosen: AnthropicModel, schema: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    request = ModelRequest(
        phase="plan",
        messages=(
            {"role": "system", "content": "You plan."},
            {"role": "user", "content": "Plan the April report."},
        ),
        json_schema=schema,
        **kwargs,
    )
    return asyncio.run(chosen.complete(request))


def test_a_text_call_sends_the_system_prompt_apart_and_reads_the_servers_usage(
    server: AnthropicServer,
) -> None:
    server.queue(ok(text=ANSWER, tokens=(310, 25)))

    response = ask(model(server, headers={"x-route": "eu"}))

    assert (response.text, response.finish_reason) == (ANSWER, "stop")
    assert (response.tokens_in, response.tokens_out, response.estimated) == (310, 25, False)
    assert response.cost_usd is None  # a model the price table does not know
    sent = server.requests[0]
    assert sent["system"] == "You plan."
    assert sent["messages"] == [{"role": "user", "content": "Plan the April report."}]
    assert sent["model"] == "claude-x" and sent["max_tokens"] == 4096
    assert not {"tools", "output_config", "stream"} & set(sent)
    assert server.headers[0]["x-route"] == "eu" and server.headers[0]["anthropic-version"]


def test_a_schema_that_fits_native_output_is_sent_as_output_config(
    server: AnthropicServer,
) -> None:
    server.queue(ok(text='{"total": 26825, "currency": "USD"}'))

    response = ask(model(server), CLOSED)

    assert json.loads(response.text) == {"total": 26825, "currency": "USD"}
    sent = server.requests[0]
    assert sent["output_config"] == {"format": {"type": "json_schema", "schema": CLOSED}}
    assert "tools" not in sent


def test_a_plan_schema_goes_through_one_forced_answer_tool(server: AnthropicServer) -> None:
    server.queue(ok(tool_input=PLAN))
    schema = plan_schema()

    response = ask(model(server), schema)

    assert json.loads(response.text) == PLAN
    sent = server.requests[0]
    assert sent["tool_choice"] == {"type": "tool", "name": "answer"}
    assert [tool["name"] for tool in sent["tools"]] == ["answer"]
    assert sent["tools"][0]["input_schema"] == schema
    assert "output_config" not in sent


def test_a_schema_that_is_not_an_object_is_wrapped_for_the_tool_and_unwrapped_after(
    server: AnthropicServer,
) -> None:
    either = {"anyOf": [CLOSED, {"type": "object", "properties": {"kind": {"enum": ["x"]}}}]}
    server.queue(ok(tool_input={"answer": {"total": 3, "currency": "EUR"}}))

    response = ask(model(server), either)

    assert json.loads(response.text) == {"total": 3, "currency": "EUR"}
    input_schema = server.requests[0]["tools"][0]["input_schema"]
    assert input_schema["type"] == "object" and input_schema["properties"]["answer"] == either


@pytest.mark.parametrize("chosen", ["prompt", "json"])
def test_prompt_mode_states_the_schema_and_takes_the_json_out_of_prose(
    server: AnthropicServer, chosen: OutputMode
) -> None:
    prose = 'Here is the plan:\n```json\n{"total": 1, "currency": "USD"}\n```\nDone.'
    server.queue(ok(text=prose))

    response = ask(model(server, output_mode=chosen), CLOSED)

    assert json.loads(response.text) == {"total": 1, "currency": "USD"}
    sent = server.requests[0]
    assert not {"tools", "tool_choice", "output_config"} & set(sent)
    assert '"currency"' in sent["system"] and sent["system"].startswith("You plan.")


def test_a_refused_mode_falls_down_the_list_once_and_is_remembered(
    server: AnthropicServer,
) -> None:
    server.queue(
        fail(400, "output_config.format: structured outputs are not supported by claude-x"),
        fail(400, "tools: tool use is not supported by this model"),
        ok(text='{"total": 1, "currency": "USD"}'),
        ok(text='Sure: {"total": 2, "currency": "USD"}'),
    )
    chosen = model(server)

    first = ask(chosen, CLOSED)
    second = ask(model(server), CLOSED)  # another object for the same server and model

    assert (json.loads(first.text)["total"], json.loads(second.text)["total"]) == (1, 2)
    kinds = [sorted({"tools", "output_config"} & set(sent)) for sent in server.requests]
    assert kinds == [["output_config"], ["tools"], [], []]
    assert chosen.output_mode == "prompt"
    assert chosen.output_mode != model(server, base_url=server.url + "/other").output_mode


def test_a_bad_request_that_is_not_about_the_mode_is_not_retried_or_fallen_back(
    server: AnthropicServer,
) -> None:
    server.queue(fail(400, "messages: roles must alternate"))

    with pytest.raises(ModelError) as caught:
        ask(model(server), plan_schema())

    assert caught.value.kind == "bad_request" and "roles must alternate" in str(caught.value)
    assert len(server.requests) == 1


def test_a_streamed_text_call_hands_over_each_piece_and_reports_progress(
    server: AnthropicServer,
) -> None:
    server.queue(ok(text=ANSWER, tokens=(200, 30)))
    pieces: list[str] = []
    progress: list[int] = []

    response = ask(model(server), on_text=pieces.append, progress=lambda _, n: progress.append(n))

    assert server.requests[0]["stream"] is True
    assert len(pieces) > 3 and "".join(pieces) == ANSWER == response.text
    assert progress == sorted(progress) and progress[-1] > progress[0]
    assert (response.tokens_in, response.tokens_out, response.estimated) == (200, 30, False)


def test_a_streamed_tool_answer_hands_over_the_tools_json_pieces(
    server: AnthropicServer,
) -> None:
    server.queue(ok(text="Let me plan.", tool_input=PLAN))
    pieces: list[str] = []

    response = ask(model(server), plan_schema(), on_text=pieces.append)

    assert json.loads("".join(pieces)) == PLAN == json.loads(response.text)
    assert response.finish_reason == "stop" and not response.estimated


def test_a_stream_without_usage_is_estimated_and_says_so(server: AnthropicServer) -> None:
    server.queue(ok(text=ANSWER, stream_usage=False))

    response = ask(model(server), on_text=lambda _: None)

    assert response.estimated and response.tokens_in > 0 and response.tokens_out > 0


@pytest.mark.parametrize("streamed", [False, True])
def test_an_answer_cut_at_max_tokens_finishes_with_length(
    server: AnthropicServer, streamed: bool
) -> None:
    server.queue(ok(text='{"kind": "plan", "ste', stop_reason="max_tokens"))
    listen = {"on_text": lambda _: None} if streamed else {}

    response = ask(model(server), **listen)

    assert response.finish_reason == "length"


@pytest.mark.parametrize("streamed", [False, True])
def test_a_429_is_retried_after_the_wait_the_server_asks_for(
    server: AnthropicServer, streamed: bool
) -> None:
    server.queue(fail(429, "rate limited", retry_after="0.04"), ok(text=ANSWER))
    waits = Waits()
    listen = {"on_text": lambda _: None} if streamed else {}

    response = ask(model(server, sleep=waits), **listen)

    assert response.text == ANSWER and len(server.requests) == 2
    assert waits.seconds == [0.04]


def test_an_overloaded_server_and_an_error_inside_a_stream_are_retried(
    server: AnthropicServer,
) -> None:
    in_stream = Reply(body=message(text=ANSWER), stream_error="overloaded_error")
    server.queue(fail(529, "Overloaded"), in_stream, ok(text=ANSWER))

    response = ask(model(server), on_text=lambda _: None)

    assert response.text == ANSWER and len(server.requests) == 3


def test_rate_limits_that_never_end_are_llm_error_rate_limit(server: AnthropicServer) -> None:
    server.fallback = fail(429, "rate limited", retry_after="0")

    with pytest.raises(ModelError) as caught:
        ask(model(server))

    assert caught.value.kind == "rate_limit" and len(server.requests) == FAST_RETRY.attempts


@pytest.mark.parametrize(
    ("status", "kind"), [(401, "auth"), (403, "permission"), (404, "not_found"), (500, "server")]
)
def test_errors_map_to_llm_error_kinds_without_the_key(
    server: AnthropicServer, status: int, kind: str
) -> None:
    server.fallback = fail(status, f"the server repeats the key {server.key}")

    with pytest.raises(ModelError) as caught:
        ask(model(server))

    assert caught.value.kind == kind and server.key not in str(caught.value)


def test_a_wrong_key_is_refused_by_the_server_as_auth(server: AnthropicServer) -> None:
    wrong_key = "sk-ant-wrong-key-abcdefghijkl"

    with pytest.raises(ModelError) as caught:
        ask(model(server, api_key=wrong_key))

    assert caught.value.kind == "auth" and "ANTHROPIC_API_KEY" in str(caught.value)
    assert wrong_key not in str(caught.value) and len(server.requests) == 1


def test_a_server_that_does_not_answer_in_time_is_llm_timeout(server: AnthropicServer) -> None:
    server.queue(Reply(stall=True))

    with pytest.raises(ModelTimeoutError) as caught:
        ask(model(server, timeout=0.3))

    assert "ANTHROPIC_TIMEOUT_SECONDS" in str(caught.value) and len(server.requests) == 1


@pytest.mark.parametrize("streamed", [False, True])
def test_a_200_that_is_not_a_message_is_a_bad_response(
    server: AnthropicServer, streamed: bool
) -> None:
    server.fallback = Reply(raw=b"<html>sign in</html>", content_type="text/html")
    listen = {"on_text": lambda _: None} if streamed else {}

    with pytest.raises(ModelError) as caught:
        ask(model(server), **listen)

    assert caught.value.kind == "bad_response" and server.url in str(caught.value)


def test_the_model_string_resolves_with_the_environment_and_the_connection(
    server: AnthropicServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_CLAUDE_KEY", server.key)
    monkeypatch.setenv("ANTHROPIC_MODEL", "claude-from-env")
    connection = Connection(base_url=server.url, api_key_env="MY_CLAUDE_KEY", timeout=3)
    server.queue(ok(text=ANSWER))

    chosen = resolve_model("anthropic", connection=connection)
    response = asyncio.run(chosen.complete(ModelRequest(phase="plan", messages=USER)))

    assert chosen.name == "anthropic:claude-from-env" and response.text == ANSWER
    assert server.requests[0]["model"] == "claude-from-env"


def test_a_bare_provider_with_no_model_says_how_to_name_one() -> None:
    with pytest.raises(ConfigError, match="ANTHROPIC_MODEL"):
        resolve_model("anthropic", connection=Connection(base_url="http://127.0.0.1:9"))


def test_anthropics_own_server_needs_a_key() -> None:
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        resolve_model("anthropic:claude-x")


def test_native_output_is_only_asked_for_schemas_the_api_enforces() -> None:
    assert fits_native(CLOSED)
    assert not fits_native({**CLOSED, "additionalProperties": True})
    assert not fits_native({"type": "array", "items": CLOSED, "minItems": 3})
    assert not fits_native(plan_schema())  # per-position steps: prefixItems
    assert tool_input_schema(CLOSED) == CLOSED


@pytest.mark.parametrize("strategy", ["plan_execute", "replan"])
def test_a_whole_run_succeeds_on_the_messages_api(server: AnthropicServer, strategy: str) -> None:
    server.queue(ok(tool_input=PLAN, tokens=(300, 90)))
    if strategy == "replan":
        server.queue(ok(tool_input={"answer": {"kind": "respond", "response": ANSWER}}))
    else:
        server.queue(ok(text=ANSWER, tokens=(500, 30)))
    extra: dict[str, Any] = {"replan": ReplanOptions()} if strategy == "replan" else {}

    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model(server), strategy=strategy, **extra)

    assert (result.status, result.stop_reason) == ("ok", "success"), result.message
    assert result.answer == ANSWER
    assert [step.tool for step in result.plan.steps] == [s["tool"] for s in PLAN["steps"]]
    assert result.usage.llm_calls == 2 and len(server.requests) == 2


USER: tuple[Any, ...] = ({"role": "user", "content": "Hello."},)


def plan_schema() -> dict[str, Any]:
    from taskdecomp import load_toolset
    from taskdecomp.models.schemas import plan_schema as build

    toolset = load_toolset(SALES_TOOLS)
    return build(toolset.catalog(toolset.keys()), min_steps=3, max_steps=6)
