"""A workflow killed with SIGKILL resumes in the phase it was in and loses nothing committed.

The installed ``taskdecomp workflow run`` runs the ``default`` workflow over the scenario's
workspace in a child process. One rule ahead of the scenario's makes the agent of a chosen
phase run call the user tool ``crash`` once its own calls are done: the tool kills its
process (SIGKILL) the first time and answers ``{"ok": true}`` after that. With
``--durability sync`` each call's checkpoint is committed before the next call starts, so
all the killed agent did is stored (``async``, the default, may lose the last ones).
``taskdecomp resume`` then continues the run: the killed phase run goes on under its own
step number after its last recorded turn, no finished phase run runs again, every call ends
once, and each task is committed to git once.

One phase run of each kind is killed: an execute phase outside the task loop
(``design_draft``), two evaluate phases (``design_review``, ``completeness_verification``)
and both phases of the task loop (``implement_task``, and ``task_spec_check`` on a retry);
one of them on PostgreSQL too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest

from tests.clitools import EXE, cli
from tests.workflow import scenario

LEASE_SECONDS = "600"
"""The child's lease: far too long to expire, so a resume takes the run over only because
its owner, killed, is a process of this host that is gone (which it does at once)."""

CRASH_TOOLS = '''"""A tool that kills its own process the first time it is called."""

import os
import signal
from pathlib import Path

from taskdecomp import tool

MARKER = Path({marker!r})


# idempotent, so a resume calls it again; an unsafe call cut short would stop the resume
@tool(side_effects="idempotent")
def crash() -> dict[str, bool]:
    """Kill this process (SIGKILL) unless the marker file exists; create it first."""
    if not MARKER.exists():
        MARKER.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return {{"ok": True}}


TOOLS = [crash]
'''

PhaseRun = tuple[str, str | None, int, list[str], list[str]]
"""A phase run of the scenario: phase, task, attempt, paths it changed, tools its agent called."""


def task_runs(task_id: str, attempt: int = 1) -> list[PhaseRun]:
    """The task loop's two phase runs for one attempt at ``task_id``."""
    path = scenario.FILES[task_id][0]
    return [
        ("implement_task", task_id, attempt, [path], ["write_file"]),
        ("task_spec_check", task_id, attempt, [], ["update_task"]),
    ]


RUNS: list[PhaseRun] = [
    ("design_draft", None, 1, [".taskdecomp/design.md"], ["read_file", "write_file"]),
    ("design_review", None, 1, [], ["set_status"]),
    ("task_decomposition", None, 1, [], ["put_tasks", "set_status"]),
    *task_runs("T1"),
    *task_runs("T2"),
    *task_runs("T2", attempt=2),  # the first spec check failed T2
    *task_runs("T3"),
    *task_runs("T4"),
    ("completeness_verification", None, 1, [], ["add_tasks"]),
    *task_runs("T5"),
    ("completeness_verification", None, 1, [], []),
    ("code_review", None, 1, [], ["set_status"]),
]
"""The scenario's phase runs, step ``p1`` first, as a run that is never killed makes them."""

PASSED_AT = {5: "T1", 9: "T2", 11: "T3", 13: "T4", 16: "T5"}
"""The step whose spec check passed each task (and committed it)."""

KILLED = {
    "design_draft": 1,
    "design_review": 2,
    "implement_task": 10,
    "task_spec_check": 9,
    "completeness_verification": 14,
}
"""The step of the phase run killed for each phase."""


def crash_rule(no: int) -> dict[str, Any]:
    """Makes the agent of phase run ``no`` call ``crash`` after its own calls."""
    phase, task, attempt, _, tools = RUNS[no - 1]
    match = f'"phase": "{phase}".*'
    if task is not None:
        match += f'"task": {{"id": "{task}".*"attempt": {attempt}.*'
    return {"match": match + scenario.first(30 - len(tools)), "response": scenario.call("crash")}


def subjects(task_ids: list[str]) -> list[str]:
    """The commit messages of ``task_ids``, in order."""
    titles = {task["id"]: task["title"] for task in scenario.TASKS + scenario.ADDED}
    return [f"{task_id}: {titles[task_id]}" for task_id in task_ids]


def rows(phases: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The phase history of ``workflow show --json`` in the form of :data:`RUNS`."""
    return [(p["no"], p["phase"], p["task"], p["attempt"], p["changed"]) for p in phases]


def expected_rows(upto: int) -> list[tuple[Any, ...]]:
    """The phase history once the runs before step ``upto`` finished."""
    return [(no, *run[:4]) for no, run in enumerate(RUNS[: upto - 1], 1)]


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    """Run the command in this process; the JSON it printed."""
    code, out, err = cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def command(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run the installed command in a child process to its end (or its death)."""
    return subprocess.run(
        [str(EXE), *argv], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def run_until_killed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], db: str, no: int
) -> tuple[Path, str]:
    """Start the workflow in a child that dies in phase run ``no``; its workspace and run id."""
    ws, design = scenario.make_workspace(tmp_path)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": [crash_rule(no), *scenario.rules()]}))
    tools = tmp_path / "crash_tools.py"
    tools.write_text(CRASH_TOOLS.format(marker=str(tmp_path / "crashed")))
    env = {**os.environ, "TASKDECOMP_LEASE_SECONDS": LEASE_SECONDS}
    child = command(
        "workflow", "run", "default", "--workspace", str(ws), "--input", str(design),
        "--model", f"scripted:{script}", "--tools", str(tools), "--min-tasks", "3",
        "--db", db, "--durability", "sync", "--json", env=env,
    )  # fmt: skip
    assert child.returncode == -signal.SIGKILL, (child.returncode, child.stderr)
    assert (tmp_path / "crashed").exists()
    runs = cli_json(capsys, "runs", "--db", db)
    assert [run["status"] for run in runs] == ["running"]
    return ws, str(runs[0]["run_id"])


def resume(capsys: pytest.CaptureFixture[str], db: str, run_id: str) -> dict[str, Any]:
    """Resume the run in a child (its killed owner's lease is taken over at once); its result."""
    done = command("resume", run_id, "--db", db, "--json", env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def calls_by_step(stored: dict[str, Any]) -> dict[int, list[str]]:
    """The tools each phase run's agent called, from the stored trace (ended calls only)."""
    calls: dict[int, list[str]] = defaultdict(list)
    for entry in stored["trace"]:
        calls[int(entry["step_no"])].append(str(entry["tool"]))
    return dict(calls)


def git_log(ws: Path) -> list[tuple[str, str]]:
    """The workspace's commits, oldest first: (hash, subject)."""
    lines = scenario.git(ws, "log", "--reverse", "--format=%H %s").splitlines()
    return [(line[:40], line[41:]) for line in lines]


def check_killed(
    capsys: pytest.CaptureFixture[str], db: str, run_id: str, ws: Path, no: int
) -> dict[str, Any]:
    """The stored run as the kill left it: in the killed phase, all it committed kept."""
    phase, task, _, _, tools = RUNS[no - 1]
    view: dict[str, Any] = cli_json(capsys, "workflow", "show", run_id, "--db", db)
    assert view["status"] == "running" and view["stop_reason"] is None
    # the task loop keeps the workflow in implement_task while its spec checks run
    assert view["phase"] == ("implement_task" if task is not None else phase)
    assert view["in_flight"] == [{"no": no, "phase": phase, "task": task}]
    assert rows(view["phases"]) == expected_rows(no)
    stored = cli_json(capsys, "show", run_id, "--db", db)
    (inflight,) = stored["state"]["workflow"]["inflight"]
    assert [turn["call"]["tool"] for turn in inflight["turns"]] == tools
    passed = [task_id for step, task_id in PASSED_AT.items() if step < no]
    assert [subject for _, subject in git_log(ws)] == ["start", *subjects(passed)]
    return view


def check_finished(
    capsys: pytest.CaptureFixture[str], db: str, run_id: str, ws: Path
) -> dict[str, Any]:
    """The resumed run's end: every phase run once, in order, and one commit per task."""
    view: dict[str, Any] = cli_json(capsys, "workflow", "show", run_id, "--db", db)
    assert (view["status"], view["stop_reason"], view["phase"]) == ("ok", "success", "complete")
    assert view["in_flight"] == []
    assert rows(view["phases"]) == expected_rows(len(RUNS) + 1)
    tasks = {task["id"]: task for task in view["tasks"]}
    assert {task_id: task["status"] for task_id, task in tasks.items()} == dict.fromkeys(
        ["T1", "T2", "T3", "T4", "T5"], "passed"
    )
    assert tasks["T2"]["attempts"] == 1  # the failed first check, counted once
    log = git_log(ws)
    assert [subject for _, subject in log] == ["start", *subjects(list(PASSED_AT.values()))]
    for commit, subject in log[1:]:
        task_id = subject.split(":")[0]
        assert tasks[task_id]["commit"] == commit
        changed = scenario.git(ws, "show", "--name-only", "--format=", commit).split()
        assert changed == [scenario.FILES[task_id][0]]
    return view


def kill_and_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str], db: str, no: int) -> None:
    ws, run_id = run_until_killed(tmp_path, capsys, db, no)
    before = check_killed(capsys, db, run_id, ws, no)
    result = resume(capsys, db, run_id)
    assert (result["status"], result["stop_reason"]) == ("ok", "success")
    assert result["answer"].endswith("after 18 phase runs; 5 of 5 tasks passed")
    after = check_finished(capsys, db, run_id, ws)
    assert after["phases"][: no - 1] == before["phases"]  # not run again
    stored = cli_json(capsys, "show", run_id, "--db", db)
    assert stored["segments"] == 2
    # every call ended once: none before the kill was made again, and the killed one once
    expected = {n: run[4] for n, run in enumerate(RUNS, 1) if run[4]}
    expected[no] = [*expected.get(no, []), "crash"]
    assert calls_by_step(stored) == expected


@pytest.mark.parametrize("no", KILLED.values(), ids=KILLED.keys())
def test_a_killed_phase_run_resumes_where_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no: int
) -> None:
    kill_and_resume(tmp_path, capsys, f"sqlite:///{tmp_path / 'runs.db'}", no)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A URL whose ``search_path`` is a fresh, empty schema; dropped after the test."""
    base = os.environ.get("TEST_PG_URL", "postgresql://postgres@127.0.0.1/test")
    schema = f"td_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(base, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    yield f"{base}{'&' if '?' in base else '?'}options={quote(f'-csearch_path={schema}')}"
    with psycopg.connect(base, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def test_a_killed_verification_resumes_on_postgresql(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pg_url: str
) -> None:
    kill_and_resume(tmp_path, capsys, pg_url, KILLED["completeness_verification"])
