"""Content snapshots of a workspace: what changed in a phase, however it was changed.

The workspace tools check every write before it happens; a snapshot after every phase
catches what changed any other way (a shell tool, a test run, a formatter). ``.git/`` and
the runner's own files (its state files and ``.taskdecomp/run/``) are left out.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from taskdecomp.strategies.workflow.workspace import (
    RUNNER_DIR,
    STATE_FILES,
    TEMPORARY_SUFFIX,
    WriteScope,
    glob_match,
)

Snapshot = Mapping[str, str]
"""Each file's workspace path and a digest of its content (``link:TARGET`` for a link)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Changes:
    """What differs between two snapshots, as sorted workspace paths."""

    added: tuple[str, ...]
    modified: tuple[str, ...]
    deleted: tuple[str, ...]

    @property
    def paths(self) -> tuple[str, ...]:
        """Every changed path, sorted."""
        return tuple(sorted(self.added + self.modified + self.deleted))


def snapshot(root: Path) -> dict[str, str]:
    """Digest every file under ``root`` (links are not followed; ``.git`` is skipped)."""
    found: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [name for name in dirnames if name.lower() != ".git"]
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            path = Path(dirpath) / name
            relative = path.relative_to(root).as_posix()
            if relative in STATE_FILES or relative.startswith(RUNNER_DIR):
                continue
            if name.endswith(TEMPORARY_SUFFIX):
                continue  # a write in progress, renamed onto its file in a moment
            try:
                found[relative] = _digest(path)
            except FileNotFoundError:
                continue  # removed while the snapshot was taken (another task's write)
    return found


def changes(before: Snapshot, after: Snapshot) -> Changes:
    """What ``after`` adds, modifies and deletes compared with ``before``."""
    return Changes(
        added=tuple(sorted(set(after) - set(before))),
        modified=tuple(sorted(p for p in set(before) & set(after) if before[p] != after[p])),
        deleted=tuple(sorted(set(before) - set(after))),
    )


def out_of_scope(found: Changes, scope: WriteScope) -> list[str]:
    """The changed paths no glob of ``scope`` allows (sorted)."""
    return [path for path in found.paths if not any(glob_match(g, path) for g in scope.globs)]


def _digest(path: Path) -> str:
    if path.is_symlink():
        return "link:" + os.readlink(path)
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()
