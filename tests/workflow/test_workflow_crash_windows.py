"""A workflow killed in the narrow windows around its checkpoints resumes without a trace.

Three windows, each hit with SIGKILL in a child running the scenario's ``default`` workflow
under ``--durability sync``, then closed by ``taskdecomp resume``:

- **Passed, not committed**: a task's spec check passed and was stored, and the process dies
  before ``git commit`` makes the commit. A ``prepare-commit-msg`` hook in the workspace
  repository kills the workflow and fails, so git makes no commit. The resume commits it.
- **Committed, not recorded**: the commit is made and the process dies before it stores the
  commit's id. A ``post-commit`` hook kills the workflow. The resume finds the commit (it
  does not commit twice) and records it.
- **Step stored, state not**: the process dies inside a phase run's checkpoint, right after
  its step row is written and before the workflow state is. The two are one transaction,
  so neither is kept, and the first resume finishes the phase run: with the changes it
  made since its start (its starting snapshot outlives its end until that end is stored),
  so a task's files are still committed.

The task commits use ``--no-verify``, which skips the ``pre-commit`` and ``commit-msg``
hooks but not ``prepare-commit-msg`` nor ``post-commit``. A hook kills the leader of its
process group: the child is started in a session of its own, so that is the workflow's
process (git and the hook only inherit the group).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.workflow import scenario
from tests.workflow.test_workflow_resume import (
    EXE,
    LEASE_SECONDS,
    PASSED_AT,
    RUNS,
    calls_by_step,
    check_finished,
    check_killed,
    cli_json,
    expected_rows,
    git_log,
    pg_url,  # noqa: F401  (a fixture, used by name)
    resume,
    rows,
    subjects,
)

PASSED = {task_id: no for no, task_id in PASSED_AT.items()}
"""The step whose spec check passed each task."""

KILL_AT_COMMIT = '''#!{python}
"""Kill the workflow (SIGKILL) at task {task_id}'s commit, the first time; then fail."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

MARKER = Path({marker!r})


def subject() -> str:
    if len(sys.argv) > 1:  # prepare-commit-msg: the message file of the commit to come
        return Path(sys.argv[1]).read_text().partition("\\n")[0]
    log = ["git", "log", "-1", "--format=%s"]  # post-commit: the commit just made
    return subprocess.run(log, capture_output=True, text=True, check=True).stdout.strip()


def gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{{pid}}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


if subject().startswith("{task_id}:") and not MARKER.exists():
    leader = os.getpgid(0)
    argv = Path(f"/proc/{{leader}}/cmdline").read_bytes().split(b"\\0")
    if not any(arg.endswith(b"/taskdecomp") for arg in argv):  # never anything else
        sys.exit(f"the process group's leader {{leader}} is not taskdecomp: {{argv!r}}")
    MARKER.touch()
    os.kill(leader, signal.SIGKILL)
    for _ in range(1000):  # dead before git goes on, so it never sees git's answer
        if gone(leader):
            break
        time.sleep(0.01)
    sys.exit(1)  # prepare-commit-msg: git makes no commit; post-commit: it is made already
'''

KILL_AFTER_STEP = '''"""The command line, killed (SIGKILL) once step {no}'s row is written."""

import os
import signal
import sys
from pathlib import Path

from taskdecomp.cli import main
from taskdecomp.store.sql import SqlStore

MARKER = Path({marker!r})
save_step = SqlStore.save_step


def save_step_then_die(self, run_id, entry, **kwargs):
    save_step(self, run_id, entry, **kwargs)
    if entry.step_no == {no}:
        MARKER.touch()
        os.kill(os.getpid(), signal.SIGKILL)


SqlStore.save_step = save_step_then_die
main(sys.argv[1:])
'''

KILLED_STEP = {
    "design_draft": 1,
    "design_review": 2,
    "task_spec_check": 9,  # T2's second check, which passes it
    "implement_task": 10,
    "completeness_verification": 14,  # the one that adds T5
    "code_review": 18,
}
"""The phase run whose step is cut off from its state, for each phase."""


def run_until_killed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], db: str, command: list[str]
) -> str:
    """Run the workflow over ``tmp_path/ws`` with ``command``, in a child leading a session
    of its own, until it is killed; the run's id."""
    model = scenario.write_script(tmp_path / "script.json")
    argv = [
        *command, "workflow", "run", "default", "--workspace", str(tmp_path / "ws"),
        "--input", str(tmp_path / "design.md"), "--model", model, "--min-tasks", "3",
        "--db", db, "--durability", "sync", "--json",
    ]  # fmt: skip
    env = {**os.environ, "TASKDECOMP_LEASE_SECONDS": LEASE_SECONDS}
    child = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=120, check=False,
        start_new_session=True,
    )  # fmt: skip
    assert child.returncode == -signal.SIGKILL, (child.returncode, child.stderr)
    assert (tmp_path / "killed").exists()
    runs = cli_json(capsys, "runs", "--db", db)
    assert [run["status"] for run in runs] == ["running"]
    return str(runs[0]["run_id"])


def install_hook(tmp_path: Path, hook: str, task_id: str) -> None:
    """Make the workspace repository run ``hook``, which kills the workflow at ``task_id``."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    script = hooks / hook
    script.write_text(
        KILL_AT_COMMIT.format(
            python=sys.executable, task_id=task_id, marker=str(tmp_path / "killed")
        )
    )
    script.chmod(0o755)
    scenario.git(tmp_path / "ws", "config", "core.hooksPath", str(hooks))  # not the global one


def kill_at_commit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], db: str, hook: str, task_id: str
) -> tuple[Path, str, dict[str, Any]]:
    """Run the workflow until ``hook`` kills it at ``task_id``'s commit.

    Returns:
        The workspace, the run's id and its view: the task passed, no commit recorded.
    """
    ws, _ = scenario.make_workspace(tmp_path)
    install_hook(tmp_path, hook, task_id)
    run_id = run_until_killed(tmp_path, capsys, db, [str(EXE)])
    view: dict[str, Any] = cli_json(capsys, "workflow", "show", run_id, "--db", db)
    assert view["status"] == "running" and view["stop_reason"] is None
    assert (view["phase"], view["in_flight"]) == ("implement_task", [])
    assert rows(view["phases"]) == expected_rows(PASSED[task_id] + 1)
    task = {task["id"]: task for task in view["tasks"]}[task_id]
    assert (task["status"], task["commit"]) == ("passed", None)
    return ws, run_id, view


def resume_to_the_end(
    capsys: pytest.CaptureFixture[str], db: str, run_id: str, ws: Path, before: dict[str, Any]
) -> dict[str, Any]:
    """Resume once; the run ends as one never killed: each phase run and call once."""
    result = resume(capsys, db, run_id)
    assert (result["status"], result["stop_reason"]) == ("ok", "success")
    assert result["answer"].endswith("after 18 phase runs; 5 of 5 tasks passed")
    after = check_finished(capsys, db, run_id, ws)
    assert after["phases"][: len(before["phases"])] == before["phases"]  # not run again
    stored = cli_json(capsys, "show", run_id, "--db", db)
    assert stored["segments"] == 2
    assert calls_by_step(stored) == {no: run[4] for no, run in enumerate(RUNS, 1) if run[4]}
    return after


def committed_before(task_id: str) -> list[str]:
    """The tasks committed before ``task_id``'s commit, in order."""
    return [passed for no, passed in PASSED_AT.items() if no < PASSED[task_id]]


@pytest.mark.parametrize("task_id", ["T2", "T5"])
def test_a_task_passed_but_not_committed_is_committed_on_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], task_id: str
) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    ws, run_id, before = kill_at_commit(tmp_path, capsys, db, "prepare-commit-msg", task_id)
    expected = ["start", *subjects(committed_before(task_id))]
    assert [subject for _, subject in git_log(ws)] == expected  # no commit of the task
    resume_to_the_end(capsys, db, run_id, ws, before)


@pytest.mark.parametrize("task_id", ["T2", "T5"])
def test_a_commit_made_but_not_recorded_is_found_on_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], task_id: str
) -> None:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    ws, run_id, before = kill_at_commit(tmp_path, capsys, db, "post-commit", task_id)
    log = git_log(ws)
    assert [subject for _, subject in log] == [
        "start", *subjects([*committed_before(task_id), task_id])
    ]  # fmt: skip
    made = log[-1][0]  # the kill came before the run stored it
    after = resume_to_the_end(capsys, db, run_id, ws, before)
    assert {task["id"]: task["commit"] for task in after["tasks"]}[task_id] == made


def kill_after_step(tmp_path: Path, capsys: pytest.CaptureFixture[str], db: str, no: int) -> None:
    script = tmp_path / "kill_after_step.py"
    script.write_text(KILL_AFTER_STEP.format(no=no, marker=str(tmp_path / "killed")))
    ws, _ = scenario.make_workspace(tmp_path)
    run_id = run_until_killed(tmp_path, capsys, db, [sys.executable, str(script)])
    before = check_killed(capsys, db, run_id, ws, no)  # neither the step nor the state kept
    resume_to_the_end(capsys, db, run_id, ws, before)


@pytest.mark.parametrize("no", KILLED_STEP.values(), ids=KILLED_STEP.keys())
def test_a_step_cut_off_from_its_state_resumes_at_the_first_try(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no: int
) -> None:
    kill_after_step(tmp_path, capsys, f"sqlite:///{tmp_path / 'runs.db'}", no)


def test_a_step_cut_off_from_its_state_resumes_on_postgresql(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    pg_url: str,  # noqa: F811  (the fixture imported above)
) -> None:
    kill_after_step(tmp_path, capsys, pg_url, KILLED_STEP["task_spec_check"])
