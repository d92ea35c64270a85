"""A small MCP server for the tests, run over stdio or streamable HTTP.

``python toy.py alpha|beta [--http PORT]``. Every start appends a line to ``$TOY_STARTS``
and every call its tool's name to ``$TOY_CALLS`` (when set), so tests count what the
server saw.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

READ_ONLY = ToolAnnotations(read_only_hint=True)
IDEMPOTENT = ToolAnnotations(read_only_hint=False, idempotent_hint=True)

role = sys.argv[1] if len(sys.argv) > 1 else "alpha"
server = MCPServer(f"toy-{role}")


def _saw(name: str) -> None:
    calls = os.environ.get("TOY_CALLS")
    if calls:
        with open(calls, "a", encoding="utf-8") as out:
            out.write(f"{role}:{name}\n")


@server.tool(annotations=READ_ONLY)
def echo(text: str) -> str:
    """Say the text back, with the server's role."""
    _saw("echo")
    return f"{role}: {text}"


if role == "alpha":

    @server.tool(annotations=READ_ONLY)
    def add(a: int, b: int) -> dict[str, Any]:
        """Add two whole numbers."""
        _saw("add")
        return {"sum": a + b, "pid": os.getpid()}

    @server.tool(annotations=IDEMPOTENT)
    def put(key: str, value: str) -> str:
        """Remember a value under a key."""
        _saw("put")
        return f"{key}={value}"

    @server.tool()
    def append(path: str, line: str) -> str:
        """Append a line to a file (no annotations: unsafe)."""
        _saw("append")
        with open(path, "a", encoding="utf-8") as out:
            out.write(line + "\n")
        return "appended"

    @server.tool(annotations=READ_ONLY)
    def fail(reason: str) -> str:
        """Always fail, with the reason."""
        _saw("fail")
        raise ToolError(f"refused: {reason}")

    @server.tool(annotations=READ_ONLY)
    def die() -> str:
        """End the server's process in the middle of the call."""
        _saw("die")
        os._exit(3)

    @server.tool()
    def wait_for(started: str, go: str) -> str:
        """Touch ``started``, then wait until ``go`` exists (unsafe: no annotations)."""
        _saw("wait_for")
        Path(started).touch()
        while not Path(go).exists():
            time.sleep(0.02)
        return "went"

else:

    @server.tool(annotations=READ_ONLY)
    def lookup(key: str) -> str:
        """Look a key up."""
        _saw("lookup")
        return f"value of {key}"


if __name__ == "__main__":
    starts = os.environ.get("TOY_STARTS")
    if starts:
        with open(starts, "a", encoding="utf-8") as out:
            out.write(f"{role} {os.getpid()}\n")
    print(f"toy {role} starting", file=sys.stderr, flush=True)
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run()
