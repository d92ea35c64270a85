"""The workflow example runs as the README says: a design, five checked tasks, a package."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.clitools import cli
from tests.conftest import EXAMPLES, ROOT

COPY = "cp -r examples/workflow/workspace /tmp/calc"
COMMAND = (
    "taskdecomp workflow run --workspace /tmp/calc --input examples/workflow/design.md "
    "--model scripted:examples/workflow/script.json --min-tasks 3"
)
MODULES = ("add", "sub", "mul", "div")


@pytest.fixture(autouse=True)
def readme_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")  # as the README's output; no line wraps early


def readme_example(workspace: Path) -> list[str]:
    """The README's command, its paths made to work from any directory."""
    argv = shlex.split(COMMAND)[1:]
    argv = [arg.replace("/tmp/calc", str(workspace)) for arg in argv]
    return [re.sub(r"^(scripted:)?examples/", rf"\g<1>{EXAMPLES}/", arg) for arg in argv]


def run_example(capsys: pytest.CaptureFixture[str], workspace: Path) -> dict[str, Any]:
    """Run the README's command over ``workspace``; return `workflow show --json` of the run."""
    code, out, err = cli(capsys, *readme_example(workspace))
    assert code == 0, out + err
    assert "workflow 'default' reached 'complete' after 18 phase runs; 5 of 5 tasks passed" in out
    found = re.search(r"workflow run (\w+) ok stop_reason=success", out)
    assert found is not None, out
    code, shown, err = cli(capsys, "workflow", "show", found.group(1), "--json")
    assert code == 0, err
    view: dict[str, Any] = json.loads(shown)
    return view


def test_the_readme_shows_the_command_the_tests_run() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    flat = " ".join(readme.replace("\\\n", " ").split())
    assert f"{COPY} && {COMMAND}" in flat


def test_the_example_builds_the_package_task_by_task(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    workspace = tmp_path / "calc"
    shutil.copytree(EXAMPLES / "workflow" / "workspace", workspace)
    view = run_example(capsys, workspace)

    assert (view["status"], view["stop_reason"], view["phase"]) == ("ok", "success", "complete")
    tasks = {task["id"]: task for task in view["tasks"]}
    assert list(tasks) == ["T1", "T2", "T3", "T4", "T5"]  # T5 added by completeness
    assert {task["status"] for task in tasks.values()} == {"passed"}
    assert tasks["T2"]["attempts"] == 1  # its first spec check failed it, with feedback
    assert tasks["T2"]["feedback"] == "sub(3, 1) returns 4, not 2: it adds"
    assert all(task["commit"] is None for task in tasks.values())  # not a git repository
    phases = [(run["phase"], run["task"]) for run in view["phases"]]
    assert phases.count(("implement_task", "T2")) == 2
    assert phases[-1] == ("code_review", None)

    for name in MODULES:
        assert (workspace / "calc" / f"{name}.py").is_file()
        assert (workspace / "tests" / f"test_{name}.py").is_file()
    assert "from calc.sub import sub" in (workspace / "calc" / "__init__.py").read_text()
    state = json.loads((workspace / ".taskdecomp" / "status.json").read_text())
    assert state["phase"] == "complete" and state["attempts"] == {"T2": 1}
    listed = json.loads((workspace / ".taskdecomp" / "tasks.json").read_text())
    assert [task["status"] for task in listed["tasks"]] == ["passed"] * 5

    tested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "/dev/null"],
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "4 passed" in tested.stdout


def test_in_a_git_repository_each_passed_task_is_one_commit(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    workspace = tmp_path / "calc"
    shutil.copytree(EXAMPLES / "workflow" / "workspace", workspace)
    git(workspace, "init", "-q")
    view = run_example(capsys, workspace)

    commits = {task["id"]: task["commit"] for task in view["tasks"]}
    assert git(workspace, "rev-list", "--count", "HEAD") == "5"
    shown = git(workspace, "show", "--name-only", "--format=%s", commits["T2"]).splitlines()
    assert shown == ["T2: Add calc.sub", "", "calc/sub.py", "tests/test_sub.py"]
    shown = git(workspace, "show", "--name-only", "--format=%s", commits["T5"]).splitlines()
    assert shown == ["T5: Export the functions from calc", "", "calc/__init__.py"]
    untracked = git(workspace, "status", "--porcelain").splitlines()
    assert untracked == ["?? .taskdecomp/", "?? README.md"]  # only the tasks' files are committed


def git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
    return done.stdout.strip()
