"""The store on the command line: run, runs, show, resume, and their error paths."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.clitools import EXE, cli

TOOLS = '''
import os
import signal
from pathlib import Path

from taskdecomp import tool

HERE = Path(__file__).parent


def _record(name: str, n: int) -> dict:
    with (HERE / "ledger.txt").open("a") as ledger:
        ledger.write(f"{name} {n}\\n")
    if (HERE / f"crash-{name}").exists():
        (HERE / f"crash-{name}").unlink()
        os.kill(os.getpid(), signal.SIGKILL)  # the process dies
    return {"tool": name, "n": n}


@tool(side_effects="read_only")
def look(n: int) -> dict:
    """Read."""
    return _record("look", n)


@tool(side_effects="unsafe")
def charge(n: int) -> dict:
    """Charge once."""
    return _record("charge", n)
'''

PLAN = {
    "kind": "plan",
    "steps": [
        {"id": "s1", "title": "look", "tool": "look", "args": {"n": 1}},
        {"id": "s2", "title": "look again", "tool": "look", "args": {"n": 2}},
        {"id": "s3", "title": "charge", "tool": "charge", "args": {"n": 3}},
    ],
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "tools.py").write_text(TOOLS)
    script = {"rules": [{"match": "available_tools", "response": PLAN}], "default": "answer"}
    (tmp_path / "script.json").write_text(json.dumps(script))
    return tmp_path


def start(project: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    code, out, _ = cli(
        capsys,
        "run",
        "the goal",
        "--tools",
        str(project / "tools.py"),
        "--model",
        f"scripted:{project / 'script.json'}",
        "--json",
        *extra,
    )
    result: dict[str, Any] = json.loads(out)
    assert code == (0 if result["status"] == "ok" else 1)
    return result


def crash(project: Path, tool_name: str, *argv: str) -> None:
    """Run the installed command in a process that ``tool_name`` kills (SIGKILL) once."""
    (project / f"crash-{tool_name}").touch()
    tools, script = (project / "tools.py", project / "script.json")
    default = ("--tools", str(tools), "--model", f"scripted:{script}")
    env = {**os.environ, "TASKDECOMP_LEASE_SECONDS": "600"}  # expiry cannot free the run
    proc = subprocess.run(
        [str(EXE), "run", "the goal", *(argv or default)],
        capture_output=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr  # a dead owner: resumed at once


def ledger(project: Path) -> list[str]:
    return (project / "ledger.txt").read_text().splitlines()


def test_every_run_is_stored_in_the_data_directory(
    project: Path, capsys: pytest.CaptureFixture[str], clean_env: Path
) -> None:
    result = start(project, capsys)
    assert (clean_env / "runs.db").is_file()
    code, out, _ = cli(capsys, "runs", "--json")
    assert code == 0
    [listed] = json.loads(out)
    assert listed["run_id"] == result["run_id"]
    assert (listed["goal"], listed["status"], listed["stop_reason"]) == (
        "the goal",
        "ok",
        "success",
    )
    assert listed["seconds"] >= 0


def test_runs_prints_a_table(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    result = start(project, capsys)
    code, out, _ = cli(capsys, "runs")
    assert code == 0
    assert result["run_id"] in out and "success" in out and "the goal" in out


def test_show_prints_the_stored_plan_trace_and_history(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = start(project, capsys)
    code, out, _ = cli(capsys, "show", result["run_id"], "--json")
    assert code == 0
    shown = json.loads(out)
    for key in ("run_id", "status", "stop_reason", "answer", "plan", "trace", "history", "usage"):
        assert shown[key] == result[key], key
    assert shown["goal"] == "the goal"
    assert shown["tools"] == str((project / "tools.py").resolve())
    assert shown["model"] == f"scripted:{project / 'script.json'}"

    code, out, _ = cli(capsys, "show", result["run_id"])
    assert code == 0
    assert "plan" in out and "trace" in out and "look again" in out
    assert '"tool": "charge"' in out and "answer" in out


def test_resume_continues_a_crashed_run_with_its_stored_tools_and_model(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    crash(project, "look")
    code, out, _ = cli(capsys, "runs", "--json")
    [listed] = json.loads(out)
    assert listed["status"] == "running"
    shown = json.loads(cli(capsys, "show", listed["run_id"], "--json")[1])
    assert (shown["status"], shown["stop_reason"], shown["answer"]) == ("running", None, None)
    assert [entry["plan_step"]["id"] for entry in shown["history"]] == []

    code, out, _ = cli(capsys, "resume", listed["run_id"], "--json")
    assert code == 0
    result = json.loads(out)
    assert result["stop_reason"] == "success"
    assert ledger(project) == ["look 1", "look 1", "look 2", "charge 3"]


def test_a_run_started_with_relative_paths_resumes_from_another_directory(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    crash(project, "look", "--tools", "tools.py", "--model", "scripted:script.json")
    elsewhere = project / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    [listed] = json.loads(cli(capsys, "runs", "--json")[1])
    code, out, err = cli(capsys, "resume", listed["run_id"], "--json")
    assert code == 0, err
    assert json.loads(out)["stop_reason"] == "success"
    assert ledger(project) == ["look 1", "look 1", "look 2", "charge 3"]


def test_resume_stops_on_an_unsafe_step_that_may_have_run(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    crash(project, "charge")
    run_id = json.loads(cli(capsys, "runs", "--json")[1])[0]["run_id"]
    code, out, err = cli(capsys, "resume", run_id)
    assert code == 1
    assert "interrupted_unknown_outcome:s3" in out
    assert ledger(project).count("charge 3") == 1

    code, out, err = cli(capsys, "resume", run_id)
    assert code == 1
    assert "already ended" in err and "nothing to resume" in err
    assert ledger(project).count("charge 3") == 1


def test_resuming_a_finished_run_says_so(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = start(project, capsys)
    code, out, err = cli(capsys, "resume", result["run_id"], "--json")
    assert code == 0
    assert f"run {result['run_id']} already ended (ok, success); nothing to resume" in err
    assert json.loads(out)["trace"] == result["trace"]
    assert ledger(project) == ["look 1", "look 2", "charge 3"]


def test_runs_are_stored_in_postgresql_by_plain_url(
    project: Path, capsys: pytest.CaptureFixture[str], pg_url: str
) -> None:
    assert pg_url.startswith("postgresql://")
    result = start(project, capsys, "--db", pg_url)
    code, out, _ = cli(capsys, "runs", "--db", pg_url, "--json")
    assert code == 0
    assert [r["run_id"] for r in json.loads(out)] == [result["run_id"]]


def assert_usage_error(err: str, *fragments: str) -> None:  # or any one-line error
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("taskdecomp: error: ")
    for fragment in fragments:
        assert fragment in lines[0]


def test_an_unknown_run_id_is_a_usage_error(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    start(project, capsys)
    for command in ("show", "resume"):
        code, _, err = cli(capsys, command, "nope")
        assert code == 2
        assert_usage_error(err, "no run 'nope'", "taskdecomp runs")


def test_an_unreachable_database_fails_in_one_line_but_is_no_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = cli(capsys, "runs", "--db", "postgresql://postgres@127.0.0.1:1/test")
    assert code == 1  # the server is down: nothing in the command to fix
    assert_usage_error(err, "cannot use the database", "127.0.0.1:1", "TASKDECOMP_DATABASE_URL")


def test_a_database_that_does_not_exist_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = cli(capsys, "runs", "--db", "postgresql://postgres@127.0.0.1/no_such_db_here")
    assert code == 2  # fix --db: the server is up, the name is wrong
    assert_usage_error(err, "no_such_db_here", "does not exist", "check --db")


def test_an_unsupported_database_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "runs", "--db", "mysql://root@localhost/x")
    assert code == 2
    assert_usage_error(err, "unsupported database", "postgresql://user@host/dbname")


def test_a_file_that_is_not_a_database_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bogus = tmp_path / "bogus.db"
    bogus.write_bytes(b"this is not sqlite" * 100)
    code, _, err = cli(capsys, "runs", "--db", str(bogus))
    assert code == 2
    assert_usage_error(err, "is not a usable SQLite database")


@pytest.mark.parametrize("below", ["sub/runs.db", "runs.db"])
def test_a_store_path_through_a_file_is_a_usage_error(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], below: str
) -> None:
    (tmp_path / "plainfile").write_text("not a folder")
    path = tmp_path / "plainfile" / below

    tools, model = str(project / "tools.py"), f"scripted:{project / 'script.json'}"
    argv = ("run", "the goal", "--tools", tools, "--model", model)
    code, _, err = cli(capsys, *argv, "--db", f"sqlite:///{path}")
    assert code == 2
    assert_usage_error(err, "cannot create the folder", str(path), "--db")
    code, _, err = cli(capsys, "runs", "--db", f"sqlite:///{path}")  # reads: creates nothing
    assert code == 2
    assert_usage_error(err, "no run store at", str(path), "--db")


def test_a_locked_store_fails_in_one_line_and_readers_still_work(
    project: Path,
    capsys: pytest.CaptureFixture[str],
    clean_env: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    start(project, capsys)
    monkeypatch.setenv("TASKDECOMP_BUSY_TIMEOUT", "0.2")
    holder = sqlite3.connect(clean_env / "runs.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        code, out, _ = cli(capsys, "runs", "--json")
        assert code == 0 and len(json.loads(out)) == 1
        code, _, err = cli(
            capsys,
            "run",
            "blocked",
            "--tools",
            str(project / "tools.py"),
            "--model",
            f"scripted:{project / 'script.json'}",
        )
        assert code == 1  # busy now, not wrong: nothing in the command to fix
        assert_usage_error(err, "is locked by another process", "waited 0.2s")
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_show_prints_the_raw_plan_of_an_invalid_plan(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = {"rules": [{"match": "available_tools", "response": {"kind": "plan"}}]}
    (project / "script.json").write_text(json.dumps(script))
    result = start(project, capsys)
    assert result["stop_reason"] == "invalid_plan:missing_steps"
    code, out, _ = cli(capsys, "show", result["run_id"])
    assert code == 0
    assert "raw_plan" in out and '"kind": "plan"' in out
    shown = json.loads(cli(capsys, "show", result["run_id"], "--json")[1])
    assert shown["raw_plan"] == {"kind": "plan"} and shown["plan"] is None
