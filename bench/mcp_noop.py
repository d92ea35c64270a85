"""A one-tool MCP server over stdio for ``bench/engine.py`` (g): ``noop(n)`` returns ``n``."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("bench-noop")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def noop(n: int) -> int:
    """Do nothing (async)."""
    return n


if __name__ == "__main__":
    server.run()
