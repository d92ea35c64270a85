"""Toolset sources, found by the scheme of a ``--tools`` value.

``--tools tools.py`` and ``--tools my_package.tools`` load Python
(:mod:`~taskdecomp.toolsets.python`); ``--tools SCHEME:REST`` asks the source registered as
``SCHEME`` (``python:`` names the Python source explicitly). A source is a callable of
``REST`` that returns a :class:`~taskdecomp.tools.Toolset`; a package adds one through the
``taskdecomp.toolsets`` entry-point group. Every tool passes the same gateway whatever its
source.

Several ``--tools`` make one toolset (:func:`load_toolsets`); its source, stored with a run
so a resume loads the same tools, is the JSON list of theirs, which :func:`load_toolset`
reads back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from taskdecomp.errors import ToolsetError
from taskdecomp.plugins import Registry

if TYPE_CHECKING:
    from taskdecomp.tools import Toolset

ToolsetSource = Callable[[str], "Toolset"]
"""Builds a toolset from what follows ``scheme:`` in a ``--tools`` value."""

SOURCES: Registry[ToolsetSource] = Registry(
    group="taskdecomp.toolsets",
    kind="toolset source",
    builtins={
        "python": "taskdecomp.toolsets.python:load_python_toolset",
        "mcp": "taskdecomp.toolsets.mcp:load_stdio",
        "mcp+http": "taskdecomp.toolsets.mcp:load_http",
        "mcp+https": "taskdecomp.toolsets.mcp:load_https",
    },
    missing=ToolsetError,
)
"""Every toolset source, by scheme."""

__all__ = [
    "SOURCES",
    "ToolsetSource",
    "load_toolset",
    "load_toolsets",
    "merge_toolsets",
    "register_source",
]


def register_source(scheme: str, source: ToolsetSource) -> None:
    """Make ``--tools SCHEME:...`` load through ``source``."""
    SOURCES.register(scheme, source)


def load_toolset(spec: str | Path) -> Toolset:
    """The toolset ``spec`` names: ``SCHEME:REST`` for a registered source, else Python.

    A JSON list of such texts (the source of a merged toolset) loads each of them, merged.

    Raises:
        ToolsetError: it cannot be found, loaded, or holds no tool.
    """
    text = str(spec)
    if text.startswith("["):
        return load_toolsets(_listed_sources(text))
    scheme, sep, rest = text.partition(":")
    if sep and len(scheme) > 1 and scheme in SOURCES:  # one letter: a Windows drive
        return SOURCES.get(scheme)(rest)
    return SOURCES.get("python")(text)


def load_toolsets(specs: Sequence[str | Path]) -> Toolset:
    """The toolsets ``specs`` name, as one (see :func:`merge_toolsets`).

    Raises:
        ToolsetError: none is given, one cannot be loaded, or two offer one tool name.
    """
    if not specs:
        raise ToolsetError("no toolset given; pass --tools FILE_OR_MODULE or mcp:COMMAND")
    if len(specs) == 1:
        return load_toolset(specs[0])
    return merge_toolsets([load_toolset(spec) for spec in specs])


def merge_toolsets(toolsets: Iterable[Toolset]) -> Toolset:
    """One toolset of the tools of several; its source lists theirs (JSON).

    Raises:
        ToolsetError: two of them offer a tool of one name.
    """
    from taskdecomp.tools import Toolset

    parts = list(toolsets)
    owners: dict[str, str | None] = {}
    for part in parts:
        for name in part:
            if name in owners:
                raise ToolsetError(
                    f"tool {name!r} is offered by both {owners[name]!r} and {part.source!r}; "
                    "give an MCP server a prefix (mcp:--prefix=NAME COMMAND ...) or leave "
                    "one toolset out"
                )
            owners[name] = part.source
    sources = [part.source for part in parts]
    return Toolset(
        (spec for part in parts for spec in part.values()),
        source=json.dumps(sources) if None not in sources else None,
        skipped={name: why for part in parts for name, why in part.skipped.items()},
    )


def _listed_sources(text: str) -> list[str]:
    try:
        sources = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ToolsetError(f"toolset list {text!r} is not JSON: {exc}") from None
    if not isinstance(sources, list) or not all(isinstance(item, str) for item in sources):
        raise ToolsetError(f"toolset list {text!r} must be a JSON list of toolset texts")
    return sources
