"""taskdecomp as an MCP server: any MCP client delegates work to a controlled run.

``taskdecomp mcp`` serves it over stdio or streamable HTTP; a program can build it too::

    from taskdecomp.mcpserver import MCPConfig, Operations, create_server
    from taskdecomp.store import open_store
    from taskdecomp.tools import load_toolset

    config = MCPConfig(toolset=load_toolset("tools.py"), model="scripted:plan.json")
    server = create_server(Operations(config, open_store("runs.db")))
    server.run()  # stdio

Its tools (``run_goal``, ``get_run``, ``approve``, ``reject``, ``decompose``,
``get_tree``) are described in ``docs/mcp-server.md``. Needs the ``mcp`` extra (the
official MCP SDK): ``pip install 'taskdecomp[mcp]'``.
"""

from taskdecomp.mcpserver.app import create_server
from taskdecomp.mcpserver.config import MCPConfig
from taskdecomp.mcpserver.http import http_app
from taskdecomp.mcpserver.operations import Operations

__all__ = ["MCPConfig", "Operations", "create_server", "http_app"]
