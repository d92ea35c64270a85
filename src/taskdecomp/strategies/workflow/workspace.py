"""The workspace a workflow works in, and the check every write passes before it happens.

A path from an agent is untrusted: :meth:`Workspace.resolve` refuses anything that is not a
plain relative path inside the workspace (absolute paths, drive letters, backslashes, ``..``,
NUL, over-long names), then resolves it on disk and refuses it when the real path leaves the
workspace (a symlink pointing out, or a symlinked folder on the way). ``.git`` is never
writable, in any case. :meth:`Workspace.check_write` then matches the real path, relative to
the workspace, against the scope's globs: the current task's ``filesAllowed`` and the
phase's ``allowed_writes``. Matching is exact, character for character: ``SRC/x`` is not in
``src/**`` and a name in another Unicode normal form is another file. The runner's own
files (``.taskdecomp/tasks.json``, ``.taskdecomp/status.json``) are written only through the
state tools, never as files.

Globs: ``*`` and ``?`` stay within one path segment, ``**`` crosses segments (``src/**``
matches ``src/a/b.py`` but not ``src2/x``; ``**/`` may match no folder at all), ``[abc]``
is a character class.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath

from taskdecomp.strategies.workflow.tasklist import glob_problem

MAX_PATH_CHARS = 1024
MAX_NAME_CHARS = 255
STATE_FILES = frozenset({".taskdecomp/tasks.json", ".taskdecomp/status.json"})
"""Written by the runner only."""
TEMPORARY_SUFFIX = ".taskdecomp-tmp"
"""A write goes to ``.NAME.taskdecomp-tmp`` first, then is renamed onto ``NAME``."""
RUNNER_DIR = ".taskdecomp/run/"
"""The runner's own working files (a phase's starting snapshot); never written by agents."""


class PathRefused(ValueError):
    """A path an agent gave is refused; the message is for the agent."""


@dataclass(frozen=True, kw_only=True, slots=True)
class WriteScope:
    """What may be written now."""

    files_allowed: tuple[str, ...] = ()
    """The current task's globs."""
    allowed_writes: tuple[str, ...] = ()
    """The phase's globs."""

    @property
    def globs(self) -> tuple[str, ...]:
        """Every glob a write may match."""
        return self.files_allowed + self.allowed_writes


class Workspace:
    """A folder a workflow may read and, within a scope, write.

    Args:
        root: the folder; it must exist.

    Raises:
        PathRefused: ``root`` is not a folder.
    """

    def __init__(self, root: Path) -> None:
        real = Path(os.path.realpath(root))
        if not real.is_dir():
            raise PathRefused(f"the workspace {str(root)!r} is not a folder")
        self.root = real

    def resolve(self, path: str) -> Path:
        """The real path of ``path``, which must stay inside the workspace.

        Raises:
            PathRefused: the path is malformed or leaves the workspace; the message says why.
        """
        relative = _plain(path)
        real = Path(os.path.realpath(self.root / relative))
        if not self._inside(real):
            raise PathRefused(f"{path!r} leads outside the workspace (through a link)")
        if any(part.lower() == ".git" for part in real.relative_to(self.root).parts):
            raise PathRefused(f"{path!r} is inside .git, which is never writable")
        return real

    def _inside(self, real: Path) -> bool:
        return real == self.root or self.root in real.parents

    def relative(self, real: Path) -> str:
        """``real`` (inside the workspace) as a workspace path with ``/``."""
        return real.relative_to(self.root).as_posix()

    def check_write(self, path: str, scope: WriteScope) -> Path:
        """The real path to write ``path`` at, if the scope allows it.

        Raises:
            PathRefused: the path is refused or outside the scope; the message lists what
                may be written.
        """
        real = self.resolve(path)
        relative = self.relative(real)
        folded = relative.casefold()  # a case-insensitive disk has one file for both
        if real == self.root or folded in STATE_FILES or folded.startswith(RUNNER_DIR):
            raise PathRefused(f"{path!r} is not a file this phase may write")
        if not any(glob_match(glob, relative) for glob in scope.globs):
            allowed = ", ".join(scope.globs) or "nothing (this phase is read-only)"
            raise PathRefused(f"{path!r} is outside what may be written now: {allowed}")
        return real

    def write_text(self, path: str, text: str, scope: WriteScope) -> Path:
        """Check, then write ``text`` to ``path`` (through a temporary file and a rename).

        Raises:
            PathRefused: the write is refused; nothing was written.
        """
        real = self.check_write(path, scope)
        real.parent.mkdir(parents=True, exist_ok=True)
        if not self._inside(Path(os.path.realpath(real.parent))):  # a folder swapped meanwhile
            raise PathRefused(f"{path!r} leads outside the workspace")
        write_new(real, text)
        return real


def write_new(path: Path, text: str) -> None:
    """Write ``path`` through a fresh temporary file beside it, renamed onto it.

    The temporary file is created anew, never followed if something (a link) is in its
    place, so the write lands in the folder it was checked for.

    Raises:
        PathRefused: a folder is in the temporary file's place.
    """
    temporary = path.with_name(f".{path.name}{TEMPORARY_SUFFIX}")
    if temporary.is_dir() and not temporary.is_symlink():
        raise PathRefused(f"{temporary.name!r} is a folder where a write needs its temporary file")
    if temporary.is_symlink() or temporary.exists():
        temporary.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    descriptor = os.open(temporary, flags, 0o644)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(temporary, path)


def glob_match(glob: str, path: str) -> bool:
    """Whether workspace path ``path`` matches ``glob`` (see the module docstring)."""
    return _compiled(glob).fullmatch(path) is not None


@lru_cache(maxsize=512)
def _compiled(glob: str) -> re.Pattern[str]:
    out, index = [], 0
    while index < len(glob):
        char = glob[index]
        if glob.startswith("**/", index):
            out.append("(?:.*/)?")
            index += 3
        elif glob.startswith("**", index):
            out.append(".*")
            index += 2
        elif char == "*":
            out.append("[^/]*")
            index += 1
        elif char == "?":
            out.append("[^/]")
            index += 1
        elif char == "[" and "]" in glob[index + 2 :]:
            end = glob.index("]", index + 2)
            body = glob[index + 1 : end].replace("\\", "\\\\")
            out.append(f"[{'^' + body[1:] if body.startswith('!') else body}]")
            index = end + 1
        else:
            out.append(re.escape(char))
            index += 1
    return re.compile("".join(out), re.DOTALL)


def _plain(path: str) -> PurePosixPath:
    """``path`` as a relative path with no tricks in it, or a refusal saying which."""
    if not isinstance(path, str) or not path.strip():
        raise PathRefused("give a path relative to the workspace")
    if len(path) > MAX_PATH_CHARS:
        raise PathRefused(f"the path is {len(path)} characters; the most is {MAX_PATH_CHARS}")
    if "\\" in path:
        raise PathRefused(f"{path!r} contains a backslash; separate folders with '/'")
    problem = glob_problem(path)
    if problem is not None:
        raise PathRefused(problem.replace("glob", "path"))
    relative = PurePosixPath(path)
    if any(len(part) > MAX_NAME_CHARS for part in relative.parts):
        raise PathRefused(f"a name in {path[:80]!r}... is longer than {MAX_NAME_CHARS} characters")
    return relative
