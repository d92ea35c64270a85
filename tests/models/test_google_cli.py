"""Whole runs on a Gemini model through the command line, against a Gemini API server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stub_servers.gemini_server import KEY, GeminiServer, Reply, answer, serving

from taskdecomp.models.outputs import MEMORY
from tests.clitools import cli
from tests.conftest import SALES_TOOLS
from tests.support import SEED_GOAL, seed_plan

MONTH = {"month": "2026-04"}


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GEMINI_TIMEOUT_SECONDS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    MEMORY.forget()
    yield
    MEMORY.forget()


@pytest.fixture
def gemini() -> Iterator[GeminiServer]:
    with serving() as server:
        yield server


def run(
    capsys: pytest.CaptureFixture[str], gemini: GeminiServer, tmp_path: Path, *extra: str
) -> tuple[int, dict[str, Any], str]:
    code, out, err = cli(
        capsys, "run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", "google:gemini-x",
        "--base-url", gemini.url, "--json", "--db", f"sqlite:///{tmp_path / 'runs.db'}", *extra,
    )  # fmt: skip
    return code, json.loads(out), err


def dag() -> dict[str, Any]:
    tools = ("fetch_sales_data", "fetch_refund_data", "calculate_monthly_kpis")
    steps = [
        {"id": f"s{n}", "title": f"Run {name}", "tool": name, "args": MONTH, "depends_on": []}
        for n, name in enumerate(tools, 1)
    ]
    return {"kind": "plan", "steps": steps}


def test_plan_execute_on_gemini_ends_in_success(
    gemini: GeminiServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    gemini.queue(
        Reply(body=answer(json.dumps(seed_plan()), usage=(400, 90))),
        Reply(body=answer("Net sales were $26,825.", usage=(700, 12))),
    )

    code, result, err = run(capsys, gemini, tmp_path)

    assert code == 0, err
    assert (result["status"], result["stop_reason"]) == ("ok", "success")
    assert result["answer"] == "Net sales were $26,825."
    assert [step["tool"] for step in result["plan"]] == [
        step["tool"] for step in seed_plan()["steps"]
    ]
    assert (result["usage"]["tokens_in"], result["usage"]["tokens_out"]) == (1100, 102)
    planned, combined = gemini.requests
    assert planned.path.endswith(":streamGenerateContent")  # the plan streams
    assert "responseJsonSchema" in planned.generation
    assert combined.path.endswith(":streamGenerateContent")  # so does the answer
    assert KEY not in json.dumps(result) and KEY not in err


def test_replan_on_gemini_ends_in_success(
    gemini: GeminiServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    gemini.queue(
        Reply(body=answer(json.dumps(dag()))),
        Reply(body=answer(json.dumps({"kind": "respond", "response": "Net sales: $26,825."}))),
    )

    code, result, err = run(capsys, gemini, tmp_path, "--strategy", "replan")

    assert code == 0, err
    assert (result["status"], result["stop_reason"]) == ("ok", "success")
    assert result["answer"] == "Net sales: $26,825."
    assert len(gemini.requests) == 2
    assert all("responseJsonSchema" in seen.generation for seen in gemini.requests)


def test_a_run_on_a_model_without_json_mode_or_tools_needs_no_flag(
    gemini: GeminiServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    gemini.json_mode = gemini.function_calling = False
    fenced = f"Here is the plan:\n```json\n{json.dumps(seed_plan())}\n```"
    gemini.queue(Reply(body=answer(fenced)), Reply(body=answer("Net sales were $26,825.")))

    code, result, err = run(capsys, gemini, tmp_path)

    assert code == 0, err
    assert (result["status"], result["stop_reason"]) == ("ok", "success")
    assert len(gemini.requests) == 5  # native, tool, json refused; prompt; the combine call


def test_a_refused_key_stops_the_run_with_the_auth_kind(
    gemini: GeminiServer,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wrong = "gm-wrong-key-9876543210fedcba"
    monkeypatch.setenv("GEMINI_API_KEY", wrong)

    code, result, err = run(capsys, gemini, tmp_path)

    assert code == 1
    assert (result["status"], result["stop_reason"]) == ("stopped", "llm_error:auth")
    assert result["llm_phase"] == "plan"
    assert wrong not in json.dumps(result) and wrong not in err


def test_google_without_a_model_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = cli(
        capsys, "run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", "google:",
        "--db", f"sqlite:///{tmp_path / 'runs.db'}",
    )  # fmt: skip

    assert code == 2
    assert "google:MODEL" in err and "Traceback" not in err
