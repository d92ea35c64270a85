"""Runs that call tools of real MCP servers (the SDK's server API, over stdio)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from mcptoys import Toy

from support import plan_of, step
from taskdecomp import Budget, ScriptedModel, Toolset, approve_sync, open_store, run_sync
from taskdecomp.toolsets import load_toolset
from taskdecomp.toolsets.mcp_client import HOST
from taskdecomp.toolsets.mcp_spec import parse

ONE_STEP = Budget(min_plan_steps=1)
"""Plans of a single step are enough here."""


def script(*steps: dict[str, Any]) -> ScriptedModel:
    return ScriptedModel(rules=[("max_plan_steps", plan_of(*steps))], default="combined")


def parallel(n: int, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    return step(n, tool, args, depends_on=[])


def test_a_run_calls_the_tools_of_two_servers_at_once(tmp_path: Path) -> None:
    alpha, beta = Toy(tmp_path, "alpha"), Toy(tmp_path, "beta")
    tools = [alpha.server(prefix="a"), beta.server(prefix="b")]  # both offer "echo"
    result = run_sync(
        "use both",
        tools=tools,
        model=script(
            parallel(1, "a_echo", {"text": "one"}),
            parallel(2, "b_echo", {"text": "two"}),
            parallel(3, "b_lookup", {"key": "k"}),
            parallel(4, "a_add", {"a": 2, "b": 3}),
        ),
    )
    assert result.stop_reason == "success", result.message
    seen = {entry.plan_step.id: entry.observation for entry in result.history}
    assert seen["step_1"] == {"result": "alpha: one"}  # structuredContent when given
    assert seen["step_2"] == {"result": "beta: two"}
    assert seen["step_3"] == {"result": "value of k"}
    assert seen["step_4"]["sum"] == 5
    assert sorted(alpha.calls()) == ["add", "echo"] and sorted(beta.calls()) == ["echo", "lookup"]
    assert (alpha.starts(), beta.starts()) == (1, 1)


def test_arguments_that_break_the_schema_are_refused_before_the_call(tmp_path: Path) -> None:
    toy = Toy(tmp_path)
    result = run_sync(
        "add",
        tools=[toy.server()],
        model=script(step(1, "add", {"a": "two", "b": 3})),
        budget=ONE_STEP,
    )
    assert result.stop_reason == "tool_bad_args:add"
    assert "a" in (result.message or "") and "integer" in (result.message or "")
    assert "add" not in toy.calls()


def test_an_is_error_result_is_a_tool_error_with_the_servers_message(tmp_path: Path) -> None:
    toy = Toy(tmp_path)
    result = run_sync(
        "fail",
        tools=[toy.server()],
        model=script(step(1, "fail", {"reason": "no"})),
        budget=ONE_STEP,
    )
    assert result.stop_reason == "tool_error:fail"
    assert "refused: no" in (result.message or "")
    assert result.trace[-1].ok is False


def test_a_server_that_dies_mid_call_fails_that_call_and_is_started_again(
    tmp_path: Path,
) -> None:
    toy = Toy(tmp_path)
    server = toy.server()
    died = run_sync("die", tools=[server], model=script(step(1, "die", {})), budget=ONE_STEP)
    assert died.stop_reason == "tool_error:die"
    assert "exited during the call" in (died.message or "")
    add = script(step(1, "add", {"a": 1, "b": 1}))
    again = run_sync("add", tools=[server], model=add, budget=ONE_STEP)
    assert again.stop_reason == "success", again.message
    assert again.history[0].observation["sum"] == 2
    assert toy.starts() == 2 and toy.calls() == ["die", "add"]


def test_annotations_give_side_effect_classes_and_the_user_may_override_them(
    tmp_path: Path,
) -> None:
    toy = Toy(tmp_path)
    listed = Toolset.from_functions([toy.server()])
    classes = {name: spec.side_effects for name, spec in listed.items()}
    assert classes["echo"] == classes["add"] == "read_only"  # readOnlyHint
    assert classes["put"] == "idempotent"  # idempotentHint
    assert classes["append"] == classes["wait_for"] == "unsafe"  # no annotations
    assert all(spec.input_schema is not None and spec.is_async for spec in listed.values())
    changed = Toolset.from_functions(
        [toy.server(side_effects={"append": "idempotent", "add": "unsafe"}, timeout=5)]
    )
    assert changed["append"].side_effects == "idempotent"
    assert changed["add"].side_effects == "unsafe" and changed["add"].timeout == 5
    cli_spec = load_toolset(toy.spec("--side-effects=echo=unsafe", "--prefix=t"))
    assert cli_spec["t_echo"].side_effects == "unsafe"


def test_a_tool_that_needs_approval_waits_for_a_human(tmp_path: Path) -> None:
    toy = Toy(tmp_path)
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    tools = [toy.server(needs_approval={"put"})]
    model = script(step(1, "put", {"key": "k", "value": "v"}))
    try:
        paused = run_sync("put", tools=tools, model=model, store=store, budget=ONE_STEP)
        assert paused.stop_reason == "awaiting_approval"
        assert "put" not in toy.calls()
        done = approve_sync(paused.run_id, store=store, tools=tools, model=model)
        assert done.stop_reason == "success", done.message
        assert done.history[-1].observation == {"result": "k=v"}
        assert toy.calls() == ["put"]
    finally:
        store.close()


def test_a_hundred_calls_from_many_loops_share_one_session(tmp_path: Path) -> None:
    toy = Toy(tmp_path)
    add = Toolset.from_functions([toy.server()])["add"]

    async def twenty(offset: int) -> list[int]:
        return [(await add.fn(a=offset, b=n))["sum"] for n in range(20)]

    sums = [total for k in range(5) for total in asyncio.run(twenty(100 * k))]  # 5 loops
    assert sums == [100 * k + n for k in range(5) for n in range(20)]
    assert toy.starts() == 1 and toy.calls().count("add") == 100
    pids = {asyncio.run(add.fn(a=0, b=0))["pid"] for _ in range(3)}
    assert len(pids) == 1


def test_a_cancelled_call_leaves_the_session_usable(tmp_path: Path) -> None:
    toy = Toy(tmp_path)
    tools = Toolset.from_functions([toy.server()])

    async def cut_short() -> None:
        started, go = tmp_path / "started", tmp_path / "go"
        call = asyncio.ensure_future(tools["wait_for"].fn(started=str(started), go=str(go)))
        for _ in range(6000):
            if started.exists():
                break
            await asyncio.sleep(0.01)
        assert started.exists() and toy.calls() == ["wait_for"]  # it reached the server
        call.cancel()
        go.touch()

    asyncio.run(cut_short())
    assert asyncio.run(tools["echo"].fn(text="after"))["result"] == "alpha: after"
    assert toy.starts() == 1


def test_the_stored_source_of_two_toolsets_loads_them_again(tmp_path: Path) -> None:
    alpha, beta = Toy(tmp_path, "alpha"), Toy(tmp_path, "beta")
    text = json.dumps([alpha.spec("--prefix=a"), beta.spec()])
    before = HOST.starts
    merged = load_toolset(text)
    assert {"a_echo", "a_add", "echo", "lookup"} <= set(merged)
    assert HOST.starts - before == 2
    given = [parse("mcp", spec[len("mcp:") :]) for spec in json.loads(text)]
    stored = [parse("mcp", spec[len("mcp:") :]) for spec in json.loads(merged.source or "")]
    assert stored == given and all(server.cwd == str(Path.cwd()) for server in stored)
    again = load_toolset(merged.source or "")
    assert again.source == merged.source and HOST.starts - before == 2  # the same sessions
