"""Tables at 80 columns, in a real terminal and in a pipe; text printed as it was written.

Run ids must stay whole (they are copied into ``show`` and ``resume``) and the status must
show; the free text (the goal) is what gets cut.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len

from tests.cli.terminal import taskdecomp
from tests.clitools import EXE, cli
from tests.conftest import EXAMPLES, SALES_TOOLS
from tests.support import SEED_GOAL

DAG_SCRIPT = EXAMPLES / "sales_report" / "script_parallel.json"
LONG_GOAL = SEED_GOAL + " Then compare it with March and explain every difference in detail."


def run_json(*argv: str) -> dict[str, Any]:
    proc = subprocess.run([str(EXE), *argv, "--json"], capture_output=True, text=True, timeout=60)
    assert proc.returncode in (0, 1), proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


@pytest.fixture
def two_runs(tmp_path: Path) -> list[dict[str, Any]]:
    """A DAG run that succeeded and a run stopped by the allowlist, both with long goals."""
    ok = run_json(
        "run", LONG_GOAL, "--tools", str(SALES_TOOLS), "--model", f"scripted:{DAG_SCRIPT}"
    )
    stopped = run_json(
        "run",
        LONG_GOAL,
        "--tools",
        str(SALES_TOOLS),
        "--model",
        f"scripted:{DAG_SCRIPT}",
        "--allow",
        "fetch_sales_data",
    )
    return [ok, stopped]


def assert_fits(text: str, width: int) -> None:
    for row in text.splitlines():
        assert cell_len(row.rstrip()) <= width, (cell_len(row), row)


def assert_runs_listed(text: str, runs: list[dict[str, Any]]) -> None:
    for result in runs:
        [row] = [row for row in text.splitlines() if result["run_id"] in row]
        assert re.search(rf"\b{result['status']}\b", row), row


def test_runs_at_80_columns_in_a_terminal_keeps_ids_and_status(
    two_runs: list[dict[str, Any]],
) -> None:
    term = taskdecomp("runs", columns=80)
    assert term.wait() == 0
    assert_fits(term.text, 80)
    assert_runs_listed(term.text, two_runs)
    assert "invalid_plan" in term.text and "summary for…" in term.text  # the goal is cut


def test_runs_at_80_columns_in_a_pipe_keeps_ids_and_status(
    two_runs: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli(capsys, "runs")
    assert code == 0
    assert_fits(out, 80)
    assert_runs_listed(out, two_runs)


def test_runs_at_140_columns_shows_every_column(
    two_runs: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "140")
    code, out, _ = cli(capsys, "runs")
    assert code == 0
    assert_fits(out, 140)
    assert_runs_listed(out, two_runs)
    header = next(row for row in out.splitlines() if row.startswith("id "))
    assert header.split() == ["id", "status", "stop", "reason", "started", "took", "goal"]
    row = next(row for row in out.splitlines() if two_runs[0]["run_id"] in row)
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +\d+\.\d\ds", row), row


def test_show_at_80_columns_draws_the_dag_and_keeps_step_ids(
    two_runs: list[dict[str, Any]],
) -> None:
    term = taskdecomp("show", two_runs[0]["run_id"], columns=80)
    assert term.wait() == 0
    assert_fits(term.text, 80)
    plan = re.split(r"^plan *\n", term.text, maxsplit=1, flags=re.MULTILINE)[1]
    plan = re.split(r"^trace *\n", plan, maxsplit=1, flags=re.MULTILINE)[0]
    header = plan.splitlines()[0].split()
    assert header == ["#", "id", "title", "tool", "args", "after", "done"]
    [kpis] = [row for row in plan.splitlines() if "calculate_monthly_kpis" in row]
    assert "step_3" in kpis and "step_1," in kpis  # step_3 runs after step_1 and step_2


def test_run_summary_shows_depends_on(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    code, out, _ = cli(
        capsys, "run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", f"scripted:{DAG_SCRIPT}"
    )
    assert code == 0
    header = next(row for row in out.splitlines() if row.startswith("#"))
    assert header.split() == ["#", "id", "title", "tool", "args", "after", "result"]
    [kpis] = [row for row in out.splitlines() if "calculate_monthly_kpis" in row]
    assert "step_1, step_2" in kpis


TRICKY_TOOLS = '''
def reach(n: int) -> int:
    """Call a server."""
    raise ConnectionError("openai:m: cannot reach [bold]api[/bold] :smile: \\\\[x]")


def fine(n: int) -> int:
    """Fine."""
    return n
'''
TRICKY_GOAL = "Sum [red]these[/red] :thumbs_up: numbers, then openai:m: said so"


def test_user_and_model_text_prints_literally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    tools = tmp_path / "tricky.py"
    tools.write_text(TRICKY_TOOLS)
    steps = [
        {"id": "s:m:1", "title": "[b]first[/b] :fire:", "tool": "fine", "args": {"n": 1}},
        {"id": "s2", "title": "second", "tool": "fine", "args": {"n": 2}},
        {"id": "s3", "title": "third", "tool": "reach", "args": {"n": 3}},
    ]
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"kind": "plan", "steps": steps}]))
    argv = ("run", TRICKY_GOAL, "--tools", str(tools), "--model", f"scripted:{script}")
    code, out, err = cli(capsys, *argv)
    assert code == 1
    message = "ConnectionError: openai:m: cannot reach [bold]api[/bold] :smile: \\[x]"
    for text in (out, err):
        assert "Ⓜ" not in text and "😄" not in text and "🔥" not in text
    assert message in out  # the stop message
    assert "step 3 stopped: tool_error:reach" in err
    assert "s:m:1" in out and "[b]first[/b] :fire:" in out

    run_id = re.search(r"run ([0-9a-f]{32})", out)
    assert run_id is not None
    code, out, _ = cli(capsys, "show", run_id[1])
    assert code == 0
    assert f"goal: {TRICKY_GOAL}" in out and message in out and "[b]first[/b] :fire:" in out
    assert "Ⓜ" not in out and "👍" not in out
    code, out, _ = cli(capsys, "runs")
    assert TRICKY_GOAL in out and "👍" not in out
