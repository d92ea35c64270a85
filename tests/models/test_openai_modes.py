"""The openai provider's output modes, streaming progress and usage, against our own server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from stub_servers.openai_server import FakeOpenAI, Reply, completion

from taskdecomp import ModelRequest, run_sync
from taskdecomp.events import Event, ModelCalled, ModelProgress
from taskdecomp.models import Connection, outputs, resolve_model
from taskdecomp.models.base import Stage
from taskdecomp.models.openai import OpenAIModel, RetryPolicy
from tests.clitools import cli
from tests.conftest import SALES_TOOLS
from tests.support import SEED_GOAL, seed_plan

FAST_RETRY = RetryPolicy(attempts=3, backoff_seconds=0.01, max_backoff_seconds=0.05)
PLAN = json.dumps(seed_plan())
ANSWER = "April 2026: gross 28,195 USD, refunds 1,370 USD, net 26,825 USD."
PROSE_PLAN = f"Sure! Here is the plan you asked for:\n\n```json\n{PLAN}\n```\n\nGood luck."
SCHEMA = {
    "type": "object",
    "properties": {"colour": {"type": "string", "enum": ["red", "green"]}},
    "required": ["colour"],
    "additionalProperties": False,
}


def model(server: FakeOpenAI, **kwargs: object) -> OpenAIModel:
    options: dict[str, object] = {"timeout": 5.0, "retry": FAST_RETRY, **kwargs}
    return OpenAIModel("fake-model", base_url=server.url, **options)  # type: ignore[arg-type]


def ok(content: str | None, **kwargs: object) -> Reply:
    return Reply(body=completion(content, **kwargs))  # type: ignore[arg-type]


def asked(
    *,
    on_text: list[str] | None = None,
    progress: list[tuple[Stage, int]] | None = None,
    schema: dict[str, object] | None = SCHEMA,
) -> ModelRequest:
    return ModelRequest(
        phase="plan",
        messages=(
            {"role": "system", "content": "You pick colours."},
            {"role": "user", "content": "Pick one."},
        ),
        json_schema=schema,
        schema_name="colour",
        on_text=on_text.append if on_text is not None else None,
        progress=(lambda stage, tokens: progress.append((stage, tokens)))
        if progress is not None
        else None,
    )


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
def test_a_server_with_no_json_mode_and_no_tools_works_with_no_flag(
    fake_openai: FakeOpenAI, streamed: bool
) -> None:
    fake_openai.refuse_response_format = fake_openai.refuse_tools = True
    fake_openai.queue(ok(PROSE_PLAN), ok(ANSWER), ok(PROSE_PLAN), ok(ANSWER))
    chosen = model(fake_openai)

    first = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=chosen, stream_plan=streamed)
    second = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=chosen, stream_plan=streamed)

    assert (first.stop_reason, second.stop_reason) == ("success", "success"), first.message
    assert first.answer == ANSWER
    assert [step.tool for step in first.plan.steps] == [s["tool"] for s in seed_plan()["steps"]]
    # each mode once down to prompt, then the remembered mode at once
    assert fake_openai.modes() == ["native", "tool", "json", "prompt", "prompt"]
    prompt_request = fake_openai.plan_requests()[-1]
    assert "response_format" not in prompt_request and "tools" not in prompt_request
    system = prompt_request["messages"][0]["content"]
    assert system.startswith("You are")  # the planner's own prompt, then the schema
    assert "matching this JSON schema" in system
    assert chosen.output_mode == "prompt"


def test_a_remembered_mode_is_where_the_next_call_starts(fake_openai: FakeOpenAI) -> None:
    fake_openai.refuse_response_format = True
    fake_openai.queue(ok(None, tool_arguments='{"colour": "red"}'))
    fake_openai.queue(ok(None, tool_arguments='{"colour": "green"}'))

    first = asyncio.run(model(fake_openai).complete(asked()))
    second = asyncio.run(model(fake_openai).complete(asked()))  # a new object, same server

    assert (first.text, second.text) == ('{"colour": "red"}', '{"colour": "green"}')
    assert fake_openai.modes() == ["native", "tool", "tool"]
    assert outputs.MEMORY.first(("openai", fake_openai.url, "fake-model"), "native") == "tool"


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
def test_tool_mode_takes_the_calls_arguments_as_the_answer(
    fake_openai: FakeOpenAI, streamed: bool
) -> None:
    arguments = '{"colour": "green"}'
    fake_openai.queue(ok("I will call the tool.", tool_arguments=arguments))
    pieces: list[str] = []

    response = asyncio.run(
        model(fake_openai, output_mode="tool").complete(asked(on_text=pieces if streamed else None))
    )

    assert response.text == arguments
    (request,) = fake_openai.requests
    assert request["tools"][0]["function"]["parameters"] == SCHEMA
    assert request["tools"][0]["function"]["strict"] is True  # the schema allows it
    assert request.get("stream", False) is streamed
    if streamed:
        assert len(pieces) > 1 and "".join(pieces) == arguments  # the arguments, not prose


def test_tool_mode_reads_json_from_text_when_the_server_ignores_the_tool(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.queue(ok('The answer: {"colour": "red"} as asked.'))

    response = asyncio.run(model(fake_openai, output_mode="tool").complete(asked()))

    assert response.text == '{"colour": "red"}'


def test_prompt_mode_streams_from_the_first_bracket_and_answers_the_json(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.queue(ok('Here you go:\n```json\n{"colour": "red"}\n```'))
    pieces: list[str] = []

    response = asyncio.run(model(fake_openai, output_mode="prompt").complete(asked(on_text=pieces)))

    assert response.text == '{"colour": "red"}'
    assert "".join(pieces).startswith('{"colour"')
    (request,) = fake_openai.requests
    assert "response_format" not in request and "tools" not in request
    assert request["messages"][0]["content"].startswith("You pick colours.\n\n")


def test_a_request_without_a_schema_is_sent_as_before(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(ok(ANSWER))

    response = asyncio.run(model(fake_openai, output_mode="prompt").complete(asked(schema=None)))

    assert response.text == ANSWER
    (request,) = fake_openai.requests
    assert [m["content"] for m in request["messages"]] == ["You pick colours.", "Pick one."]
    assert outputs.MEMORY.first(("openai", fake_openai.url, "fake-model"), "native") == "native"


def test_a_streamed_call_reports_growing_token_counts(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(ok(PLAN))
    progress: list[tuple[Stage, int]] = []

    response = asyncio.run(
        model(fake_openai).complete(asked(on_text=[], progress=progress, schema=None))
    )

    assert response.text == PLAN
    counts = [tokens for stage, tokens in progress]
    assert {stage for stage, _ in progress} == {"generating"}
    assert len(counts) > 10 and counts == sorted(set(counts)) and counts[0] == 1


def test_a_streamed_plan_shows_tokens_as_they_come_in_the_runs_events(
    fake_openai: FakeOpenAI,
) -> None:
    # a pause between chunks, so the throttled progress events see the count grow
    fake_openai.queue(Reply(body=completion(PLAN), pause=0.03), ok(ANSWER))
    events: list[Event] = []

    result = run_sync(
        SEED_GOAL, tools=SALES_TOOLS, model=model(fake_openai), on_event=events.append
    )

    assert result.stop_reason == "success"
    plan_progress = [
        e.tokens_out
        for e in events
        if isinstance(e, ModelProgress) and e.phase == "plan" and e.stage == "generating"
    ]
    assert len(plan_progress) >= 2 and plan_progress == sorted(plan_progress)
    assert plan_progress[-1] > plan_progress[0] > 0


@pytest.mark.parametrize("usage", [True, False], ids=["server-usage", "no-usage"])
def test_usage_is_marked_estimated_only_when_the_server_sent_none(
    fake_openai: FakeOpenAI, usage: bool
) -> None:
    tokens = (300, 90) if usage else None
    fake_openai.queue(ok(PLAN, tokens=tokens), ok(ANSWER, tokens=(500, 30)))
    events: list[Event] = []

    result = run_sync(
        SEED_GOAL, tools=SALES_TOOLS, model=model(fake_openai), on_event=events.append
    )

    assert result.stop_reason == "success"
    assert fake_openai.requests[0]["stream"] is True
    plan_called, combine_called = [e for e in events if isinstance(e, ModelCalled)]
    assert plan_called.estimated is not usage
    assert combine_called.estimated is False
    assert result.usage.estimated is not usage
    assert result.to_dict()["usage"]["estimated"] is not usage
    if usage:
        assert plan_called.tokens_in == 300


def test_estimated_is_set_on_an_unstreamed_answer_without_usage(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(ok('{"colour": "red"}', tokens=None), ok('{"colour": "red"}'))

    without = asyncio.run(model(fake_openai).complete(asked()))
    counted = asyncio.run(model(fake_openai).complete(asked()))

    assert without.estimated and without.tokens_in > 0
    assert not counted.estimated and counted.tokens_in == 120


def test_a_connection_names_the_first_mode(fake_openai: FakeOpenAI) -> None:
    built = resolve_model(
        "openai:fake-model", connection=Connection(base_url=fake_openai.url, output_mode="json")
    )

    assert isinstance(built, OpenAIModel) and built.output_mode == "json"
    with pytest.raises(Exception, match="unknown output mode 'xml'"):
        Connection(output_mode="xml")  # type: ignore[arg-type]


def answer_in(mode: str) -> Reply:
    return ok(None, tool_arguments=PLAN) if mode == "tool" else ok(PLAN)


@pytest.mark.parametrize("mode", outputs.MODES)
def test_each_mode_can_be_forced_from_the_command_line(
    fake_openai: FakeOpenAI, capsys: pytest.CaptureFixture[str], tmp_path: Path, mode: str
) -> None:
    fake_openai.queue(answer_in(mode), ok(ANSWER))
    db = f"sqlite:///{tmp_path / 'runs.db'}"

    code, out, err = cli(
        capsys, "run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", "openai:fake-model",
        "--base-url", fake_openai.url, "--output-mode", mode, "--json", "--db", db,
    )  # fmt: skip

    assert code == 0, err
    assert json.loads(out)["stop_reason"] == "success"
    assert fake_openai.modes() == [mode]


def test_the_output_mode_comes_from_the_environment_too(
    fake_openai: FakeOpenAI,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TASKDECOMP_OUTPUT_MODE", "prompt")
    fake_openai.queue(ok(PROSE_PLAN), ok(ANSWER))

    code, out, err = cli(
        capsys, "run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", "openai:fake-model",
        "--base-url", fake_openai.url, "--json", "--db", f"sqlite:///{tmp_path / 'runs.db'}",
    )  # fmt: skip

    assert code == 0, err
    assert json.loads(out)["stop_reason"] == "success"
    assert fake_openai.modes() == ["prompt"]


def test_output_mode_with_a_model_that_connects_nowhere_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = tmp_path / "plan.json"
    script.write_text("[]")

    code, _, err = cli(
        capsys, "run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", f"scripted:{script}",
        "--output-mode", "tool",
    )  # fmt: skip

    assert code == 2
    assert "--output-mode applies to models of a provider that asks for structured" in err
