"""The command line: output, exit codes, and one-line usage errors."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.clitools import EXE, cli
from tests.conftest import EXAMPLES, SALES_TOOLS
from tests.support import SEED_GOAL, seed_plan

SCRIPT = EXAMPLES / "sales_report" / "script.json"


def script(tmp_path: Path, *responses: Any) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(list(responses)))
    return f"scripted:{path}"


def test_run_prints_the_seed_result_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(
        capsys,
        "run",
        SEED_GOAL,
        "--tools",
        str(SALES_TOOLS),
        "--model",
        f"scripted:{SCRIPT}",
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    assert data["stop_reason"] == "success" and data["status"] == "ok"
    assert "Anna" in data["answer"] and "28,195" in data["answer"]
    assert data["history"][2]["observation"]["net_sales_usd"] == 26825.0
    assert err == ""  # no progress output mixed into --json


def test_run_prints_a_readable_summary_and_progress(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(
        capsys, "run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", f"scripted:{SCRIPT}"
    )
    assert code == 0
    assert "stop_reason=success" in out
    assert "fetch_sales_data" in out and "answer" in out
    assert "step 5 step_5 -> get_manager_profile" in err


def test_a_stopped_run_exits_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model = script(tmp_path, seed_plan(), "answer")
    code, out, _ = cli(
        capsys,
        "run",
        SEED_GOAL,
        "--tools",
        str(SALES_TOOLS),
        "--model",
        model,
        "--max-plan-steps",
        "3",
        "--repairs",
        "0",
        "--json",
    )
    assert code == 1
    assert json.loads(out)["stop_reason"] == "invalid_plan:max_steps"


def test_allow_flag_narrows_the_allowlist(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    model = script(tmp_path, seed_plan(), "answer")
    code, out, _ = cli(
        capsys,
        "run",
        SEED_GOAL,
        "--tools",
        str(SALES_TOOLS),
        "--model",
        model,
        "--allow",
        "fetch_sales_data, fetch_refund_data",
        "--repairs",
        "0",
        "--json",
    )
    assert code == 1
    assert json.loads(out)["stop_reason"] == "invalid_plan:tool_not_allowed:calculate_monthly_kpis"


def test_budget_flags_and_environment(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKDECOMP_MAX_TOOL_CALLS", "2")
    model = script(tmp_path, seed_plan(), "answer")
    code, out, _ = cli(
        capsys, "run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", model, "--json"
    )
    assert (code, json.loads(out)["stop_reason"]) == (1, "max_tool_calls")
    # the flag wins over the environment
    model = script(tmp_path, seed_plan(), "answer")
    code, out, _ = cli(
        capsys,
        "run",
        SEED_GOAL,
        "--tools",
        str(SALES_TOOLS),
        "--model",
        model,
        "--max-tool-calls",
        "5",
        "--json",
    )
    assert (code, json.loads(out)["stop_reason"]) == (0, "success")


def test_model_from_dotenv(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(f"TASKDECOMP_MODEL=scripted:{SCRIPT}\n")
    code, out, _ = cli(capsys, "run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--json")
    assert code == 0 and json.loads(out)["stop_reason"] == "success"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "g", "--tools", "nope.py", "--model", f"scripted:{SCRIPT}"], "does not exist"),
        (
            ["run", "g", "--tools", str(SALES_TOOLS), "--model", "scripted:/no/file.json"],
            "does not exist",
        ),
        (["run", "g", "--tools", str(SALES_TOOLS), "--model", "warp:9"], "unknown model provider"),
        (["run", "g", "--tools", str(SALES_TOOLS), "--bogus"], "No such option"),
        (["run", "g", "--tools", str(SALES_TOOLS), "--max-tool-calls", "0"], "--max-tool-calls"),
        (["run", "--tools", str(SALES_TOOLS)], "Missing argument"),
        (["fly"], "No such command"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = cli(capsys, *argv)
    assert code == 2
    assert err.startswith("taskdecomp: error: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_bad_environment_value_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKDECOMP_MAX_SECONDS", "soon")
    code, _, err = cli(
        capsys, "run", "g", "--tools", str(SALES_TOOLS), "--model", f"scripted:{SCRIPT}"
    )
    assert code == 2 and "TASKDECOMP_MAX_SECONDS" in err


def test_the_installed_command_runs_the_example(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            str(EXE),
            "run",
            SEED_GOAL,
            "--tools",
            str(SALES_TOOLS),
            "--model",
            f"scripted:{SCRIPT}",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["usage"]["tool_calls"] == 5
