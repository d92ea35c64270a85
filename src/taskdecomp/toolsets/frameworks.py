"""Tools of other frameworks, read as :class:`~taskdecomp.tools.ToolSpec`\\ s."""

from __future__ import annotations

from typing import Any

from taskdecomp.tools import ToolSpec


def adapt(item: Any) -> ToolSpec | None:
    """``item`` as a tool spec when it is a tool of a framework this module reads, else None."""
    return None
