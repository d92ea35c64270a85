"""Writes an agent asks for: the path-escape corpus, globs, and nothing written outside."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from taskdecomp.strategies.workflow.workspace import (
    PathRefused,
    Workspace,
    WriteScope,
    glob_match,
)

SCOPE = WriteScope(files_allowed=("src/**", "docs/*.md"), allowed_writes=(".taskdecomp/*",))


@pytest.fixture
def outer(tmp_path: Path) -> Path:
    """A folder around the workspace, with secrets beside it and links both ways."""
    ws = tmp_path / "ws"
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src2").mkdir()
    (ws / "docs").mkdir()
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / "src" / "pkg" / "mod.py").write_text("x = 1\n")
    (ws / "README.md").write_text("readme\n")
    (tmp_path / "secret.txt").write_text("secret\n")
    (tmp_path / "elsewhere").mkdir()
    (ws / "src" / "out").symlink_to(tmp_path / "elsewhere")  # a folder link out
    (ws / "src" / "secret_link").symlink_to(tmp_path / "secret.txt")  # a file link out
    (ws / "src" / "readme_link").symlink_to(ws / "README.md")  # in, to a file out of scope
    (ws / "src" / "pkg_link").symlink_to(ws / "src" / "pkg")  # in, to a folder in scope
    (ws / "src" / "dangling").symlink_to(tmp_path / "new_secret.txt")  # dangling, out
    return tmp_path


def snapshot(folder: Path) -> dict[str, str]:
    found = {}
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        for name in filenames + dirnames:
            path = Path(dirpath) / name
            if path.is_symlink():
                found[str(path)] = "link:" + os.readlink(path)
            elif path.is_file():
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                found[str(path)] = "dir"
    return found


ESCAPES = [
    "../secret.txt",
    "../../etc/passwd",
    "src/../../secret.txt",
    "src/pkg/../../../secret.txt",
    "./../secret.txt",
    "src/./../../secret.txt",
    "..",
    "../ws/src/x.py",  # climbs out and back in: still refused
    "/etc/passwd",
    "/tmp/x",
    "//server/share/x",
    "C:/Windows/win.ini",
    "c:x",
    "src\\..\\..\\secret.txt",
    "src\\pkg\\x.py",
    "src/out/x.py",  # through a folder link pointing out
    "src/out/../../secret.txt",
    "src/secret_link",  # a file link pointing out
    "src/dangling",  # a dangling link pointing out
    ".git/config",
    ".git/hooks/pre-commit",
    ".GIT/config",
    "src/.git/x",
    "src/pkg/.Git/HEAD",
    "src/x\x00.py",
    "\x00",
    "",
    "   ",
    "src/" + "a" * 300 + ".py",
    "src/" + "d/" * 600 + "x.py",
    "src2/x.py",  # src2 is not src/**
    "SRC/pkg/mod.py",  # another case is another path
    "Src/x.py",
    "README.md",  # outside the scope
    "src/readme_link",  # a link inside, to a file outside the scope
    "docs/sub/deep.md",  # * does not cross folders
    "docs/notes.txt",
    ".taskdecomp/tasks.json",  # the runner's own state
    ".taskdecomp/status.json",
    ".taskdecomp/sub/x.md",
    "src",  # a folder
    "docs/",
]


@pytest.mark.parametrize("path", ESCAPES)
def test_a_write_out_of_scope_is_refused_and_nothing_changes(outer: Path, path: str) -> None:
    ws = Workspace(outer / "ws")
    before = snapshot(outer)
    with pytest.raises(PathRefused) as refused:
        ws.write_text(path, "pwned", SCOPE)
    assert str(refused.value)  # a message the agent sees
    assert snapshot(outer) == before


def test_the_corpus_is_large() -> None:
    assert len(ESCAPES) >= 30


@pytest.mark.parametrize(
    ("path", "lands"),
    [
        ("src/pkg/mod.py", "src/pkg/mod.py"),
        ("src/new/deep/file.py", "src/new/deep/file.py"),
        ("src/pkg_link/mod.py", "src/pkg/mod.py"),  # a link inside, to a folder in scope
        ("./src/x.py", "src/x.py"),
        ("docs/guide.md", "docs/guide.md"),
        (".taskdecomp/task-feedback.md", ".taskdecomp/task-feedback.md"),
        ("src/café.py", "src/café.py"),
    ],
)
def test_a_write_in_scope_lands_where_it_says(outer: Path, path: str, lands: str) -> None:
    ws = Workspace(outer / "ws")
    written = ws.write_text(path, "ok\n", SCOPE)
    assert written == outer / "ws" / lands and written.read_text() == "ok\n"
    assert not list((outer / "ws").rglob("*.taskdecomp-tmp"))


def test_a_read_only_scope_refuses_every_write_and_says_so(outer: Path) -> None:
    ws = Workspace(outer / "ws")
    with pytest.raises(PathRefused, match="this phase is read-only"):
        ws.write_text("src/pkg/mod.py", "x", WriteScope())


def test_resolve_allows_reading_anywhere_inside_but_not_out(outer: Path) -> None:
    ws = Workspace(outer / "ws")
    assert ws.resolve("README.md") == outer / "ws" / "README.md"
    with pytest.raises(PathRefused, match="outside the workspace"):
        ws.resolve("src/secret_link")


@pytest.mark.parametrize(
    ("glob", "path", "matches"),
    [
        ("src/**", "src/a/b.py", True),
        ("src/**", "src/x", True),
        ("src/**", "src2/x", False),
        ("src/**/*.py", "src/x.py", True),
        ("src/**/*.py", "src/a/b/c.py", True),
        ("src/**/*.py", "src/a/b/c.txt", False),
        ("src/*.py", "src/a/b.py", False),
        ("docs/?.md", "docs/a.md", True),
        ("docs/?.md", "docs/ab.md", False),
        ("tests/test_[ab].py", "tests/test_a.py", True),
        ("tests/test_[!ab].py", "tests/test_a.py", False),
        ("a+b(c).py", "a+b(c).py", True),
        ("src/**", "SRC/x", False),
    ],
)
def test_globs(glob: str, path: str, matches: bool) -> None:
    assert glob_match(glob, path) is matches
