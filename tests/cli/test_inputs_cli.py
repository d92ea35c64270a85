"""What a new user feeds the command: goals from files and stdin, store paths, toolsets (and
``taskdecomp tools`` to check one), ``--debug`` tracebacks, and list-form scripts that must
go on where a run left off.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.clitools import EXE, cli
from tests.conftest import EXAMPLES, SALES_TOOLS
from tests.support import SEED_GOAL

SALES_SCRIPT = EXAMPLES / "sales_report" / "script.json"


def sales(*extra: str) -> list[str]:
    return ["--tools", str(SALES_TOOLS), "--model", f"scripted:{SALES_SCRIPT}", *extra]


def one_line_error(err: str, *fragments: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("taskdecomp: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


# -- goals -------------------------------------------------------------------------------


def test_a_goal_over_128_kb_comes_from_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    goal = SEED_GOAL + "\n" + "Context: " + "x" * 200_000
    path = tmp_path / "goal.txt"
    path.write_text(goal + "\n")
    code, out, err = cli(capsys, "run", "--goal-file", str(path), *sales("--json"))
    assert code == 0, err
    run_id = json.loads(out)["run_id"]
    code, out, _ = cli(capsys, "show", run_id, "--json")
    assert json.loads(out)["goal"] == goal


def test_a_goal_from_standard_input(tmp_path: Path) -> None:
    for argv in (["run", "-"], ["run", "--goal-file", "-"]):
        proc = subprocess.run(
            [str(EXE), *argv, *sales("--json")],
            input=SEED_GOAL,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["stop_reason"] == "success"


@pytest.mark.parametrize("goal", ["", "   ", "\n\t"])
def test_an_empty_goal_is_a_usage_error_and_creates_nothing(
    goal: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], clean_env: Path
) -> None:
    code, _, err = cli(capsys, "run", goal, *sales())
    assert code == 2
    one_line_error(err, "the goal is empty")
    code, _, err = cli(capsys, "decompose", goal, "--model", "scripted:x.json")
    assert code == 2
    one_line_error(err, "the goal is empty")
    (tmp_path / "blank.txt").write_text(goal)
    code, _, err = cli(capsys, "run", "--goal-file", str(tmp_path / "blank.txt"), *sales())
    assert code == 2
    one_line_error(err, "the goal is empty")
    assert not (clean_env / "runs.db").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "g", "--goal-file", "g.txt", *sales()], "not both"),
        (["run", *sales()], "Missing argument 'GOAL'"),
        (["run", "--goal-file", "nope.txt", *sales()], "goal file 'nope.txt' does not exist"),
    ],
)
def test_goal_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = cli(capsys, *argv)
    assert code == 2
    one_line_error(err, message)


# -- the store ---------------------------------------------------------------------------


def test_reading_commands_never_create_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = tmp_path / "rnus.db"
    for argv in (
        ["runs"],
        ["show", "r1"],
        ["resume", "r1"],
        ["tree"],
        ["tree", "1"],
        ["approve", "r1"],
        ["reject", "r1", "--reason", "no"],
        ["decompose", "--plan", "1", "--model", f"scripted:{SALES_SCRIPT}"],
    ):
        code, _, err = cli(capsys, *argv, "--db", str(typo))
        assert code == 2, argv
        one_line_error(err, f"no run store at {str(typo)!r}", "--db")
        assert not typo.exists(), argv


def test_run_creates_the_store_and_says_so_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "new" / "runs.db"
    code, _, err = cli(capsys, "run", SEED_GOAL, *sales("--db", str(db)))
    assert code == 0 and db.is_file()
    assert f"created the run store {db}" in err
    code, _, err = cli(capsys, "run", SEED_GOAL, *sales("--db", str(db)))
    assert code == 0 and "created" not in err
    code, out, _ = cli(capsys, "runs", "--db", str(db), "--json")
    assert len(json.loads(out)) == 2


# -- toolsets ----------------------------------------------------------------------------

TOOLSET = '''
from taskdecomp import tool


@tool(timeout=5, side_effects="idempotent")
def fetch(month: str, limit: int = 10) -> dict:
    """Fetch the month's rows."""
    return {"month": month, "limit": limit}


@tool(side_effects="unsafe", needs_approval=True, isolation="process")
def send(to: str) -> str:
    """Send it."""
    return to


def helper(rows):
    return rows
'''


@pytest.fixture
def toolset(tmp_path: Path) -> Path:
    path = tmp_path / "mytools.py"
    path.write_text(TOOLSET)
    return path


def test_an_untyped_function_is_named_when_loaded_and_when_a_plan_uses_it(
    toolset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = [
        {"id": "s1", "title": "a", "tool": "fetch", "args": {"month": "2026-04"}},
        {"id": "s2", "title": "b", "tool": "helper", "args": {"rows": []}},
        {"id": "s3", "title": "c", "tool": "fetch", "args": {"month": "2026-05"}},
    ]
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"kind": "plan", "steps": steps}]))
    code, out, err = cli(
        capsys,
        "run",
        "g",
        "--tools",
        str(toolset),
        "--model",
        f"scripted:{script}",
        "--repairs",
        "0",
        "--json",
    )
    assert code == 1
    assert re.search(r"warning: toolset '.*mytools.py': skipped 'helper': it has no type", err)
    result = json.loads(out)
    assert result["stop_reason"] == "invalid_plan:tool_not_allowed:helper"
    assert (
        "'helper' is a function in the toolset but not a tool: it has no type hints"
        in (result["message"])
    )


def test_tools_lists_what_the_planner_will_see(
    toolset: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli(capsys, "tools", str(toolset))
    assert code == 0
    assert all(len(row.rstrip()) <= 80 for row in out.splitlines()), out
    assert "skipped 'helper': it has no type hints" in " ".join(out.split())
    monkeypatch.setenv("COLUMNS", "160")
    code, out, _ = cli(capsys, "tools", str(toolset))
    [fetch] = [row for row in out.splitlines() if row.startswith("fetch ")]
    assert fetch.split()[:4] == ["fetch", "idempotent", "5s", "none"]
    assert "month: string" in fetch
    [send] = [row for row in out.splitlines() if row.startswith("send ")]
    assert send.split()[:5] == ["send", "unsafe", "-", "process", "yes"]
    assert "skipped 'helper': it has no type hints" in out

    code, out, _ = cli(capsys, "tools", str(toolset), "--json")
    assert code == 0
    listed = json.loads(out)
    assert list(listed["skipped"]) == ["helper"]
    assert listed["skipped"]["helper"].startswith("it has no type hints; annotate its parameters")
    fetch_json: dict[str, Any] = listed["tools"][0]
    assert fetch_json["name"] == "fetch" and fetch_json["timeout"] == 5
    assert fetch_json["side_effects"] == "idempotent" and fetch_json["needs_approval"] is False
    assert fetch_json["args"]["required"] == ["month"]
    assert fetch_json["args"]["properties"]["limit"] == {
        "default": 10,
        "title": "Limit",
        "type": "integer",
    }


def test_tools_on_a_missing_toolset_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "tools", "nope.py")
    assert code == 2
    one_line_error(err, "toolset file 'nope.py' does not exist")


BROKEN = "import os\n\nVALUE = 1 / 0\n"

RAISES = '''
def boom(n: int) -> int:
    """Fail."""
    return {}["missing"]


def fine(n: int) -> int:
    """Fine."""
    return n
'''


def test_debug_prints_where_a_toolset_failed_to_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text(BROKEN)
    argv = ["run", "g", "--tools", str(broken), "--model", f"scripted:{SALES_SCRIPT}"]
    code, _, err = cli(capsys, *argv)
    assert code == 2
    one_line_error(err, "failed to import", "division by zero")

    code, _, err = cli(capsys, *argv, "--debug")
    assert code == 2
    assert f'File "{broken}", line 3' in err and "ZeroDivisionError" in err
    assert err.strip().splitlines()[-1].startswith("taskdecomp: error: ")

    monkeypatch.setenv("TASKDECOMP_DEBUG", "1")
    code, _, err = cli(capsys, "tools", str(broken))
    assert code == 2 and f'File "{broken}", line 3' in err


def test_debug_prints_where_a_tool_raised(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tools = tmp_path / "raising.py"
    tools.write_text(RAISES)
    steps = [
        {"id": "s1", "title": "a", "tool": "fine", "args": {"n": 1}},
        {"id": "s2", "title": "b", "tool": "boom", "args": {"n": 2}},
        {"id": "s3", "title": "c", "tool": "fine", "args": {"n": 3}},
    ]
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"kind": "plan", "steps": steps}]))
    argv = ["run", "g", "--tools", str(tools), "--model", f"scripted:{script}"]
    code, out, err = cli(capsys, *argv)
    assert code == 1 and "KeyError: 'missing'" in out
    assert "Traceback" not in err and "add --debug" in out

    script.write_text(json.dumps([{"kind": "plan", "steps": steps}]))
    code, out, err = cli(capsys, *argv, "--debug")
    assert code == 1
    assert "Traceback" in err and f'File "{tools}", line 4, in boom' in err


# -- list-form scripts continue where the run left off -----------------------------------

SLOW_ONCE = '''
import os
import time
from pathlib import Path

from taskdecomp import tool

MARK = Path(__file__).with_name("slept")


def look(n: int) -> int:
    """Read."""
    return n


def slow_once(n: int) -> int:
    """Sleep past the deadline the first time only."""
    if not MARK.exists():
        MARK.touch()
        time.sleep(4)
    return n


@tool(needs_approval=True)
def publish(n: int) -> int:
    """Publish (a human approves)."""
    return n
'''


def list_script(tmp_path: Path, tool_name: str) -> str:
    steps = [
        {"id": "s1", "title": "a", "tool": "look", "args": {"n": 1}},
        {"id": "s2", "title": "b", "tool": tool_name, "args": {"n": 2}},
        {"id": "s3", "title": "c", "tool": "look", "args": {"n": 3}},
    ]
    path = tmp_path / "list.json"
    path.write_text(json.dumps([{"kind": "plan", "steps": steps}, "The real answer."]))
    return f"scripted:{path}"


def test_a_list_script_goes_on_after_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tools = tmp_path / "slow_tools.py"
    tools.write_text(SLOW_ONCE)
    model = list_script(tmp_path, "slow_once")
    argv = ["run", "g", "--tools", str(tools), "--model", model, "--max-seconds", "1", "--json"]
    code, out, _ = cli(capsys, *argv)
    assert (code, json.loads(out)["stop_reason"]) == (1, "max_seconds")
    code, out, err = cli(capsys, "resume", json.loads(out)["run_id"], "--json")
    assert code == 0, err
    assert json.loads(out)["answer"] == "The real answer."


def test_a_list_script_goes_on_after_approve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tools = tmp_path / "slow_tools.py"
    tools.write_text(SLOW_ONCE)
    model = list_script(tmp_path, "publish")
    code, out, _ = cli(capsys, "run", "g", "--tools", str(tools), "--model", model, "--json")
    assert (code, json.loads(out)["status"]) == (3, "paused")
    code, out, err = cli(capsys, "approve", json.loads(out)["run_id"], "--json")
    assert code == 0, err
    assert json.loads(out)["answer"] == "The real answer."
