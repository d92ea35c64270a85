"""MCP servers that misbehave, for the tests: ``python odd.py MODE [ARGS]``.

- ``hang PIDFILE``: writes its pid, then never answers the handshake;
- ``banner``: prints lines that are not JSON-RPC on stdout, then serves ``echo``;
- ``badout``: ``bad_out`` answers against its own ``outputSchema``; ``count`` counts calls;
- ``schemas``: ``broken`` has an invalid ``inputSchema``, ``remote`` one with a remote
  ``$ref``; ``fine`` is fine;
- ``secret``: ``whoami`` fails with ``$GH_AUTH`` in its message;
- ``slowhttp PORT``: over streamable HTTP with plain JSON answers, ``hold`` waits for a file.

Every start appends its pid to ``$ODD_STARTS`` when set.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server

mode = sys.argv[1]
if os.environ.get("ODD_STARTS"):
    with open(os.environ["ODD_STARTS"], "a", encoding="utf-8") as out:
        out.write(f"{os.getpid()}\n")


def lowlevel(tools: list[types.Tool], answer: Any) -> None:
    """Serve ``tools`` over stdio with the SDK's low-level server; ``answer`` answers calls."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
        return answer(params.name)  # type: ignore[no-any-return]

    server = Server(f"odd-{mode}", on_list_tools=list_tools, on_call_tool=call_tool)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)


def text(value: str) -> list[types.TextContent]:
    return [types.TextContent(type="text", text=value)]


READ_ONLY = types.ToolAnnotations(read_only_hint=True)

if mode == "hang":
    Path(sys.argv[2]).write_text(str(os.getpid()), encoding="utf-8")
    print("hanging", file=sys.stderr, flush=True)
    time.sleep(3600)
elif mode in ("banner", "secret"):
    server = MCPServer(f"odd-{mode}")
    if mode == "banner":
        print("Hello, I am a chatty server!", flush=True)
        print("{not json", flush=True)

        @server.tool(annotations=READ_ONLY)
        def echo(text: str) -> str:
            """Say the text back."""
            return f"echo: {text}"

    else:

        @server.tool(annotations=READ_ONLY)
        def whoami() -> str:
            """Fail with the credential in the message, as many APIs do."""
            raise ToolError(f"401: credential {os.environ.get('GH_AUTH')!r} rejected")

    server.run()
elif mode == "badout":
    calls = {"count": 0}
    shaped = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}

    def badout(name: str) -> types.CallToolResult:
        if name == "bad_out":
            return types.CallToolResult(content=text("x"), structured_content={"n": "many"})
        calls["count"] += 1
        return types.CallToolResult(content=text(f"{calls['count']} from {os.getpid()}"))

    lowlevel(
        [
            types.Tool(
                name="bad_out",
                description="Break the output schema.",
                input_schema={"type": "object"},
                output_schema=shaped,
                annotations=READ_ONLY,
            ),
            types.Tool(
                name="count",
                description="Count calls.",
                input_schema={"type": "object"},
                annotations=READ_ONLY,
            ),
        ],
        badout,
    )
elif mode == "schemas":
    remote = {"type": "object", "properties": {"x": {"$ref": "http://127.0.0.1:9/schema"}}}
    broken = {"type": "object", "properties": {"x": {"type": "objekt"}}}
    lowlevel(
        [
            types.Tool(name="broken", description="Broken.", input_schema=broken),
            types.Tool(name="remote", description="Remote.", input_schema=remote),
            types.Tool(
                name="fine",
                description="Fine.",
                input_schema={"type": "object"},
                annotations=READ_ONLY,
            ),
        ],
        lambda name: types.CallToolResult(content=text(f"{name} ran")),
    )
elif mode == "slowhttp":
    server = MCPServer("odd-slowhttp")

    @server.tool(annotations=READ_ONLY)
    async def hold(go: str) -> str:
        """Wait until the file ``go`` exists."""
        while not Path(go).exists():
            await anyio.sleep(0.05)
        return "held"

    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]), json_response=True)
