"""What a phase changed: snapshots catch writes made behind the tools; git commits a task."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from taskdecomp.errors import ConfigError
from taskdecomp.strategies.workflow.gitops import commit_task, is_repository
from taskdecomp.strategies.workflow.snapshot import changes, out_of_scope, snapshot
from taskdecomp.strategies.workflow.workspace import WriteScope

SCOPE = WriteScope(files_allowed=("src/pkg/*.py",), allowed_writes=(".taskdecomp/*",))


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "a.py").write_text("a = 1\n")
    (root / "README.md").write_text("readme\n")
    return root


def test_a_write_behind_the_tools_is_caught_with_its_path(ws: Path) -> None:
    before = snapshot(ws)
    (ws / "src" / "pkg" / "a.py").write_text("a = 2\n")  # in scope
    (ws / "src" / "pkg" / "b.py").write_text("b = 1\n")  # in scope
    (ws / "README.md").write_text("changed by a test run\n")  # out of scope
    (ws / "setup.cfg").write_text("[x]\n")  # out of scope
    (ws / ".taskdecomp").mkdir()
    (ws / ".taskdecomp" / "status.json").write_text("{}")  # the runner's: not counted
    (ws / ".taskdecomp" / "notes.md").write_text("n")  # allowed
    found = changes(before, snapshot(ws))
    assert found.added == (".taskdecomp/notes.md", "setup.cfg", "src/pkg/b.py")
    assert found.modified == ("README.md", "src/pkg/a.py") and found.deleted == ()
    assert out_of_scope(found, SCOPE) == ["README.md", "setup.cfg"]


def test_deletions_links_and_git_are_seen_or_skipped(ws: Path, tmp_path: Path) -> None:
    (ws / ".git").mkdir()
    before = snapshot(ws)
    (ws / "README.md").unlink()
    (ws / "src" / "link").symlink_to(tmp_path)
    (ws / ".git" / "index").write_text("x")
    found = changes(before, snapshot(ws))
    assert (found.added, found.deleted) == (("src/link",), ("README.md",))
    assert out_of_scope(found, SCOPE) == ["README.md", "src/link"]


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def repo(ws: Path) -> Path:
    git(ws, "init", "-q")
    git(ws, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    git(ws, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    return ws


def test_a_passed_task_is_committed_with_its_id_and_only_its_paths(repo: Path) -> None:
    (repo / "src" / "pkg" / "a.py").write_text("a = 2\n")
    (repo / "src" / "pkg" / "new.py").write_text("n = 1\n")
    (repo / "README.md").write_text("someone else's edit\n")
    sha = commit_task(repo, "T3", "Add the parser", ["src/pkg/a.py", "src/pkg/new.py"])
    assert sha == git(repo, "rev-parse", "HEAD")
    assert git(repo, "log", "-1", "--format=%s") == "T3: Add the parser"
    assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == [
        "src/pkg/a.py",
        "src/pkg/new.py",
    ]
    assert git(repo, "status", "--porcelain") == "M README.md"  # left as it was


def test_a_task_that_changed_nothing_makes_no_commit(repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    assert commit_task(repo, "T1", "Nothing", ["src/pkg/a.py"]) is None
    assert commit_task(repo, "T1", "Nothing", []) is None
    assert git(repo, "rev-parse", "HEAD") == head


def test_a_deleted_file_is_committed_as_deleted(repo: Path) -> None:
    (repo / "src" / "pkg" / "a.py").unlink()
    assert commit_task(repo, "T2", "Drop a", ["src/pkg/a.py"]) is not None
    assert git(repo, "show", "--name-status", "--format=", "HEAD") == "D\tsrc/pkg/a.py"


def test_only_the_top_of_a_work_tree_is_a_repository(repo: Path, tmp_path: Path) -> None:
    assert is_repository(repo)
    assert not is_repository(repo / "src")
    (tmp_path / "plain").mkdir()
    assert not is_repository(tmp_path / "plain")


def test_a_git_failure_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "x").write_text("x")
    with pytest.raises(ConfigError, match="git add failed") as failed:
        commit_task(tmp_path / "plain", "T1", "x", ["x"])
    assert "\n" not in str(failed.value)
