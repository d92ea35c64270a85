"""The MCP server's operations in this process: which toolset continues a run, ``allow``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from taskdecomp import load_toolset, open_store, run_sync
from taskdecomp.errors import ConfigError
from taskdecomp.mcpserver import MCPConfig, Operations
from taskdecomp.store import SqlStore
from tests.conftest import SALES_TOOLS
from tests.mcpserver.support import SALES_SCRIPT, approval_setup


def store_at(folder: Path) -> SqlStore:
    store = open_store(f"sqlite:///{folder / 'runs.db'}")
    assert isinstance(store, SqlStore)
    return store


def test_a_run_started_with_another_toolset_is_refused_in_one_line(tmp_path: Path) -> None:
    tools, script = approval_setup(tmp_path)
    store = store_at(tmp_path)
    try:
        paused = run_sync("publish", tools=str(tools), model=f"scripted:{script}", store=store)
        assert paused.stop_reason == "awaiting_approval", paused.message
        other = MCPConfig(toolset=load_toolset(str(SALES_TOOLS)), model=f"scripted:{script}")
        with pytest.raises(ConfigError) as refused:
            asyncio.run(Operations(other, store).approve(paused.run_id))
        message = str(refused.value)
        assert str(tools.resolve()) in message and "taskdecomp approve" in message
        assert "\n" not in message
        assert store.load_run(paused.run_id).summary.status == "paused"
        assert not (tmp_path / "published.txt").exists()
        same = MCPConfig(toolset=load_toolset(str(tools)), model=f"scripted:{script}")
        done = asyncio.run(Operations(same, store).approve(paused.run_id))
        assert done.stop_reason == "success"
        assert (tmp_path / "published.txt").read_text() == "report-7"
    finally:
        store.close()


def test_an_allow_naming_a_tool_the_toolset_lacks_is_refused(tmp_path: Path) -> None:
    store = store_at(tmp_path)
    try:
        config = MCPConfig(toolset=load_toolset(str(SALES_TOOLS)), model=f"scripted:{SALES_SCRIPT}")
        with pytest.raises(ConfigError, match=r"allow names 'nope', which the toolset") as bad:
            asyncio.run(Operations(config, store).run_goal("report", allow=["nope"]))
        assert "\n" not in str(bad.value)
        assert store.list_runs() == []
    finally:
        store.close()
