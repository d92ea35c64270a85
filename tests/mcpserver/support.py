"""``taskdecomp mcp`` as the tests drive it: a child process, the SDK's own client."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import CallToolResult

from tests.clitools import CHILD
from tests.conftest import EXAMPLES
from tests.listening import free_port, listening

SALES_SCRIPT = EXAMPLES / "sales_report" / "script.json"
SALES_GOAL = "Prepare the April 2026 sales report for manager_id=7"
SALES_ANSWER = (
    "In April 2026, under manager Max's leadership, gross sales were $28,195, refunds were "
    "$1,370, net sales were $26,825, and the refund rate was 4.86%. Risk note: refund spike "
    "detected on 2026-04-04 (590 USD)."
)

APPROVAL_TOOLSET = '''
from pathlib import Path
from taskdecomp import tool

HERE = Path(__file__).parent


def note(text: str) -> str:
    """Note something down."""
    return "noted " + text


@tool(needs_approval=True, side_effects="unsafe")
def publish(key: str) -> str:
    """Publish a result (a human approves every call)."""
    (HERE / "published.txt").write_text(key)
    return "published " + key
'''


def approval_setup(folder: Path) -> tuple[Path, Path]:
    """A toolset whose ``publish`` needs approval, and a script that plans to call it."""
    tools = folder / "approval_tools.py"
    tools.write_text(APPROVAL_TOOLSET)
    steps = [
        {"id": "s1", "title": "note a", "tool": "note", "args": {"text": "a"}},
        {"id": "s2", "title": "note b", "tool": "note", "args": {"text": "b"}},
        {"id": "s3", "title": "publish it", "tool": "publish", "args": {"key": "report-7"}},
    ]
    script = folder / "approval_script.json"
    script.write_text(
        json.dumps(
            {
                "rules": [
                    {"phase": "plan", "match": "", "response": {"kind": "plan", "steps": steps}}
                ],
                "default": "report-7 is published",
            }
        )
    )
    return tools, script


def child_env() -> dict[str, str]:
    """What the server process needs: this checkout's sources and the test's data dir."""
    keep = ("PYTHONPATH", "TASKDECOMP_HOME", "TASKDECOMP_API_TOKEN")
    return {name: os.environ[name] for name in keep if name in os.environ}


@asynccontextmanager
async def stdio_session(*args: str) -> AsyncIterator[ClientSession]:
    """An initialized client session with ``taskdecomp mcp ARGS`` over stdio."""
    params = StdioServerParameters(
        command=CHILD[0], args=[*CHILD[1:], "mcp", *args], env=child_env()
    )
    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


def data(result: CallToolResult) -> dict[str, Any]:
    """A successful call's structured content (and its text is the same JSON)."""
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


def error_text(result: CallToolResult, *, one_line: bool = True) -> str:
    """A failed call's one message (of one line, unless the SDK refused the arguments)."""
    assert result.is_error
    assert len(result.content) == 1
    text = getattr(result.content[0], "text", "")
    assert isinstance(text, str) and "Traceback" not in text
    assert "\n" not in text or not one_line
    return text


@contextmanager
def http_server(*args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """``taskdecomp mcp --http PORT ARGS`` in a child process; yields its endpoint URL."""
    port = free_port()
    with listening([*CHILD, "mcp", "--http", str(port), *args], port, env=env):
        yield f"http://127.0.0.1:{port}/mcp"
