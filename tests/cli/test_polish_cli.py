"""What a new user reads at 80 columns: whole ids, states and words, each thing said once.

``runs`` keeps ids, states and stop reasons readable and shows enough of the goal to tell
runs apart; the workflow phase table breaks lines between words (a path after a ``/``);
``show`` of a workflow run prints no ``None``; a plan that waits for approval is printed
once; a refused flag says in a sentence what to do; a run out of time says how to go on.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.clitools import cli
from tests.conftest import EXAMPLES, SALES_TOOLS
from tests.support import SEED_GOAL

SALES_SCRIPT = EXAMPLES / "sales_report" / "script.json"
REPLAN_SCRIPT = EXAMPLES / "replan" / "sales.json"
WORKFLOW = EXAMPLES / "workflow"
RUN_ID = re.compile(r"\b[0-9a-f]{32}\b")


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, _ = cli(capsys, *argv, "--json")
    assert code in (0, 1, 3), out
    result: dict[str, Any] = json.loads(out)
    return result


def cell(out: str, header: str, run_id: str) -> list[str]:
    """The lines of ``header``'s column in ``run_id``'s row of the ``runs`` table."""
    lines = out.splitlines()
    start = next(row for row in lines if row.startswith("id ")).index(header)
    first = lines.index(next(row for row in lines if row.startswith(run_id)))
    rows = [lines[first]]
    for row in lines[first + 1 :]:
        if not row.startswith(" "):
            break
        rows.append(row)
    return [text for row in rows if (text := row[start:].split("  ")[0].strip())]


@pytest.fixture
def sales_runs(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    """A run that succeeded and one stopped by the allowlist, both with the example's goal."""
    base = ("run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", f"scripted:{SALES_SCRIPT}")
    return [run_json(capsys, *base), run_json(capsys, *base, "--allow", "fetch_sales_data")]


def test_runs_at_80_columns_shows_whole_ids_states_stop_reasons_and_the_goal(
    sales_runs: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli(capsys, "runs")
    assert code == 0
    assert all(len(row.rstrip()) <= 80 for row in out.splitlines()), out
    assert sales_runs[1]["stop_reason"] == "invalid_plan:tool_not_allowed:fetch_refund_data"
    for result in sales_runs:
        [row] = [row for row in out.splitlines() if result["run_id"] in row]
        assert re.match(rf"{result['run_id']}  {result['status']}\b", row), row
        stop = cell(out, "stop reason", result["run_id"])
        assert "".join(stop) == result["stop_reason"], stop
        assert all(part.endswith((":", "_")) for part in stop[:-1]), stop
        goal = " ".join(cell(out, "goal", result["run_id"]))
        assert goal.endswith("…") and len(goal[:-1]) >= 30, goal
        assert SEED_GOAL.startswith(goal[:-1]), goal


@pytest.fixture
def workflow_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> str:
    """The README's workflow example, run in a copy of its workspace; its run id."""
    workspace = tmp_path / "calc"
    shutil.copytree(WORKFLOW / "workspace", workspace)
    result = run_json(
        capsys,
        "workflow",
        "run",
        "--workspace",
        str(workspace),
        "--input",
        str(WORKFLOW / "design.md"),
        "--model",
        f"scripted:{WORKFLOW / 'script.json'}",
        "--min-tasks",
        "3",
    )
    assert result["stop_reason"] == "success"
    run_id: str = result["run_id"]
    return run_id


def pieces(word: str) -> set[str]:
    """``word`` and every run of its parts cut after a ``/``: where a line may break."""
    parts = re.split(r"(?<=/)", word)
    return {"".join(parts[i:j]) for i in range(len(parts)) for j in range(i + 1, len(parts) + 1)}


def test_the_workflow_phase_table_at_80_columns_never_splits_a_word(
    workflow_run: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = cli(capsys, "workflow", "show", workflow_run, "--json")
    assert code == 0
    phases = json.loads(out)["phases"]
    words = {"-"}
    for run in phases:
        texts = [run["no"], run["phase"], run["task"], run["attempt"], run["result"]]
        words |= {str(text) for text in texts if text is not None}
        words |= {part for text in texts if isinstance(text, str) for part in text.split()}
        words |= {f"{path}," for path in run["changed"]} | set(run["changed"])
    allowed = {piece for word in words for piece in pieces(word)}

    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli(capsys, "workflow", "show", workflow_run)
    assert code == 0
    table = out.split("phases", 1)[1].split("\ntasks", 1)[0].splitlines()
    assert all(len(row.rstrip()) <= 80 for row in table), out
    lines = [re.sub("[\u2500-\u257f]", " ", row) for row in table]  # lines of a box, if any
    words = [word for row in lines for word in row.split()]
    assert words[:6] == ["#", "phase", "task", "try", "changed", "result"]
    assert [word for word in words[6:] if word not in allowed] == [], out
    assert "completeness_verification" in out and ".taskdecomp/" in out


def test_show_of_a_workflow_run_prints_no_none(
    workflow_run: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli(capsys, "show", workflow_run)
    assert code == 0
    assert "None" not in out
    assert "tools -" in out


def test_a_plan_that_waits_for_approval_is_printed_once(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    model = f"scripted:{REPLAN_SCRIPT}"
    argv = ("run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", model, "--approve-plan")
    code, out, _ = cli(capsys, *argv, "--strategy", "replan")
    assert code == 3
    [run_id] = set(RUN_ID.findall(out))
    for printed in (out, cli(capsys, "show", run_id)[1]):
        assert printed.count("fetch_sales_data") == 1, printed  # in the plan table only
        assert "waiting for approval: steps s1, s2, s3, s4, s5 of the plan above" in printed
        assert f"taskdecomp approve {run_id}" in printed and "RUN_ID" not in printed


def test_approve_plan_without_replan_is_refused_in_a_sentence(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ("run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", f"scripted:{SALES_SCRIPT}")
    code, _, err = cli(capsys, *argv, "--approve-plan")
    assert code == 2
    assert err.startswith(
        "taskdecomp: error: --approve-plan works with --strategy replan only; "
        "add --strategy replan to have the plan approved before it runs"
    )
    assert "@tool(needs_approval=True)" in err
    code, _, err = cli(capsys, *argv, "--max-iterations", "2", "--max-agent-turns", "3")
    assert code == 2
    assert "--max-iterations and --max-agent-turns work with --strategy replan only" in err


SLOW_TOOLS = '''
import asyncio


async def wait(n: int) -> int:
    """Wait a while."""
    await asyncio.sleep(30)
    return n
'''


def test_a_run_out_of_time_says_how_to_give_it_more(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    tools = tmp_path / "slow.py"
    tools.write_text(SLOW_TOOLS)
    steps = [{"id": f"s{n}", "title": "Wait", "tool": "wait", "args": {"n": n}} for n in (1, 2, 3)]
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"kind": "plan", "steps": steps}]))
    argv = ("run", "Wait", "--tools", str(tools), "--model", f"scripted:{script}")
    code, out, err = cli(capsys, *argv, "--max-seconds", "0.5")
    assert code == 1 and "stop_reason=max_seconds" in out
    [run_id] = set(RUN_ID.findall(out))
    assert f"taskdecomp resume {run_id} --max-seconds SECONDS" in " ".join(err.split())
