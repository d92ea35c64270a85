"""``taskdecomp mcp --http PORT``: streamable HTTP, its Host check and its token."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import SALES_TOOLS
from tests.mcpserver.support import SALES_ANSWER, SALES_GOAL, SALES_SCRIPT, data, http_server

ARGS = ("--tools", str(SALES_TOOLS), "--model", f"scripted:{SALES_SCRIPT}")
TOKEN = "s3cret-token-for-the-test"


@asynccontextmanager
async def http_session(
    url: str, headers: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    """An initialized client session with the server at ``url``, sending ``headers``."""
    async with (
        httpx2.AsyncClient(headers=headers or {}, timeout=60) as client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def test_run_goal_over_http_with_progress(tmp_path: Path) -> None:
    notes: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        notes.append(message)

    async def scenario(url: str) -> dict:
        async with http_session(url) as session:
            result = await session.call_tool(
                "run_goal", {"goal": SALES_GOAL}, progress_callback=on_progress
            )
            return data(result)

    with http_server(*ARGS, "--db", str(tmp_path / "r.db")) as url:
        ran = asyncio.run(scenario(url))
        foreign = httpx.post(url, headers={"Host": "evil.example:80"}, json={}, timeout=30)
        other_origin = httpx.post(
            url, headers={"Origin": "http://evil.example"}, json={}, timeout=30
        )
    assert ran["status"] == "ok" and ran["answer"] == SALES_ANSWER
    assert notes[0] == "plan ready: 5 steps" and notes[-1] == "run ended: success"
    assert foreign.status_code in (400, 421)  # the DNS-rebinding check: not a name it answers to
    assert other_origin.status_code == 403


def test_with_a_token_every_request_must_send_it(tmp_path: Path) -> None:
    async def scenario(url: str) -> list[str]:
        async with http_session(url, {"Authorization": f"Bearer {TOKEN}"}) as session:
            return [tool.name for tool in (await session.list_tools()).tools]

    env = {"TASKDECOMP_API_TOKEN": TOKEN}
    with http_server(*ARGS, "--db", str(tmp_path / "r.db"), env=env) as url:
        names = asyncio.run(scenario(url))
        missing = httpx.post(url, json={}, timeout=30)
        wrong = httpx.post(url, json={}, headers={"Authorization": "Bearer nope"}, timeout=30)
    assert "run_goal" in names
    assert missing.status_code == wrong.status_code == 401
    assert TOKEN not in missing.text
