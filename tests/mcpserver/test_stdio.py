"""``taskdecomp mcp`` over stdio, driven by the MCP SDK's own client."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.clitools import cli
from tests.conftest import EXAMPLES, SALES_TOOLS
from tests.mcpserver.support import (
    SALES_ANSWER,
    SALES_GOAL,
    SALES_SCRIPT,
    approval_setup,
    data,
    error_text,
    stdio_session,
)

TOOLS = {"run_goal", "get_run", "approve", "reject", "decompose", "get_tree"}


def test_run_goal_returns_the_seed_result_with_progress_and_stores_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    args = ("--tools", str(SALES_TOOLS), "--model", f"scripted:{SALES_SCRIPT}", "--db", str(db))
    notes: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        notes.append((progress, message))

    async def scenario() -> tuple[dict, dict, dict]:
        async with stdio_session(*args) as session:
            listed = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert set(listed) == TOOLS
            assert all(tool.output_schema and tool.description for tool in listed.values())
            enum = json.dumps(listed["run_goal"].input_schema["properties"]["strategy"])
            assert '"plan_execute"' in enum and '"replan"' in enum and '"tree"' in enum
            ran = await session.call_tool(
                "run_goal", {"goal": SALES_GOAL}, progress_callback=on_progress
            )
            got = await session.call_tool("get_run", {"run_id": data(ran)["run_id"]})
            return data(ran), data(got), json.loads(ran.content[0].text)  # type: ignore[union-attr]

    ran, got, text = asyncio.run(scenario())
    assert ran["status"] == "ok" and ran["stop_reason"] == "success"
    assert ran["answer"] == SALES_ANSWER
    assert [step["tool"] for step in ran["steps"]] == [
        "fetch_sales_data",
        "fetch_refund_data",
        "calculate_monthly_kpis",
        "detect_risk_signals",
        "get_manager_profile",
    ]
    assert {step["status"] for step in ran["steps"]} == {"done"}
    assert ran["usage"]["tool_calls"] == 5 and ran["usage"]["llm_calls"] == 2
    assert text == ran  # the text content is the same strict JSON
    assert got == ran
    messages = [message for _, message in notes]
    assert messages[0] == "plan ready: 5 steps"
    assert "step 1 started: Fetch daily gross sales for April 2026" in messages
    assert "step 5 finished: get_manager_profile" in messages
    assert messages[-1] == "run ended: success"
    assert [progress for progress, _ in notes] == sorted({progress for progress, _ in notes})

    code, out, _ = cli(capsys, "show", ran["run_id"], "--json", "--db", str(db))
    shown = json.loads(out)
    assert code == 0 and shown["answer"] == SALES_ANSWER and shown["status"] == "ok"
    assert shown["goal"] == SALES_GOAL


def test_a_tool_call_approved_through_mcp_runs_and_the_run_finishes(tmp_path: Path) -> None:
    tools, script = approval_setup(tmp_path)
    args = ("--tools", str(tools), "--model", f"scripted:{script}", "--db", str(tmp_path / "r.db"))

    async def scenario() -> tuple[dict, dict, str, str, dict, str]:
        async with stdio_session(*args) as session:
            paused = data(await session.call_tool("run_goal", {"goal": "publish the report"}))
            run_id = paused["run_id"]
            read = data(await session.call_tool("get_run", {"run_id": run_id}))
            wrong = error_text(
                await session.call_tool("approve", {"run_id": run_id, "approval_id": "nope"})
            )
            published_before = (tmp_path / "published.txt").exists()
            done = data(
                await session.call_tool(
                    "approve", {"run_id": run_id, "approval_id": paused["approval"]["approval_id"]}
                )
            )
            again = error_text(await session.call_tool("approve", {"run_id": run_id}))
            return paused, read, wrong, str(published_before), done, again

    paused, read, wrong, published_before, done, again = asyncio.run(scenario())
    assert paused["status"] == "paused" and paused["stop_reason"] == "awaiting_approval"
    assert paused["approval"]["kind"] == "tool"
    assert paused["approval"]["subject"]["tool"] == "publish"
    assert paused["approval"]["subject"]["args"] == {"key": "report-7"}
    assert [s["status"] for s in paused["steps"]] == ["done", "done", "pending"]
    assert read["approval"] == paused["approval"]
    assert "waits for approval" in wrong and "'nope'" in wrong
    assert published_before == "False"
    assert done["status"] == "ok" and done["answer"] == "report-7 is published"
    assert done["approval"] is None
    assert (tmp_path / "published.txt").read_text() == "report-7"
    assert "is not waiting for approval" in again


def test_a_rejected_run_ends_without_calling_the_tool(tmp_path: Path) -> None:
    tools, script = approval_setup(tmp_path)
    args = ("--tools", str(tools), "--model", f"scripted:{script}", "--db", str(tmp_path / "r.db"))

    async def scenario() -> tuple[dict, dict, str]:
        async with stdio_session(*args) as session:
            paused = data(await session.call_tool("run_goal", {"goal": "publish the report"}))
            run_id = paused["run_id"]
            ended = data(
                await session.call_tool("reject", {"run_id": run_id, "reason": "not today"})
            )
            read = data(await session.call_tool("get_run", {"run_id": run_id}))
            return ended, read, error_text(await session.call_tool("approve", {"run_id": run_id}))

    ended, read, refused = asyncio.run(scenario())
    assert ended["status"] == "stopped" and ended["stop_reason"] == "approval_rejected"
    assert "not today" in (ended["message"] or "")
    assert read["stop_reason"] == "approval_rejected"
    assert not (tmp_path / "published.txt").exists()
    assert "is not waiting for approval" in refused


def test_bad_requests_are_tool_errors_of_one_line(tmp_path: Path) -> None:
    args = ("--tools", str(SALES_TOOLS), "--model", f"scripted:{SALES_SCRIPT}")

    async def scenario() -> list[str]:
        async with stdio_session(*args, "--db", str(tmp_path / "r.db")) as session:
            calls = [
                ("get_run", {"run_id": "no-such-run"}),
                ("run_goal", {"goal": "g", "strategy": "bogus"}),
                ("run_goal", {"goal": "g", "strategy": "workflow"}),
                ("run_goal", {"goal": "g", "strategy": "replan", "options": {"prompts": "/"}}),
                ("reject", {"run_id": "no-such-run", "reason": "x"}),
                ("get_tree", {"plan_id": 99}),
            ]
            errors = [error_text(await session.call_tool(name, body)) for name, body in calls]
            # arguments outside the input schema: the SDK's own refusal, before the tool
            over = {"goal": "g", "budget": {"max_tool_calls": 0}}
            errors.append(error_text(await session.call_tool("run_goal", over), one_line=False))
            return errors

    errors = asyncio.run(scenario())
    assert "no run 'no-such-run'" in errors[0]
    assert "unknown strategy 'bogus'" in errors[1] and "plan_execute" in errors[1]
    assert "does not start from a goal" in errors[2]
    assert "'prompts'" in errors[3] and "only the operator" in errors[3]
    assert "no run 'no-such-run'" in errors[4]
    assert "no plan tree has id 99" in errors[5]
    assert "max_tool_calls" in errors[6] and "greater than or equal to 1" in errors[6]


def test_decompose_stores_a_plan_tree_that_get_tree_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "r.db"
    script = EXAMPLES / "decomposer" / "script.json"
    goal = "Launch a developer conference in Berlin"
    notes: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        notes.append(message)

    async def scenario() -> tuple[dict, dict]:
        async with stdio_session("--model", f"scripted:{script}", "--db", str(db)) as session:
            made = data(
                await session.call_tool("decompose", {"goal": goal}, progress_callback=on_progress)
            )
            tree = data(await session.call_tool("get_tree", {"plan_id": made["plan_id"]}))
            return made, tree

    made, tree = asyncio.run(scenario())
    assert made["tree"] == tree and tree["title"] == goal
    names = [node["name"] for node in tree["nodes"]]
    assert names[0] == goal and "Venue" in names and "Logistics" in names
    assert made["created"] == len(tree["nodes"]) - 1
    assert made["summary"].startswith(f"Plan #{made['plan_id']} got {made['created']} subtasks")
    for node in made["failed_nodes"]:  # the example's script leaves one node unanswered
        assert f"node {node} was not processed" in made["summary"]
    assert notes  # one line per level and answered node
    code, out, _ = cli(capsys, "tree", str(made["plan_id"]), "--json", "--db", str(db))
    assert code == 0 and json.loads(out)["nodes"] == tree["nodes"]
