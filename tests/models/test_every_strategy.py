"""Every strategy on every provider, through its official SDK, against a server of ours.

Each provider meets a server that speaks its wire protocol on 127.0.0.1: OpenAI's Chat
Completions (``fake_openai``), the same with no ``response_format`` and no tools accepted
(so answers come in prose with a code fence), Anthropic's Messages API, the Gemini API,
and a named host (``groq``) through the Chat Completions server. Every server answers with
the same :class:`~stub_servers.responder.Responder`, by what each request is, so the tree's
concurrent calls are answered right in whatever order they come. ``plan_execute``,
``replan``, ``tree`` (from a goal, decomposed as needed) and a workflow each end in success
with the answer the tools' results give. So do typed answers (a pydantic model, and a
closed JSON schema asked in the provider's best mode) and answers repaired once (a plan, a
replan's plan, the tree's actions); an answer that keeps breaking its rule stops the run
with that rule once the repairs are spent. The tree also runs once per provider through
the command line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from stub_servers import anthropic_server, gemini_server
from stub_servers.openai_server import FakeOpenAI
from stub_servers.responder import ANSWER, GOAL, KPIS, REPORT, Phase, Responder

from taskdecomp import Budget, run_sync
from taskdecomp.models import Connection, Model, resolve_model
from taskdecomp.run import RunResult
from taskdecomp.strategies.workflow.api import run_workflow_sync
from tests.clitools import cli
from tests.conftest import SALES_TOOLS

GROQ_KEY = "gsk-test-0123456789abcdef"
OPENAI_KEY = "sk-test-0123456789abcdef"
PROVIDERS = ("openai", "openai-prompt", "anthropic", "google", "groq")


@dataclass
class Stub:
    """A provider's model string and the server of ours it reaches."""

    kind: str
    """Which of :data:`PROVIDERS` it is."""
    spec: str
    url: str
    responder: Responder
    secret: str
    modes: Callable[[], list[str]]
    """The output mode of each structured request the server was sent, in order."""

    def model(self) -> Model:
        return resolve_model(self.spec, connection=Connection(base_url=self.url, timeout=10))


def _openai(kind: str, spec: str, key: str) -> Iterator[Stub]:
    server = FakeOpenAI()
    server.refuse_response_format = server.refuse_tools = kind == "openai-prompt"
    server.responder = Responder()
    server.start()
    try:
        yield Stub(kind, spec, server.url, server.responder, key, server.modes)
    finally:
        server.stop()


def _anthropic() -> Iterator[Stub]:
    for server in anthropic_server.serve():
        server.responder = Responder()
        yield Stub(
            "anthropic",
            "anthropic:claude-x",
            server.url,
            server.responder,
            server.key,
            server.modes,
        )


def _google() -> Iterator[Stub]:
    with gemini_server.serving() as server:
        server.responder = Responder()
        yield Stub(
            "google",
            "google:gemini-x",
            server.url,
            server.responder,
            gemini_server.KEY,
            server.modes,
        )


@pytest.fixture(params=PROVIDERS)
def stub(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stub]:
    """Each provider against its server, its key exported as a user would."""
    for name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "GOOGLE_GEMINI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", anthropic_server.KEY)
    monkeypatch.setenv("GEMINI_API_KEY", gemini_server.KEY)
    monkeypatch.setenv("GROQ_API_KEY", GROQ_KEY)
    provider: str = request.param
    if provider in ("openai", "openai-prompt"):
        yield from _openai(provider, "openai:gpt-x", OPENAI_KEY)
    elif provider == "groq":
        yield from _openai(provider, "groq:llama-x", GROQ_KEY)
    elif provider == "anthropic":
        yield from _anthropic()
    else:
        yield from _google()


def succeeded(result: RunResult, stub: Stub) -> None:
    assert (result.status, result.stop_reason) == ("ok", "success"), result.message
    assert stub.secret not in json.dumps(result.to_dict())


def run(stub: Stub, strategy: str, **kwargs: Any) -> RunResult:
    return run_sync(GOAL, tools=SALES_TOOLS, model=stub.model(), strategy=strategy, **kwargs)


STRATEGIES = ("plan_execute", "replan", "tree")


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_each_strategy_answers_from_the_tools_results(stub: Stub, strategy: str) -> None:
    result = run(stub, strategy)

    succeeded(result, stub)
    assert result.answer == ANSWER
    if stub.kind == "openai-prompt":  # each refused mode tried once, then prompt remembered
        assert stub.modes()[:3] == ["native", "tool", "json"]
        assert set(stub.modes()[3:]) == {"prompt"}


def test_a_workflow_writes_its_report(stub: Stub, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "report.prompt.md").write_text("Compute the KPIs and write them to report.md.\n")
    flow = tmp_path / "report.yaml"
    flow.write_text(
        "workflow: {name: report, start: write_report}\n"
        "phases:\n"
        "  write_report:\n"
        "    prompt: report.prompt.md\n"
        "    type: execute\n"
        "    description: Write the month's KPIs to report.md\n"
        "    allowed_writes: [report.md]\n"
        "    transitions: [{to: done, auto: true}]\n"
        "  done: {type: terminal}\n"
    )

    result = run_workflow_sync(flow, workspace=workspace, model=stub.model(), tools=SALES_TOOLS)

    succeeded(result, stub)
    assert (workspace / REPORT).read_text() == ANSWER


class Kpis(BaseModel):
    gross_sales_usd: float
    refunds_usd: float
    net_sales_usd: float


CLOSED = {
    "type": "object",
    "properties": {name: {"type": "number"} for name in KPIS},
    "required": list(KPIS),
    "additionalProperties": False,
}
"""The KPIs as a JSON schema every provider's server can enforce natively."""
BEST = {"openai": "native", "openai-prompt": "prompt", "anthropic": "native"}
"""The mode a typed answer under :data:`CLOSED` is asked in; ``native`` when not named."""


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_typed_answer_comes_back_as_its_type(stub: Stub, strategy: str) -> None:
    result = run(stub, strategy, output_type=Kpis)

    succeeded(result, stub)
    assert result.output == Kpis(**KPIS)
    assert result.answer is not None and json.loads(result.answer) == KPIS


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_json_schema_answer_is_asked_in_the_providers_best_mode(
    stub: Stub, strategy: str
) -> None:
    result = run(stub, strategy, output_type=CLOSED)

    succeeded(result, stub)
    assert result.output == KPIS
    assert stub.modes()[-1] == BEST.get(stub.kind, "native")  # the combine call is the last


@pytest.mark.parametrize(
    ("strategy", "breaks", "repairs"),
    [
        ("plan_execute", {"plan"}, 1),
        ("replan", {"replan_plan"}, 1),
        ("tree", {"execute"}, 2),  # each of the two leaves' first action
    ],
)
def test_an_answer_that_breaks_a_rule_is_repaired(
    stub: Stub, strategy: str, breaks: set[Phase], repairs: int
) -> None:
    stub.responder.breaks = frozenset(breaks)

    result = run(stub, strategy, budget=Budget(repairs=1))

    succeeded(result, stub)
    assert result.answer == ANSWER and result.usage.repairs == repairs


def test_an_answer_that_keeps_breaking_the_rule_stops_the_run(stub: Stub) -> None:
    stub.responder.breaks = frozenset({"plan"})
    stub.responder.stubborn = True

    result = run(stub, "plan_execute", budget=Budget(repairs=2))

    assert result.stop_reason == "invalid_plan:tool_not_allowed:delete_refunds"
    assert result.usage.repairs == 2


def test_the_tree_runs_through_the_command_line(
    stub: Stub, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = cli(
        capsys, "run", GOAL, "--strategy", "tree", "--tools", str(SALES_TOOLS),
        "--model", stub.spec, "--base-url", stub.url, "--json",
        "--db", f"sqlite:///{tmp_path / 'runs.db'}",
    )  # fmt: skip

    assert code == 0, err
    result = json.loads(out)
    assert (result["status"], result["stop_reason"], result["answer"]) == ("ok", "success", ANSWER)
    assert stub.secret not in out + err
