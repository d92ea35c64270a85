"""MCP servers as toolsets: ``--tools mcp:COMMAND ARGS...``, ``mcp+http://...``, ``mcp+https://...``.

Each tool a server lists becomes a :class:`~taskdecomp.tools.ToolSpec` that passes the same
gateway as a Python tool: the allowlist, its ``inputSchema`` (checked before the call,
``tool_bad_args:<name>``), budgets, loop detection, timeouts and approvals. Its side-effect
class comes from its annotations (``readOnlyHint``: ``read_only``, ``idempotentHint``:
``idempotent``, anything else ``unsafe``, so a resume never runs an unknown tool twice),
unless the user says otherwise. A call's observation is the result's ``structuredContent``
when the server gives one, else its text; an ``isError`` result is ``tool_error:<name>``
with the server's message. A tool whose ``inputSchema`` cannot be used (not a valid JSON
schema, or a ``$ref`` outside it) is left out, in :attr:`~taskdecomp.tools.Toolset.skipped`
with the reason; the server's other tools stay. Sessions: :mod:`taskdecomp.toolsets.mcp_client`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskdecomp.errors import ToolsetError
from taskdecomp.tools import SideEffects, Toolset, ToolSpec
from taskdecomp.toolsets.mcp_spec import MCPServer, parse

if TYPE_CHECKING:
    from mcp.types import CallToolResult, Tool, ToolAnnotations

LIST_SECONDS = 90.0
"""How long starting a server and listing its tools may take."""


class MCPToolError(Exception):
    """An MCP tool answered with ``isError``, or its server refused the request."""


def load_stdio(rest: str) -> Toolset:
    """``mcp:[OPTIONS] COMMAND ARGS...``: a server launched over stdio."""
    return mcp_toolset(parse("mcp", rest))


def load_http(rest: str) -> Toolset:
    """``mcp+http://HOST/PATH [OPTIONS]``: a server reached over streamable HTTP."""
    return mcp_toolset(parse("mcp+http", rest))


def load_https(rest: str) -> Toolset:
    """``mcp+https://HOST/PATH [OPTIONS]``: a server reached over streamable HTTP and TLS."""
    return mcp_toolset(parse("mcp+https", rest))


def mcp_toolset(server: MCPServer) -> Toolset:
    """The tools ``server`` lists, as the planner and the gateway see them.

    Raises:
        ToolsetError: the ``mcp`` extra is missing, the server cannot be started or listed,
            an override names a tool it does not list, or it lists no usable tool.
    """
    try:
        import mcp  # noqa: F401 (only to say which extra is missing)
    except ImportError:
        raise ToolsetError(
            "MCP toolsets need the official MCP SDK: pip install 'taskdecomp[mcp]'"
        ) from None
    from taskdecomp.toolsets.mcp_client import ServerGone, list_tools, log_path, on_host_sync

    log_dir = server_log_dir()
    try:
        listed = on_host_sync(lambda: _bounded(list_tools(server, log_dir)))
    except ToolsetError:
        raise
    except ServerGone as exc:  # says where the server's stderr is
        raise ToolsetError(f"cannot list the tools of MCP server {server.label!r}: {exc}") from None
    except Exception as exc:
        raise ToolsetError(
            f"cannot list the tools of MCP server {server.label!r}: {_message(exc)} "
            f"(its stderr is in {str(log_path(log_dir, server))!r})"
        ) from None
    names = [tool.name for tool in listed]
    for option, asked in (
        ("side-effects", server.side_effects),
        ("needs-approval", server.needs_approval),
    ):
        unknown = sorted(set(asked) - set(names))
        if unknown:
            raise ToolsetError(
                f"--{option} names {', '.join(map(repr, unknown))}, which MCP server "
                f"{server.label!r} does not offer; its tools: {', '.join(names) or '(none)'}"
            )
    if not listed:
        raise ToolsetError(f"MCP server {server.label!r} offers no tool")
    specs: list[ToolSpec] = []
    skipped: dict[str, str] = {}
    for tool in listed:
        try:
            specs.append(tool_spec(server, tool, log_dir))
        except ToolsetError as exc:  # its inputSchema: the server's other tools still serve
            skipped[server.tool_name(tool.name)] = f"MCP server {server.label!r}: {exc}"
    if not specs:
        reasons = "; ".join(skipped.values())
        raise ToolsetError(f"MCP server {server.label!r} offers no usable tool: {reasons}")
    return Toolset(specs, source=server.source, skipped=skipped)


def tool_spec(server: MCPServer, tool: Tool, log_dir: Path) -> ToolSpec:
    """One of the server's tools as a spec whose function calls it over the session."""
    from taskdecomp.toolsets.mcp_client import on_host

    remote = tool.name

    async def call(**arguments: Any) -> Any:
        return await on_host(lambda: _call(server, log_dir, remote, arguments))

    name = server.tool_name(remote)
    call.__name__ = call.__qualname__ = name
    return ToolSpec(
        name=name,
        fn=call,
        description=" ".join((tool.description or tool.title or remote).split()),
        timeout=server.timeout,
        side_effects=server.side_effects.get(remote) or side_effects_of(tool.annotations),
        input_schema=dict(tool.input_schema),
        is_async=True,
        needs_approval=remote in server.needs_approval,
    )


def side_effects_of(annotations: ToolAnnotations | None) -> SideEffects:
    """``read_only`` for ``readOnlyHint``, ``idempotent`` for ``idempotentHint``, else unsafe."""
    if annotations is not None and annotations.read_only_hint:
        return "read_only"
    if annotations is not None and annotations.idempotent_hint:
        return "idempotent"
    return "unsafe"


def observation(result: CallToolResult) -> Any:
    """What the run records of a result: its structured content, else its text.

    Several text items are joined by newlines. Other content (images, audio, resources) is
    described without its data: ``{"type": "image", "mimeType": ..., "bytes": N}``.
    """
    if result.structured_content is not None:
        return result.structured_content
    items = [
        item.model_dump(mode="json", by_alias=True, exclude_none=True) for item in result.content
    ]
    if all(item.get("type") == "text" for item in items):
        return "\n".join(str(item.get("text", "")) for item in items)
    return [_described(item) for item in items]


def server_log_dir() -> Path:
    """Where servers' stderr goes: ``logs/`` in the data directory (``TASKDECOMP_HOME``)."""
    from taskdecomp.settings import load_settings

    return load_settings().data_dir().expanduser() / "logs"


async def _call(server: MCPServer, log_dir: Path, name: str, arguments: dict[str, Any]) -> Any:
    from mcp import MCPError

    from taskdecomp.toolsets.mcp_client import call_tool

    try:
        result = await call_tool(server, log_dir, name, arguments)
    except MCPError as exc:
        raise MCPToolError(exc.message) from None
    if result.is_error:
        raise MCPToolError(_error_text(result))
    return observation(result)


async def _bounded(work: Any) -> Any:
    import asyncio

    return await asyncio.wait_for(work, LIST_SECONDS)


def _error_text(result: CallToolResult) -> str:
    text = observation(result)
    if not isinstance(text, str):
        import json

        text = json.dumps(text)
    return text.strip() or "the tool reported an error without a message"


def _described(item: dict[str, Any]) -> dict[str, Any]:
    for key in ("data", "blob"):
        if key in item:
            item["bytes"] = len(item.pop(key)) * 3 // 4  # base64
    resource = item.get("resource")
    if isinstance(resource, dict) and "blob" in resource:
        resource["bytes"] = len(resource.pop("blob")) * 3 // 4
    return item


def _message(exc: BaseException) -> str:
    from taskdecomp.toolsets.mcp_client import root_failure

    exc = root_failure(exc)
    text = " ".join(str(exc).split())
    if isinstance(exc, TimeoutError):
        return f"no answer within {LIST_SECONDS:g}s"
    return text or type(exc).__name__


__all__ = [
    "MCPServer",
    "MCPToolError",
    "load_http",
    "load_https",
    "load_stdio",
    "mcp_toolset",
    "observation",
    "side_effects_of",
    "tool_spec",
]
