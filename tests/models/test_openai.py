"""The openai provider against an OpenAI-compatible HTTP server of our own that misbehaves."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
from stub_servers.openai_server import FakeOpenAI, Reply, completion, error_body

from taskdecomp import Budget, ConfigError, ModelError, ModelRequest, ModelTimeoutError, run_sync
from taskdecomp.models import prices
from taskdecomp.models.openai import OpenAIModel, RetryPolicy, openai_model
from taskdecomp.settings import OpenAISettings
from tests.conftest import SALES_TOOLS
from tests.support import SEED_GOAL, seed_plan

FAST_RETRY = RetryPolicy(attempts=3, backoff_seconds=0.01, max_backoff_seconds=0.05)
PLAN = json.dumps(seed_plan())
ANSWER = "April 2026: gross 28,195 USD, refunds 1,370 USD, net 26,825 USD."


def model(server: FakeOpenAI, **kwargs: object) -> OpenAIModel:
    options: dict[str, object] = {"timeout": 5.0, "retry": FAST_RETRY, **kwargs}
    return OpenAIModel("fake-model", base_url=server.url, **options)  # type: ignore[arg-type]


def ok(content: str, **kwargs: object) -> Reply:
    return Reply(body=completion(content, **kwargs))  # type: ignore[arg-type]


def test_a_full_run_succeeds_and_reports_the_servers_token_counts(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.queue(ok(PLAN, tokens=(300, 90)), ok(ANSWER, tokens=(500, 30)))

    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model(fake_openai))

    assert result.stop_reason == "success"
    assert result.answer == ANSWER
    assert [step.tool for step in result.plan.steps] == [s["tool"] for s in seed_plan()["steps"]]
    assert result.usage.llm_calls == 2
    assert (result.usage.tokens_in, result.usage.tokens_out) == (800, 120)
    assert result.usage.cost_usd is None  # a model the price table does not know


def test_the_plan_request_carries_the_plan_schema_and_the_combine_call_does_not(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.queue(ok(PLAN), ok(ANSWER))

    run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model(fake_openai))

    plan_request, combine_request = fake_openai.requests
    response_format = plan_request["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["name"] == "plan"
    assert response_format["json_schema"]["strict"] is False  # depends_on stays optional
    first_step = response_format["json_schema"]["schema"]["$defs"]["step_1"]
    tools = {variant["properties"]["tool"]["enum"][0] for variant in first_step["anyOf"]}
    assert tools == {s["tool"] for s in seed_plan()["steps"]}
    assert plan_request["model"] == "fake-model"
    assert plan_request["temperature"] == 0
    assert "response_format" not in combine_request


def test_a_server_that_refuses_json_schema_is_asked_with_a_forced_tool_call(
    fake_openai: FakeOpenAI,
) -> None:
    rejected = Reply(
        status=422, body=error_body("response_format.type: input should be json_object")
    )
    arguments = Reply(body=completion(None, tool_arguments=PLAN))
    fake_openai.queue(rejected, arguments, ok(ANSWER), arguments, ok(ANSWER))
    chosen = model(fake_openai)

    first = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=chosen, stream_plan=False)
    second = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=chosen, stream_plan=False)

    assert (first.stop_reason, second.stop_reason) == ("success", "success")
    assert fake_openai.modes() == ["native", "tool", "tool"]  # remembered: no second probe
    native, tool, _ = fake_openai.plan_requests()
    assert tool["tools"][0]["function"]["name"] == "answer"
    assert (
        tool["tools"][0]["function"]["parameters"]
        == native["response_format"]["json_schema"]["schema"]
    )
    assert tool["tool_choice"] == {"type": "function", "function": {"name": "answer"}}
    assert chosen.output_mode == "tool"


def test_a_bad_request_that_is_not_about_the_mode_ends_with_llm_error(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.fallback = Reply(status=400, body=error_body("messages: too long"))
    chosen = model(fake_openai)

    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=chosen)

    assert result.stop_reason == "llm_error:bad_request"
    assert "messages: too long" in (result.message or "")
    assert fake_openai.modes() == ["native"]  # not about the mode: no other mode would do
    assert chosen.output_mode == "native"


def test_a_500_that_names_response_format_falls_back_at_once_and_is_remembered(
    fake_openai: FakeOpenAI,
) -> None:
    # llama-cpp-python's server: an unknown response_format type fails its request
    # validation, which its error handler turns into a 500.
    refused = Reply(
        status=500,
        body=error_body(
            "1 validation error: {'type': 'literal_error', 'loc': ('body', 'response_format', "
            "'type'), 'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}"
        ),
    )
    arguments = Reply(body=completion(None, tool_arguments=PLAN))
    fake_openai.queue(refused, arguments, ok(ANSWER), arguments, ok(ANSWER))

    first = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model(fake_openai))
    again = model(fake_openai)  # another object for the same server
    second = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=again)

    assert (first.stop_reason, second.stop_reason) == ("success", "success")
    assert len(fake_openai.requests) == 5  # no retries of the refused mode, no second probe
    assert fake_openai.modes() == ["native", "tool", "tool"]
    assert again.output_mode == "tool"
    other_model = OpenAIModel("other-model", base_url=fake_openai.url)
    assert other_model.output_mode == "native"  # remembered per server and model


def test_a_busy_server_after_a_fallback_is_retried_in_the_mode_reached(
    fake_openai: FakeOpenAI,
) -> None:
    refused = Reply(status=500, body=error_body("response_format: unknown type json_schema"))
    busy = Reply(status=503, body=error_body("busy"), headers={"retry-after": "0"})
    arguments = Reply(body=completion(None, tool_arguments=PLAN))
    fake_openai.queue(refused, busy, arguments, ok(ANSWER))

    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model(fake_openai))

    assert result.stop_reason == "success"
    assert fake_openai.modes() == ["native", "tool", "tool"]


def test_a_500_is_a_refusal_of_a_mode_only_when_it_names_what_the_mode_sent(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.fallback = Reply(status=500, body=error_body("bad json_schema in response_format"))

    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model(fake_openai))

    assert result.stop_reason == "llm_error:server"
    # native sent a response_format: refused; tool mode sends none, so its 500 is a
    # failing server, retried in that mode until the attempts are spent
    assert fake_openai.modes() == ["native", "tool", "tool", "tool"]
    assert "bad json_schema" in (result.message or "")


@pytest.mark.parametrize(
    ("raw", "content_type", "shown"),
    [
        (b"<!DOCTYPE html>\n<html><body>Welcome to nginx!</body></html>", "text/html", "text/html"),
        (json.dumps(completion(PLAN)).encode()[:70], "application/json", "application/json"),
        (b'{"status": "ok"}', "application/json", "application/json"),
        (b"", "", "no content type"),
    ],
    ids=["html", "cut-off-json", "not-a-completion", "empty"],
)
def test_a_200_that_is_not_a_chat_completion_ends_with_llm_error_bad_response(
    fake_openai: FakeOpenAI, raw: bytes, content_type: str, shown: str
) -> None:
    fake_openai.fallback = Reply(raw=raw, content_type=content_type)

    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model(fake_openai))

    assert result.stop_reason == "llm_error:bad_response"
    assert result.llm_phase == "plan"
    assert len(fake_openai.requests) == 1  # not retried
    message = result.message or ""
    assert shown in message and "--base-url" in message and "\n" not in message


def test_a_stalled_server_ends_the_run_with_llm_timeout_without_retrying(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.queue(Reply(stall=True))  # it never answers: only the timeout ends the call

    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model(fake_openai, timeout=0.5))

    assert result.stop_reason == "llm_timeout"
    assert result.llm_phase == "plan"
    assert "OPENAI_TIMEOUT_SECONDS" in (result.message or "")
    assert len(fake_openai.requests) == 1


def test_429_then_200_is_retried_and_succeeds(fake_openai: FakeOpenAI) -> None:
    limited = Reply(status=429, body=error_body("slow down"), headers={"retry-after": "0"})
    fake_openai.queue(limited, ok(PLAN), ok(ANSWER))

    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model(fake_openai))

    assert result.stop_reason == "success"
    assert len(fake_openai.requests) == 3
    assert fake_openai.requests[0] == fake_openai.requests[1]


def test_insufficient_quota_is_not_retried(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(Reply(status=429, body=error_body("no money", code="insufficient_quota")))

    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model(fake_openai))

    assert result.stop_reason == "llm_error:quota"
    assert len(fake_openai.requests) == 1


def test_a_failing_server_is_retried_then_ends_with_llm_error_server(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.fallback = Reply(status=500, body=error_body("boom"))

    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model(fake_openai))

    assert result.stop_reason == "llm_error:server"
    assert result.llm_phase == "plan"
    assert len(fake_openai.requests) == FAST_RETRY.attempts
    assert "boom" in (result.message or "")


def test_retries_stop_at_the_runs_deadline(fake_openai: FakeOpenAI) -> None:
    fake_openai.fallback = Reply(status=503, body=error_body("busy"))
    # a thousand tries wait half a minute at least: retries that ignored the deadline would
    # end with llm_error:server after them, not with max_seconds
    patient = RetryPolicy(attempts=1000, backoff_seconds=0.05, max_backoff_seconds=0.05)

    result = run_sync(
        SEED_GOAL,
        tools=SALES_TOOLS,
        model=model(fake_openai, retry=patient),
        budget=Budget(max_seconds=1),
    )

    assert result.stop_reason == "max_seconds"
    assert 2 <= len(fake_openai.requests) < 1000


def test_a_refused_key_ends_with_llm_error_auth_and_never_shows_the_key(
    fake_openai: FakeOpenAI,
) -> None:
    key = "sk-test-very-secret-0123456789"
    fake_openai.queue(Reply(status=401, body=error_body(f"Incorrect API key provided: {key}")))

    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model(fake_openai, api_key=key))

    assert result.stop_reason == "llm_error:auth"
    assert len(fake_openai.requests) == 1
    assert fake_openai.headers[0]["authorization"] == f"Bearer {key}"
    assert "OPENAI_API_KEY" in (result.message or "")
    assert key not in json.dumps(result.to_dict())


def test_an_unknown_model_names_the_fix(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(Reply(status=404, body=error_body("model 'fake-model' not found")))

    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model(fake_openai))

    assert result.stop_reason == "llm_error:not_found"
    assert "--model" in (result.message or "")


def test_an_answer_cut_off_by_the_length_limit_is_never_parsed(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(ok(PLAN[:40], finish_reason="length"))

    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model(fake_openai))

    assert result.stop_reason == "invalid_plan:truncated"
    assert result.plan is None
    assert result.trace == ()


def test_truncated_json_that_claims_to_be_complete_is_non_json(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(ok(PLAN[:40]))

    result = run_sync(
        SEED_GOAL, tools=SALES_TOOLS, model=model(fake_openai), budget=Budget(repairs=0)
    )

    assert result.stop_reason == "invalid_plan:non_json"
    assert result.raw_plan == PLAN[:40]


def test_an_unreachable_server_is_retried_then_ends_with_llm_error_connection() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before the call: nothing listens
    unreachable = OpenAIModel(
        "fake-model", base_url=f"http://127.0.0.1:{port}/v1", timeout=2, retry=FAST_RETRY
    )

    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=unreachable)

    assert result.stop_reason == "llm_error:connection"
    assert "--base-url" in (result.message or "")


def test_reported_tokens_count_against_max_tokens(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(ok(PLAN, tokens=(5000, 100)), ok(ANSWER))

    result = run_sync(
        SEED_GOAL, tools=SALES_TOOLS, model=model(fake_openai), budget=Budget(max_tokens=4000)
    )

    assert result.stop_reason == "max_tokens"
    assert result.usage.tokens_in == 5000
    assert len(fake_openai.requests) == 1


def test_complete_raises_the_errors_the_engine_maps(fake_openai: FakeOpenAI) -> None:
    request = ModelRequest(phase="finalize", messages=({"role": "user", "content": "hi"},))
    fake_openai.queue(Reply(stall=True))
    with pytest.raises(ModelTimeoutError):
        asyncio.run(model(fake_openai, timeout=0.3).complete(request))
    fake_openai.released.set()
    fake_openai.queue(Reply(status=418, body=error_body("teapot")))
    with pytest.raises(ModelError) as raised:
        asyncio.run(model(fake_openai).complete(request))
    assert raised.value.kind == "http_418"


def test_openai_itself_needs_a_key() -> None:
    with pytest.raises(ConfigError, match="OPENAI_API_KEY is not set"):
        OpenAIModel("gpt-4.1-mini")


def test_openai_model_reads_the_openai_settings(fake_openai: FakeOpenAI) -> None:
    settings = OpenAISettings(
        api_key="sk-abc",  # type: ignore[arg-type]
        model="gpt-4.1-nano",
        base_url=fake_openai.url,
        timeout_seconds=7,
    )

    built = openai_model("", settings=settings)
    overridden = openai_model("other", base_url="http://127.0.0.1:1/v1", settings=settings)

    assert built.name == "openai:gpt-4.1-nano"
    assert built.base_url == fake_openai.url
    assert overridden.name == "openai:other"
    assert overridden.base_url == "http://127.0.0.1:1/v1"
    assert "sk-abc" not in repr(built) + repr(settings)


def test_retry_delay_doubles_caps_and_honours_retry_after() -> None:
    policy = RetryPolicy(attempts=5, backoff_seconds=1, max_backoff_seconds=3)

    assert 0.5 <= policy.delay(1) <= 1
    assert 1 <= policy.delay(2) <= 2
    assert 1.5 <= policy.delay(5) <= 3
    assert policy.delay(1, retry_after=2.5) == 2.5
    assert policy.delay(1, retry_after=60) == 3


def test_the_first_output_mode_can_be_chosen(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(ok(PLAN), ok(ANSWER))
    chosen = model(fake_openai, output_mode="json")

    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=chosen)

    assert result.stop_reason == "success"
    (plan_request,) = fake_openai.plan_requests()
    assert plan_request["response_format"]["type"] == "json_object"
    schema = plan_request["response_format"]["schema"]
    assert schema["$defs"]["step_1"]
    system = plan_request["messages"][0]
    assert system["role"] == "system"
    assert system["content"].endswith(json.dumps(schema, separators=(",", ":")))
    with pytest.raises(ConfigError, match="unknown output mode 'xml': pick one of native"):
        model(fake_openai, output_mode="xml")


def test_the_same_model_costs_the_same_whatever_the_server(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(ok(PLAN, tokens=(300, 90)), ok(ANSWER, tokens=(500, 30)))
    proxied = OpenAIModel("gpt-4.1-mini", base_url=fake_openai.url, timeout=5, retry=FAST_RETRY)
    billed = OpenAIModel("gpt-4.1-mini", api_key="sk-test")

    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=proxied, stream_plan=False)

    assert result.stop_reason == "success"
    expected = prices.cost_usd("openai", "gpt-4.1-mini", 800, 120)
    assert expected is not None and expected > 0
    assert result.usage.cost_usd == pytest.approx(expected)
    assert proxied.estimate_cost(1_000_000) == billed.estimate_cost(1_000_000) > 0
    assert model(fake_openai).estimate_cost(1_000_000) is None  # a model with no known price


def test_the_plan_and_the_answer_stream_when_the_run_listens(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.queue(ok(PLAN, tokens=(300, 90)), ok(ANSWER), ok(PLAN), ok(ANSWER))

    streamed = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model(fake_openai))
    plain = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model(fake_openai), stream_plan=False)

    assert streamed.ok and plain.ok and streamed.answer == plain.answer == ANSWER
    assert streamed.plan == plain.plan
    plan_request, combine_request, plain_plan, _ = fake_openai.requests
    assert plan_request["stream"] is True
    assert plan_request["stream_options"] == {"include_usage": True}
    assert combine_request["stream"] is True  # its pieces are AnswerDelta events
    assert "stream" not in plain_plan
    assert streamed.usage.tokens_in == 300 + 120  # the usage chunk's count, then the combine's


def test_complete_hands_every_piece_to_on_text_in_order(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(ok(PLAN))
    pieces: list[str] = []
    request = ModelRequest(
        phase="plan", messages=({"role": "user", "content": "plan"},), on_text=pieces.append
    )

    response = asyncio.run(model(fake_openai).complete(request))

    assert len(pieces) > 10 and "".join(pieces) == response.text == PLAN
    assert response.finish_reason == "stop"


def test_a_stream_cut_after_its_first_pieces_is_not_asked_again(fake_openai: FakeOpenAI) -> None:
    # the listener (the steps that start early) already heard part of the plan: a second
    # attempt would make it hear the plan twice
    fake_openai.queue(Reply(body=completion(PLAN), cut_after=30), ok(PLAN), ok(ANSWER))

    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model(fake_openai))

    assert result.stop_reason == "llm_error:connection"
    assert "peer closed connection" in (result.message or "")
    assert len(fake_openai.requests) == 1


def test_a_stream_refused_before_its_first_piece_is_asked_again(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(Reply(status=503, body=error_body("busy")), ok(PLAN), ok(ANSWER))

    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model(fake_openai))

    assert result.stop_reason == "success"
    assert len(fake_openai.requests) == 3
