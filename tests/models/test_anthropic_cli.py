"""Whole runs through the command line on the anthropic provider, against our Messages API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from stub_servers.anthropic_server import AnthropicServer, fail, ok, serve

from tests.clitools import cli
from tests.conftest import SALES_TOOLS
from tests.support import SEED_GOAL, seed_plan

ANSWER = "April 2026: gross 28,195 USD, refunds 1,370 USD, net 26,825 USD."


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[AnthropicServer]:
    """A server whose key is in ``ANTHROPIC_API_KEY``, as a user would export it."""
    for name in ("MODEL", "BASE_URL", "TIMEOUT_SECONDS", "AUTH_TOKEN"):
        monkeypatch.delenv(f"ANTHROPIC_{name}", raising=False)
    for running in serve():
        monkeypatch.setenv("ANTHROPIC_API_KEY", running.key)
        yield running


def run(capsys: pytest.CaptureFixture[str], server: AnthropicServer, *extra: str) -> Any:
    code, out, err = cli(
        capsys, "run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", "anthropic:claude-x",
        "--base-url", server.url, "--json", *extra,
    )  # fmt: skip
    assert "Traceback" not in err
    result = json.loads(out)
    result["exit_code"] = code
    return result


def test_plan_execute_runs_on_claude_through_the_command_line(
    capsys: pytest.CaptureFixture[str], server: AnthropicServer
) -> None:
    server.queue(ok(tool_input=seed_plan(), tokens=(300, 90)), ok(text=ANSWER, tokens=(500, 30)))

    result = run(capsys, server)

    assert (result["exit_code"], result["status"], result["stop_reason"]) == (0, "ok", "success")
    assert result["answer"] == ANSWER
    assert (result["usage"]["tokens_in"], result["usage"]["tokens_out"]) == (800, 120)
    assert server.requests[0]["tool_choice"] == {"type": "tool", "name": "answer"}
    assert server.key not in json.dumps(result)


def test_replan_runs_on_claude_through_the_command_line(
    capsys: pytest.CaptureFixture[str], server: AnthropicServer
) -> None:
    server.queue(
        ok(tool_input=seed_plan()),
        ok(tool_input={"answer": {"kind": "respond", "response": ANSWER}}),
    )

    result = run(capsys, server, "--strategy", "replan")

    assert (result["exit_code"], result["status"], result["stop_reason"]) == (0, "ok", "success")
    assert result["answer"] == ANSWER
    assert len(server.requests) == 2 and "tools" in server.requests[1]


def test_a_refused_key_stops_the_run_with_llm_error_auth(
    capsys: pytest.CaptureFixture[str], server: AnthropicServer
) -> None:
    server.fallback = fail(401, f"invalid x-api-key {server.key}")

    result = run(capsys, server)

    assert (result["exit_code"], result["stop_reason"]) == (1, "llm_error:auth")
    assert result["llm_phase"] == "plan" and server.key not in json.dumps(result)
