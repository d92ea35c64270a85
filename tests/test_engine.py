"""The engine's verbs in both forms: async for event loops, blocking for scripts."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from taskdecomp import (
    Budget,
    ReplanOptions,
    ScriptedModel,
    approve_sync,
    reject_async,
    resume_sync,
    run,
    run_workflow_sync,
    tool,
)
from taskdecomp.store import open_store
from tests.support import plan_of, step


def gate(folder: Path) -> Any:
    @tool(side_effects="read_only")
    def wait_for_go(n: int) -> dict[str, int]:
        """Wait until the file 'go' exists."""
        while not (folder / "go").exists():
            time.sleep(0.02)
        return {"n": n}

    return [wait_for_go]


def script() -> ScriptedModel:
    steps = [step(n, "wait_for_go", {"n": n}) for n in (1, 2, 3)]
    return ScriptedModel(
        rules=[
            ("max_plan_steps", plan_of(*steps)),
            ("remaining_steps", {"kind": "respond", "response": "all three waited"}),
        ],
        default="all three waited",
    )


def test_resume_sync_goes_on_from_the_store(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        tools = gate(tmp_path)
        first = asyncio.run(
            run("wait", tools=tools, model=script(), store=store, budget=Budget(max_seconds=0.5))
        )
        assert first.stop_reason == "max_seconds"
        (tmp_path / "go").touch()
        again = resume_sync(first.run_id, store=store, tools=tools, model=script())
        assert again.stop_reason == "success" and again.answer == "all three waited"
    finally:
        store.close()


def paused(tmp_path: Path, store: Any) -> str:
    (tmp_path / "go").touch()
    result = asyncio.run(
        run(
            "wait",
            tools=gate(tmp_path),
            model=script(),
            store=store,
            strategy="replan",
            options=ReplanOptions(approve_plan=True),
        )
    )
    assert result.stop_reason == "awaiting_approval"
    return result.run_id


def test_approve_sync_and_reject_async_decide_a_paused_run(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        approved = approve_sync(
            paused(tmp_path, store), store=store, tools=gate(tmp_path), model=script()
        )
        assert approved.stop_reason == "success"
        rejected = asyncio.run(reject_async(paused(tmp_path, store), store=store, reason="no"))
        assert (rejected.stop_reason, rejected.message) == ("approval_rejected", "rejected: no")
    finally:
        store.close()


def test_the_blocking_forms_refuse_to_run_inside_an_event_loop(tmp_path: Path) -> None:
    async def inside() -> list[str]:
        refused = []
        for call in (
            lambda: resume_sync("r1", store=None),
            lambda: approve_sync("r1", store=None),
            lambda: run_workflow_sync(workspace=tmp_path, model="scripted:x"),
        ):
            with pytest.raises(RuntimeError, match="inside an event loop") as caught:
                call()
            refused.append(str(caught.value).split("(")[0])
        return refused

    assert asyncio.run(inside()) == ["resume_sync", "approve_sync", "run_workflow_sync"]


def test_the_decomposer_has_blocking_forms_too(tmp_path: Path) -> None:
    from taskdecomp import PlanDecomposer
    from taskdecomp.decomposition import DecompOptions
    from taskdecomp.store.trees import TreeRepository

    children = {"children": [
        {"name": "book the venue", "instruction": "find a hall", "leaf": True},
        {"name": "invite speakers", "instruction": "write to ten", "leaf": True},
    ]}  # fmt: skip
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        decomposer = PlanDecomposer(
            TreeRepository(store), ScriptedModel(rules=[(".*", children)]),
            options=DecompOptions(auto_on_create=False),
        )  # fmt: skip
        tree, result = decomposer.create_plan_sync("a conference")
        assert result is None
        done = decomposer.run_plan_sync(tree.id)
        assert done.stopped_reason is None and not done.failed_nodes, done
        names = [task.name for task in done.created_tasks]
        assert names == ["book the venue", "invite speakers"]
        stored = TreeRepository(store).get_plan_tree(tree.id)
        assert [node.name for node, _ in stored.walk()][1:] == names

        async def inside() -> None:
            with pytest.raises(RuntimeError, match="run_plan_sync"):
                decomposer.run_plan_sync(tree.id)

        asyncio.run(inside())
    finally:
        store.close()
