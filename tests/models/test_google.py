"""The google provider through the official SDK, against a Gemini API server of our own."""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from stub_servers.gemini_server import (
    KEY,
    GeminiServer,
    Reply,
    Seen,
    answer,
    call,
    error_body,
    failure,
    serving,
)

from taskdecomp.errors import ConfigError, ModelError, ModelTimeoutError
from taskdecomp.models import Connection, ModelRequest, resolve_model
from taskdecomp.models.google import GeminiModel, google_model
from taskdecomp.models.outputs import MEMORY, schema_instructions
from taskdecomp.models.retry import RetryPolicy

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"total": {"type": "integer"}},
    "required": ["total"],
    "additionalProperties": False,
}
REQUEST = ModelRequest(
    phase="plan",
    messages=(
        {"role": "system", "content": "You plan."},
        {"role": "user", "content": "Add it up."},
        {"role": "assistant", "content": "Earlier answer."},
        {"role": "user", "content": "Again."},
    ),
    json_schema=SCHEMA,
)
ENV = ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GEMINI_TIMEOUT_SECONDS")


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No key or URL from the machine; no mode remembered from another test's server."""
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    MEMORY.forget()
    yield
    MEMORY.forget()


@pytest.fixture
def gemini() -> Iterator[GeminiServer]:
    with serving() as server:
        yield server


class Sleeps:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def model(server: GeminiServer, **kwargs: Any) -> GeminiModel:
    return GeminiModel("gemini-x", api_key=KEY, base_url=server.url, **kwargs)


def ask(target: GeminiModel, request: ModelRequest = REQUEST) -> Any:
    return asyncio.run(target.complete(request))


def declaration(seen: Seen) -> dict[str, Any]:
    declared: dict[str, Any] = seen.body["tools"][0]["functionDeclarations"][0]
    return declared


def parameters(declared: dict[str, Any]) -> Any:
    # proto JSON takes a field's camelCase or snake_case name; the SDK sends the latter
    return declared.get("parametersJsonSchema", declared.get("parameters_json_schema"))


def test_native_mode_sends_the_schema_for_the_server_to_enforce(gemini: GeminiServer) -> None:
    gemini.queue(Reply(body=answer('{"total": 7}', usage=(31, 5))))

    response = ask(model(gemini))

    assert (response.text, response.tokens_in, response.tokens_out) == ('{"total": 7}', 31, 5)
    assert (response.finish_reason, response.estimated) == ("stop", False)
    seen = gemini.requests[0]
    assert seen.path == "/v1beta/models/gemini-x:generateContent"
    assert seen.headers["x-goog-api-key"] == KEY
    assert seen.generation["responseMimeType"] == "application/json"
    assert seen.generation["responseJsonSchema"] == SCHEMA
    assert seen.system == "You plan."  # the system message is the system instruction
    roles = [(c["role"], c["parts"][0]["text"]) for c in seen.body["contents"]]
    assert roles == [
        ("user", "Add it up."),
        ("model", "Earlier answer."),
        ("user", "Again."),
    ]
    assert "tools" not in seen.body


def test_tool_mode_forces_one_call_whose_arguments_are_the_answer(gemini: GeminiServer) -> None:
    gemini.queue(Reply(body=call({"total": 9})))

    response = ask(model(gemini, output_mode="tool"))

    assert json.loads(response.text) == {"total": 9}
    seen = gemini.requests[0]
    declared = declaration(seen)
    assert declared["name"] == "answer" and parameters(declared) == SCHEMA
    assert seen.body["toolConfig"]["functionCallingConfig"] == {
        "mode": "ANY",
        "allowedFunctionNames": ["answer"],
    }
    assert "responseMimeType" not in seen.generation


def test_json_mode_asks_for_json_and_states_the_schema(gemini: GeminiServer) -> None:
    gemini.queue(Reply(body=answer('{"total": 3}')))

    response = ask(model(gemini, output_mode="json"))

    assert response.text == '{"total": 3}'
    seen = gemini.requests[0]
    assert seen.generation["responseMimeType"] == "application/json"
    assert "responseJsonSchema" not in seen.generation
    assert seen.system == "You plan.\n\n" + schema_instructions(SCHEMA)


def test_prompt_mode_takes_the_json_out_of_prose_and_a_fence(gemini: GeminiServer) -> None:
    prose = 'Here is the plan you asked for:\n```json\n{"total": {"a": "}"}}\n```\nAnything else?'
    gemini.queue(Reply(body=answer(prose)))

    response = ask(model(gemini, output_mode="prompt"))

    assert response.text == '{"total": {"a": "}"}}'
    seen = gemini.requests[0]
    assert "responseMimeType" not in seen.generation and "tools" not in seen.body
    assert schema_instructions(SCHEMA) in seen.system


def test_a_request_without_a_schema_asks_for_plain_text(gemini: GeminiServer) -> None:
    gemini.queue(Reply(body=answer("Net sales were $26,825.")))
    plain = replace(REQUEST, json_schema=None)

    response = ask(model(gemini, output_mode="prompt"), plain)

    assert response.text == "Net sales were $26,825."
    assert gemini.requests[0].generation == {"temperature": 0.0}
    assert gemini.requests[0].system == "You plan."


def test_a_server_without_json_mode_or_tools_falls_back_to_prompt_and_remembers(
    gemini: GeminiServer,
) -> None:
    gemini.json_mode = gemini.function_calling = False
    gemini.fallback = Reply(body=answer('Sure.\n{"total": 4}'))
    first = model(gemini)

    response = ask(first)

    assert response.text == '{"total": 4}'
    asked = [
        ("json" if "responseMimeType" in seen.generation else "")
        + ("tool" if "tools" in seen.body else "")
        for seen in gemini.requests
    ]
    assert asked == ["json", "tool", "json", ""]  # native, tool, json, prompt: once each
    assert "responseJsonSchema" in gemini.requests[0].generation
    assert "responseJsonSchema" not in gemini.requests[2].generation

    again = model(gemini)  # a new model object for the same server and model
    assert again.output_mode == "prompt"
    ask(again)
    assert len(gemini.requests) == 5
    assert "responseMimeType" not in gemini.requests[4].generation


def test_another_model_on_the_same_server_starts_from_its_own_best(gemini: GeminiServer) -> None:
    gemini.json_mode = gemini.function_calling = False
    gemini.fallback = Reply(body=answer('{"total": 4}'))
    ask(model(gemini))

    other = GeminiModel("gemini-y", api_key=KEY, base_url=gemini.url)

    assert other.output_mode == "native"


def test_a_bad_request_not_about_the_mode_is_not_a_fallback(gemini: GeminiServer) -> None:
    gemini.queue(failure(400, "Request contains an invalid argument: contents is empty."))

    with pytest.raises(ModelError) as raised:
        ask(model(gemini))

    assert raised.value.kind == "bad_request"
    assert "contents is empty" in str(raised.value)
    assert len(gemini.requests) == 1


def test_calls_in_one_loop_share_a_connection_closed_with_the_loop(
    gemini: GeminiServer,
) -> None:
    gemini.fallback = Reply(body=answer('{"total": 1}'))
    target = model(gemini)

    async def twice() -> None:
        await target.complete(REQUEST)
        await target.complete(replace(REQUEST, on_text=lambda piece: None))

    asyncio.run(twice())
    asyncio.run(twice())
    gc.collect()  # an unclosed connection would warn now, and warnings are errors

    ports = [seen.port for seen in gemini.requests]
    assert ports[0] == ports[1] and ports[2] == ports[3] and ports[1] != ports[2]


def test_a_streamed_answer_arrives_in_pieces_with_progress(gemini: GeminiServer) -> None:
    text = '{"total": 123456789}'
    gemini.queue(Reply(body=answer(text, usage=(50, 12))))
    pieces: list[str] = []
    progress: list[tuple[str, int]] = []
    streamed = replace(
        REQUEST, on_text=pieces.append, progress=lambda stage, n: progress.append((stage, n))
    )

    response = ask(model(gemini), streamed)

    assert len(pieces) > 2 and "".join(pieces) == text == response.text
    seen = gemini.requests[0]
    assert seen.path == "/v1beta/models/gemini-x:streamGenerateContent"
    assert seen.query == {"alt": ["sse"]}
    counts = [n for stage, n in progress if stage == "generating"]
    assert len(counts) == len(pieces) and counts == sorted(counts) and counts[-1] == 12
    assert (response.tokens_in, response.tokens_out, response.estimated) == (50, 12, False)


def test_a_stream_without_usage_is_estimated_and_says_so(gemini: GeminiServer) -> None:
    gemini.queue(Reply(body=answer('{"total": 1}', usage=None)))

    response = ask(model(gemini), replace(REQUEST, on_text=lambda piece: None))

    assert response.estimated is True
    assert response.tokens_in > 0 and response.tokens_out > 0


def test_a_streamed_forced_call_sends_its_arguments(gemini: GeminiServer) -> None:
    gemini.queue(Reply(body=call({"total": 5})))
    pieces: list[str] = []

    response = ask(model(gemini, output_mode="tool"), replace(REQUEST, on_text=pieces.append))

    assert [json.loads(piece) for piece in pieces] == [{"total": 5}]
    assert json.loads(response.text) == {"total": 5}


def test_max_tokens_is_a_cut_off_answer(gemini: GeminiServer) -> None:
    gemini.queue(Reply(body=answer('{"total": ', finish="MAX_TOKENS")))

    assert ask(model(gemini)).finish_reason == "length"


def test_thinking_tokens_count_as_output(gemini: GeminiServer) -> None:
    body = answer('{"total": 2}', usage=(10, 4))
    body["usageMetadata"]["thoughtsTokenCount"] = 30
    gemini.queue(Reply(body=body))

    assert ask(model(gemini)).tokens_out == 34


def test_a_rate_limit_waits_what_retry_after_asks_then_succeeds(gemini: GeminiServer) -> None:
    gemini.queue(
        failure(429, "Resource has been exhausted.", retry_after="2"),
        Reply(body=answer('{"total": 1}')),
    )
    sleeps = Sleeps()

    response = ask(model(gemini, sleep=sleeps))

    assert response.text == '{"total": 1}'
    assert sleeps.waits == [2.0] and len(gemini.requests) == 2


def test_a_rate_limit_without_the_header_waits_its_retry_info(gemini: GeminiServer) -> None:
    body = error_body(
        429,
        "You exceeded your current quota.",
        details=[{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "3s"}],
    )
    gemini.queue(Reply(status=429, body=body), Reply(body=answer('{"total": 1}')))
    sleeps = Sleeps()

    ask(model(gemini, sleep=sleeps))

    assert sleeps.waits == [3.0]


def test_a_server_that_keeps_failing_is_a_server_error_after_the_attempts(
    gemini: GeminiServer,
) -> None:
    gemini.fallback = failure(503, "The model is overloaded. Please try again later.")

    with pytest.raises(ModelError) as raised:
        ask(model(gemini, retry=RetryPolicy(attempts=3), sleep=Sleeps()))

    assert raised.value.kind == "server"
    assert "overloaded" in str(raised.value) and "3 attempts" in str(raised.value)
    assert len(gemini.requests) == 3


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (failure(401, "Request had invalid authentication credentials."), "auth"),
        (failure(403, "The caller does not have permission."), "permission"),
        (failure(404, "models/gemini-x is not found for API version v1beta."), "not_found"),
    ],
    ids=["401", "403", "404"],
)
def test_refusals_are_their_kind_and_never_retried(
    gemini: GeminiServer, reply: Reply, kind: str
) -> None:
    gemini.queue(reply)

    with pytest.raises(ModelError) as raised:
        ask(model(gemini, sleep=Sleeps()))

    assert raised.value.kind == kind
    assert KEY not in str(raised.value) and "google:gemini-x" in str(raised.value)
    assert len(gemini.requests) == 1


def test_a_key_the_api_calls_invalid_is_an_auth_error_without_the_key(
    gemini: GeminiServer,
) -> None:
    wrong = "gm-wrong-key-9876543210fedcba"
    target = GeminiModel("gemini-x", api_key=wrong, base_url=gemini.url)

    with pytest.raises(ModelError) as raised:
        ask(target)

    assert raised.value.kind == "auth"
    assert wrong not in str(raised.value) and KEY not in str(raised.value)
    assert "GEMINI_API_KEY" in str(raised.value)


def test_a_server_that_does_not_answer_in_time_is_a_timeout(gemini: GeminiServer) -> None:
    gemini.queue(Reply(stall=True))

    with pytest.raises(ModelTimeoutError) as raised:
        ask(model(gemini, timeout=0.5))

    assert raised.value.kind == "timeout" and "GEMINI_TIMEOUT_SECONDS" in str(raised.value)
    assert len(gemini.requests) == 1


def test_an_unreachable_server_is_retried_then_a_connection_error() -> None:
    with serving() as server:
        url = server.url  # closed once the block ends
    sleeps = Sleeps()
    target = GeminiModel(
        "gemini-x", api_key=KEY, base_url=url, retry=RetryPolicy(attempts=2), sleep=sleeps
    )

    with pytest.raises(ModelError) as raised:
        ask(target)

    assert raised.value.kind == "connection" and url in str(raised.value)
    assert len(sleeps.waits) == 1


def test_the_model_string_resolves_through_the_registry_with_its_connection(
    gemini: GeminiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_GEMINI_KEY", KEY)
    connection = Connection(
        base_url=gemini.url, api_key_env="MY_GEMINI_KEY", headers={"x-route": "eu"}
    )
    gemini.queue(Reply(body=answer('{"total": 1}')))

    resolved = resolve_model("google:gemini-x", connection=connection)
    ask(resolved)  # type: ignore[arg-type]

    assert isinstance(resolved, GeminiModel) and resolved.name == "google:gemini-x"
    assert gemini.requests[0].headers["x-route"] == "eu"
    assert gemini.requests[0].headers["x-goog-api-key"] == KEY


@pytest.mark.parametrize(
    ("variables", "sent"),
    [
        ({"GEMINI_API_KEY": KEY}, KEY),
        ({"GOOGLE_API_KEY": KEY, "GEMINI_API_KEY": "gm-other-key-000000000"}, KEY),
    ],
    ids=["gemini", "google-wins"],
)
def test_the_key_and_base_url_come_from_the_sdk_variables(
    gemini: GeminiServer,
    monkeypatch: pytest.MonkeyPatch,
    variables: dict[str, str],
    sent: str,
) -> None:
    for name, value in {**variables, "GOOGLE_GEMINI_BASE_URL": gemini.url}.items():
        monkeypatch.setenv(name, value)
    gemini.queue(Reply(body=answer('{"total": 1}')))

    ask(google_model("gemini-x"))

    assert gemini.requests[0].headers["x-goog-api-key"] == sent


def test_a_model_string_without_a_model_says_how_to_name_one() -> None:
    with pytest.raises(ConfigError, match=r"google:MODEL"):
        resolve_model("google:")


def test_the_gemini_api_without_a_key_says_which_variable_to_set() -> None:
    with pytest.raises(ConfigError, match="GEMINI_API_KEY is not set"):
        google_model("gemini-x")


def test_a_named_key_variable_that_is_not_set_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="MISSING_GEMINI_KEY"):
        google_model("gemini-x", connection=Connection(api_key_env="MISSING_GEMINI_KEY"))


def test_a_timeout_variable_that_does_not_parse_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GEMINI_TIMEOUT_SECONDS", "soon")
    with pytest.raises(ConfigError, match="GEMINI_TIMEOUT_SECONDS"):
        google_model("gemini-x")
