"""Toolset sources, found by the scheme of a ``--tools`` value.

``--tools tools.py`` and ``--tools my_package.tools`` load Python
(:mod:`~taskdecomp.toolsets.python`); ``--tools SCHEME:REST`` asks the source registered as
``SCHEME`` (``python:`` names the Python source explicitly). A source is a callable of
``REST`` that returns a :class:`~taskdecomp.tools.Toolset`; a package adds one through the
``taskdecomp.toolsets`` entry-point group. Every tool passes the same gateway whatever its
source.
"""

from __future__ import annotations

from collections.abc import Callable
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

__all__ = ["SOURCES", "ToolsetSource", "load_toolset", "register_source"]


def register_source(scheme: str, source: ToolsetSource) -> None:
    """Make ``--tools SCHEME:...`` load through ``source``."""
    SOURCES.register(scheme, source)


def load_toolset(spec: str | Path) -> Toolset:
    """The toolset ``spec`` names: ``SCHEME:REST`` for a registered source, else Python.

    Raises:
        ToolsetError: it cannot be found, loaded, or holds no tool.
    """
    text = str(spec)
    scheme, sep, rest = text.partition(":")
    if sep and len(scheme) > 1 and scheme in SOURCES:  # one letter: a Windows drive
        return SOURCES.get(scheme)(rest)
    return SOURCES.get("python")(text)
