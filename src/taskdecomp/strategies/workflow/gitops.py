"""Git in a workflow's workspace: each passed task is committed with its id in the message.

Only the task's own changed paths are committed (a pathspec limits the commit), so work
staged or left by anything else stays out of it. The ``git`` command line is used as it is;
a workspace without an identity configured commits as ``taskdecomp``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from taskdecomp.errors import ConfigError

_IDENTITY = ("-c", "user.name=taskdecomp", "-c", "user.email=taskdecomp@localhost")


def is_repository(root: Path) -> bool:
    """Whether ``root`` is the top of a git work tree."""
    try:
        top = _git(root, "rev-parse", "--show-toplevel")
    except ConfigError:
        return False
    return Path(top).resolve() == root.resolve()


def commit_task(root: Path, task_id: str, title: str, paths: Sequence[str]) -> str | None:
    """Commit ``paths`` as task ``task_id``; return the commit's id, or ``None`` if nothing changed.

    Raises:
        ConfigError: git refused (the message is git's own, on one line).
    """
    if not paths:
        return None
    literal = "--literal-pathspecs"  # a file named ':!x' is a file, not a pattern
    _git(root, literal, "add", "--all", "--", *paths)
    staged = _git(root, literal, "diff", "--cached", "--name-only", "--", *paths)
    if not staged.strip():
        return None
    identity = () if _has_identity(root) else _IDENTITY
    message = task_message(task_id, title)
    _git(root, literal, *identity, "commit", "--quiet", "--no-verify", "-m", message, "--", *paths)
    return _git(root, "rev-parse", "HEAD")


def changed_paths(root: Path) -> list[str]:
    """Paths that differ from the last commit, untracked files included (sorted)."""
    listed = _git(root, "status", "--porcelain=v1", "-z", "--untracked-files=all", strip=False)
    paths: set[str] = set()
    entries = iter(listed.split("\x00"))
    for entry in entries:
        if len(entry) < 4:
            continue
        paths.add(entry[3:])
        if entry[0] in "RC":  # a rename names its source next
            paths.add(next(entries, ""))
    return sorted(path for path in paths if path)


def task_message(task_id: str, title: str) -> str:
    """The commit message of a passed task."""
    return f"{task_id}: {title}"


def head(root: Path) -> str | None:
    """The current commit, or ``None`` before the first one."""
    try:
        return _git(root, "rev-parse", "--verify", "--quiet", "HEAD") or None
    except ConfigError:
        return None


def find_commit(root: Path, message: str, *, since: str | None) -> str | None:
    """The newest commit after ``since`` (all, when ``None``) whose message is ``message``."""
    span = f"{since}..HEAD" if since else "HEAD"
    try:
        listed = _git(root, "log", "--format=%H%x00%s", span)
    except ConfigError:
        return None  # no commit yet
    for row in listed.splitlines():
        commit, _, subject = row.partition("\x00")
        if subject == message:
            return commit
    return None


def _has_identity(root: Path) -> bool:
    try:
        return bool(_git(root, "config", "user.email"))
    except ConfigError:
        return False


def _git(root: Path, *args: str, strip: bool = True) -> str:
    try:
        done = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"cannot run git in {str(root)!r}: {exc}") from exc
    if done.returncode != 0:
        problem = " ".join((done.stderr or done.stdout).split()) or f"exit {done.returncode}"
        command = next((arg for arg in args if not arg.startswith("-") and "=" not in arg), "")
        raise ConfigError(f"git {command} failed in {str(root)!r}: {problem}")
    return done.stdout.strip() if strip else done.stdout
