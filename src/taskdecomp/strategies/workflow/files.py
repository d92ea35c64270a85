"""The agent's workspace tools: list, read, search, write, replace in a file, delete.

They are ordinary tools (:class:`~taskdecomp.tools.Toolset`), so every call goes through the
gateway like any other. Every path is checked by the :class:`Workspace`, and every change
against the scope the runner gives for the current phase and task, *before* anything is
touched. A refused or failed call returns ``{"ok": false, "refused": MESSAGE}`` (or
``"error"``) for the agent to read and act on, never an exception, which would stop the
whole run. Results are capped (a file's lines, search matches, listed entries) and are
strict JSON.

Side-effect classes, for a resume after a crash: ``write_file`` writes given content, so
doing it again changes nothing (``idempotent``); ``replace_in_file`` finds its old text gone
and its new text present when it already ran, and says so (``idempotent``);
``delete_file`` of a file already gone succeeds (``idempotent``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from taskdecomp.strategies.workflow.workspace import PathRefused, Workspace, WriteScope
from taskdecomp.tools import Toolset, tool

MAX_READ_LINES = 400
MAX_LINE_CHARS = 2_000
MAX_MATCHES = 50
MAX_ENTRIES = 500
MAX_FILE_BYTES = 2_000_000
"""Files larger than this are not read or searched."""


def workspace_tools(
    ws: Workspace,
    scope: Callable[[], WriteScope],
    *,
    on_change: Callable[[], object] = lambda: None,
) -> Toolset:
    """The six tools, bound to ``ws``; ``scope()`` says what may be written at each call.

    ``on_change()`` is called after a tool changed a file.
    """

    def changing(call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        answer = _guarded(call)
        if answer.get("ok") and not answer.get("already"):
            on_change()
        return answer

    @tool(side_effects="read_only")
    def list_files(folder: str = ".") -> dict[str, Any]:
        """List the files under a workspace folder (relative paths, at most 500)."""
        return _guarded(lambda: _list(ws, folder))

    @tool(side_effects="read_only")
    def read_file(
        path: str, start_line: int = 1, max_lines: int = MAX_READ_LINES
    ) -> dict[str, Any]:
        """Read lines of a text file in the workspace, from start_line (1-based)."""
        return _guarded(lambda: _read(ws, path, start_line, max_lines))

    @tool(side_effects="read_only")
    def search_files(text: str, folder: str = ".") -> dict[str, Any]:
        """Find lines containing text in the workspace's files (at most 50 matches)."""
        return _guarded(lambda: _search(ws, text, folder))

    @tool(side_effects="idempotent")
    def write_file(path: str, content: str) -> dict[str, Any]:
        """Write a whole text file (created with its folders, or replaced)."""
        return changing(lambda: _write(ws, path, content, scope()))

    @tool(side_effects="idempotent")
    def replace_in_file(path: str, old: str, new: str) -> dict[str, Any]:
        """Replace the one occurrence of old text with new text in a file."""
        return changing(lambda: _replace(ws, path, old, new, scope()))

    @tool(side_effects="idempotent")
    def delete_file(path: str) -> dict[str, Any]:
        """Delete a file."""
        return changing(lambda: _delete(ws, path, scope()))

    tools: list[Callable[..., Any]] = [
        list_files,
        read_file,
        search_files,
        write_file,
        replace_in_file,
        delete_file,
    ]
    return Toolset.from_functions(tools, source="workspace")


def _guarded(call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return call()
    except PathRefused as exc:
        return {"ok": False, "refused": str(exc)}
    except (OSError, UnicodeError) as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def _list(ws: Workspace, folder: str) -> dict[str, Any]:
    root = ws.root if folder.strip() in ("", ".") else ws.resolve(folder)
    if not root.is_dir():
        return {"ok": False, "error": f"{folder!r} is not a folder"}
    files = sorted(_files(ws, root))
    return {"ok": True, "files": files[:MAX_ENTRIES], "truncated": len(files) > MAX_ENTRIES}


def _files(ws: Workspace, root: Path) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d.lower() != ".git")
        found += [ws.relative(Path(dirpath) / name) for name in filenames]
    return found


def _read(ws: Workspace, path: str, start_line: int, max_lines: int) -> dict[str, Any]:
    lines = _text(ws.resolve(path), path).splitlines()
    start = max(1, start_line)
    count = min(max(1, max_lines), MAX_READ_LINES)
    shown = [line[:MAX_LINE_CHARS] for line in lines[start - 1 : start - 1 + count]]
    return {
        "ok": True,
        "path": path,
        "start_line": start,
        "lines": shown,
        "total_lines": len(lines),
    }


def _search(ws: Workspace, text: str, folder: str) -> dict[str, Any]:
    if not text:
        return {"ok": False, "error": "give the text to search for"}
    root = ws.root if folder.strip() in ("", ".") else ws.resolve(folder)
    matches: list[dict[str, Any]] = []
    for relative in sorted(_files(ws, root)):
        try:
            content = _text(ws.resolve(relative), relative)
        except (PathRefused, OSError, UnicodeError):
            continue  # binary, too large, or a link out: not searched
        for number, line in enumerate(content.splitlines(), start=1):
            if text in line:
                matches.append({"path": relative, "line": number, "text": line[:MAX_LINE_CHARS]})
                if len(matches) >= MAX_MATCHES:
                    return {"ok": True, "matches": matches, "truncated": True}
    return {"ok": True, "matches": matches, "truncated": False}


def _write(ws: Workspace, path: str, content: str, scope: WriteScope) -> dict[str, Any]:
    ws.write_text(path, content, scope)
    return {"ok": True, "path": path, "bytes": len(content.encode())}


def _replace(ws: Workspace, path: str, old: str, new: str, scope: WriteScope) -> dict[str, Any]:
    real = ws.check_write(path, scope)
    if not old:
        return {"ok": False, "error": "give the old text to replace"}
    if old in new:  # a replay could not tell whether it ran: write the whole file instead
        return {
            "ok": False,
            "error": "the new text contains the old text; write the whole file with write_file",
        }
    content = _text(real, path)
    found = content.count(old)
    if found == 0 and new and new in content:
        return {"ok": True, "path": path, "already": True}  # the same call ran before
    if found != 1:
        return {
            "ok": False,
            "error": f"the old text occurs {found} times in {path!r}; it must occur once",
        }
    ws.write_text(path, content.replace(old, new, 1), scope)
    return {"ok": True, "path": path}


def _delete(ws: Workspace, path: str, scope: WriteScope) -> dict[str, Any]:
    real = ws.check_write(path, scope)
    if real.is_dir() and not real.is_symlink():
        return {"ok": False, "error": f"{path!r} is a folder; delete its files"}
    if not real.exists() and not real.is_symlink():
        return {"ok": True, "path": path, "already": True}
    real.unlink()
    return {"ok": True, "path": path}


def _text(real: Path, path: str) -> str:
    if not real.is_file():
        raise PathRefused(f"{path!r} is not a file")
    if real.stat().st_size > MAX_FILE_BYTES:
        raise PathRefused(f"{path!r} is larger than {MAX_FILE_BYTES} bytes")
    data = real.read_bytes()
    if b"\x00" in data[:8192]:
        raise PathRefused(f"{path!r} is a binary file")
    return data.decode("utf-8")
