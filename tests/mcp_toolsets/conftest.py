"""The MCP toolset tests' fixtures."""

from __future__ import annotations

from mcptoys import closed_sessions

__all__ = ["closed_sessions"]
