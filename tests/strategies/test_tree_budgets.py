"""A ``tree`` run within its budgets, paused for humans, and continued from the store.

Budgets cover the whole run (the decomposer's and the roll-ups' model calls count like the
executor's); the node budget holds exactly even when splits are asked at once; a run that
stopped on its deadline, or paused for an approval, goes on without doing again what it
did, and without asking the decomposer again about a node it split.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from taskdecomp import (
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    TreeOptions,
    TreeRepository,
    approve_sync,
    reject,
    resume_sync,
    run_sync,
)
from taskdecomp.budget import Budget
from taskdecomp.store import SqlStore
from taskdecomp.strategies.tree.view import run_tree
from tests.strategies.tree_support import (
    Log,
    asked_to_split,
    by_name,
    call,
    executed,
    finish,
    kids,
    model,
    node,
    pg_url,
    phases,
    retry,
    rolling,
    sqlite_url,
    store,
    stored_tree,
    target,
    wants_split,
)

__all__ = ["pg_url", "sqlite_url", "store"]  # fixtures, used by name

GOAL = "Open a bakery"


def split_in_two(*extra: tuple[str, Any, str]) -> ScriptedModel:
    """The root asks to be split into Oven and Shop, which finish; then a roll-up."""
    return model(
        *extra,
        (node(GOAL), wants_split(), "execute"),
        (node("Oven"), finish("oven installed"), "execute"),
        (node("Shop"), finish("shop rented"), "execute"),
        (target(GOAL), kids("Oven", "Shop"), "decompose"),
        (rolling(GOAL), "open for business", "rollup"),
    )


def shown(store: SqlStore, run_id: str) -> dict[str, dict[str, Any]]:
    view = run_tree(store, store.load_run(run_id))
    assert view is not None
    return {entry["name"]: entry for entry in view["nodes"]}


def stored_children(store: SqlStore, run_id: str, name: str) -> list[str]:
    tree = TreeRepository(store).get_plan_tree(store.load_run(run_id).state["tree"]["plan_id"])
    return [kid.name for kid in tree.children(by_name(tree, name))]


# -- budgets --------------------------------------------------------------------------------


def test_the_node_budget_cuts_a_split_and_stops_further_ones(store: SqlStore) -> None:
    scripted = model(
        (retry("Flour"), finish("flour bought"), "execute"),
        (node("Flour"), wants_split(), "execute"),
        (r'"title": "(Oven|Shop|Staff)"', finish("done"), "execute"),
        (target(GOAL), kids("Flour", "Oven", "Shop", "Staff"), "decompose"),
        (rolling(GOAL), "open", "rollup"),
        (node(GOAL), wants_split(), "execute"),
    )
    result = run_sync(
        GOAL,
        tools=Log().tools(),
        model=scripted,
        store=store,
        strategy="tree",
        tree=TreeOptions(max_nodes=3),
    )
    assert result.status == "ok", result.message
    assert stored_children(store, result.run_id, GOAL) == ["Flour", "Oven", "Shop"]
    assert len(asked_to_split(scripted)) == 1
    flour = [r for r in scripted.calls if r.phase == "execute" and '"title": "Flour"' in r.text()]
    assert "decompose" not in str(flour[0].json_schema)  # no room left: not offered
    assert "Staff" not in executed(scripted)
    assert shown(store, result.run_id)["Flour"]["attempts"] == 1  # the refused answer


def test_splits_asked_at_once_share_the_node_budget_exactly(store: SqlStore) -> None:
    scripted = model(
        (r'"id": "node-\d+\.2", "title": "(Oven|Shop)"', finish("done"), "execute"),
        (node(GOAL), wants_split(), "execute"),
        (node("Oven"), wants_split(), "execute"),
        (node("Shop"), wants_split(), "execute"),
        (r'"title": "(Oven|Shop) part [12]"', finish("part done"), "execute"),
        (target(GOAL), kids("Oven", "Shop"), "decompose"),
        (target("Oven"), kids("Oven part 1", "Oven part 2"), "decompose"),
        (target("Shop"), kids("Shop part 1", "Shop part 2"), "decompose"),
        (r'"task": \{"name": ', "rolled up", "rollup"),
    )
    result = run_sync(
        GOAL,
        tools=Log().tools(),
        model=scripted,
        store=store,
        strategy="tree",
        tree=TreeOptions(max_nodes=4),
    )
    assert result.status == "ok", result.message
    tree = TreeRepository(store).get_plan_tree(
        store.load_run(result.run_id).state["tree"]["plan_id"]
    )
    assert len(tree.nodes) == 1 + 4  # the goal and exactly the four nodes the budget allows
    split = [a["target_task"]["name"] for a in asked_to_split(scripted)]
    assert split[0] == GOAL and len(split) == 2 and split[1] in ("Oven", "Shop")


@pytest.mark.parametrize(
    ("limit", "phase"), [(1, "decompose"), (2, "execute"), (4, "rollup"), (5, None)]
)
def test_the_model_call_budget_counts_every_call_of_the_run(
    store: SqlStore, limit: int, phase: str | None
) -> None:
    scripted = split_in_two()
    result = run_sync(
        GOAL,
        tools=Log().tools(),
        model=scripted,
        store=store,
        strategy="tree",
        budget=Budget(max_llm_calls=limit),
    )
    if phase is None:
        assert result.status == "ok", result.message
        assert result.usage.llm_calls == 5
        assert phases(scripted) == ["execute", "decompose", "execute", "execute", "rollup"]
        return
    assert result.stop_reason == "max_llm_calls"
    assert result.llm_phase == phase
    assert result.usage.llm_calls == limit
    if phase == "rollup":  # what finished is kept
        nodes = shown(store, result.run_id)
        assert nodes["Oven"]["result"] == "oven installed"
        assert nodes["Shop"]["result"] == "shop rented"


def test_the_tool_call_budget_counts_the_calls_of_every_leaf(store: SqlStore) -> None:
    tree = stored_tree(store, "Stock", {"Stock": {"Flour": {}, "Sugar": {}}})
    log = Log()
    scripted = model(
        (node("Flour") + r'.*"turns": \[\]', call("lookup", key="flour"), "execute"),
        (node("Sugar") + r'.*"turns": \[\]', call("lookup", key="sugar"), "execute"),
        (r'"title": "(Flour|Sugar)"', finish("in stock"), "execute"),
    )
    result = run_sync(
        tools=log.tools(),
        model=scripted,
        store=store,
        plan=tree.id,
        budget=Budget(max_tool_calls=1, max_parallel=1),
    )
    assert result.stop_reason == "max_tool_calls"
    assert len(log.named("lookup")) == 1


def test_a_run_past_its_deadline_resumes_without_redoing_finished_nodes(store: SqlStore) -> None:
    tree = stored_tree(store, "Bake", {"Bake": {"Knead": {}, "Proof": {}}})
    proving = asyncio.Event()

    async def wait_for_dough(minutes: int) -> str:
        """Waits for the dough (longer than the run may take)."""
        await asyncio.wait_for(proving.wait(), timeout=60)
        return "risen"

    first = model(
        (node("Knead"), finish("kneaded"), "execute"),
        (node("Proof"), call("wait_for_dough", minutes=90), "execute"),
    )
    stopped = run_sync(
        tools=[wait_for_dough],
        model=first,
        store=store,
        plan=tree.id,
        budget=Budget(max_seconds=3),
    )
    assert stopped.stop_reason == "max_seconds"
    before = shown(store, stopped.run_id)
    assert before["Knead"]["status"] == "ok" and before["Knead"]["result"] == "kneaded"
    assert before["Proof"]["status"] == "running"
    second = model(
        (node("Knead"), finish("kneaded again"), "execute"),
        (node("Proof"), finish("proofed"), "execute"),
        (rolling("Bake"), "baked", "rollup"),
    )
    done = resume_sync(stopped.run_id, store=store, tools=[wait_for_dough], model=second)
    assert done.status == "ok", done.message
    assert done.answer == "baked"
    assert executed(second) == ["Proof"]  # Knead finished before the deadline: not again
    assert shown(store, done.run_id)["Knead"]["result"] == "kneaded"


class _StallingDecomposer(ScriptedModel):
    """A scripted model whose first decomposer call never answers (the run's deadline ends it)."""

    stalled = False

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if request.phase == "decompose" and not self.stalled:
            self.stalled = True
            await asyncio.sleep(120)
        return await super().complete(request)


def test_a_split_cut_off_by_the_deadline_is_asked_again_on_resume(store: SqlStore) -> None:
    stalling = _StallingDecomposer(rules=[(node(GOAL), wants_split(), "execute")])
    stopped = run_sync(
        GOAL,
        tools=Log().tools(),
        model=stalling,
        store=store,
        strategy="tree",
        budget=Budget(max_seconds=2),
    )
    assert stopped.stop_reason == "max_seconds"
    state = store.load_run(stopped.run_id).state["tree"]
    assert "1" in state["asking"] and "1" not in state["splits"]
    scripted = split_in_two()
    done = resume_sync(stopped.run_id, store=store, tools=Log().tools(), model=scripted)
    assert done.status == "ok", done.message
    assert done.answer == "open for business"
    # the root's attempt had failed (it asked to be split): the split is asked, not the task
    assert phases(scripted) == ["decompose", "execute", "execute", "rollup"]
    assert asked_to_split(scripted)[0]["failure"].startswith("the executor asked to split")


# -- approvals -----------------------------------------------------------------------------


def paused_on_split(store: SqlStore) -> tuple[Any, ScriptedModel, Log]:
    log = Log()
    scripted = split_in_two()
    paused = run_sync(
        GOAL,
        tools=log.tools(),
        model=scripted,
        store=store,
        strategy="tree",
        tree=TreeOptions(approve_decompositions=True),
    )
    return paused, scripted, log


def test_a_split_waits_for_approval_before_its_children_run(store: SqlStore) -> None:
    paused, scripted, log = paused_on_split(store)
    assert paused.status == "paused" and paused.stop_reason == "awaiting_approval"
    assert paused.approval is not None and paused.approval["kind"] == "plan"
    assert [s["title"] for s in paused.approval["subject"]["plan"]] == ["Oven", "Shop"]
    assert phases(scripted) == ["execute", "decompose"]  # no child ran
    nodes = shown(store, paused.run_id)
    assert nodes[GOAL]["status"] == "decomposed"
    assert nodes["Oven"]["status"] == nodes["Shop"]["status"] == "pending"
    done = approve_sync(paused.run_id, store=store, tools=log.tools(), model=scripted)
    assert done.status == "ok", done.message
    assert done.answer == "open for business"
    assert phases(scripted) == ["execute", "decompose", "execute", "execute", "rollup"]
    assert shown(store, done.run_id)[GOAL]["status"] == "ok"


def test_a_rejected_split_ends_the_run(store: SqlStore) -> None:
    paused, scripted, _ = paused_on_split(store)
    ended = reject(paused.run_id, reason="not these two", store=store)
    assert ended.stop_reason == "approval_rejected"
    assert ended.message is not None and "not these two" in ended.message
    assert phases(scripted) == ["execute", "decompose"]


def test_a_split_whose_checkpoint_was_lost_is_taken_from_the_tree(store: SqlStore) -> None:
    """As if the process died after the decomposer wrote the children, before the run noted
    them: the split is on record as asked, and the children are in the stored tree."""
    paused, scripted, log = paused_on_split(store)
    stored = store.load_run(paused.run_id)
    state = stored.state["tree"]
    state["asking"] = {"1": {**state["splits"].pop("1"), "children": None}}
    state["nodes"]["1"]["status"] = "running"
    store.save_state(
        paused.run_id,
        stored.plan,
        {"tree": state},
        approvals=stored.approvals,
        usage=stored.usage,
        events=(),
    )
    done = approve_sync(paused.run_id, store=store, tools=log.tools(), model=scripted)
    assert done.status == "ok", done.message
    assert len(asked_to_split(scripted)) == 1  # not asked again
    assert stored_children(store, done.run_id, GOAL) == ["Oven", "Shop"]
    kinds = [e.kind for e in store.load_events(done.run_id)]
    assert kinds.count("NodeDecomposed") == 2  # said again when the children were taken


def test_a_tool_that_needs_approval_pauses_a_leaf(store: SqlStore) -> None:
    tree = stored_tree(store, "Tell", {"Tell": {"Notify": {}}})
    log = Log()
    scripted = model(
        (node("Notify") + r'.*"turns": \[\]', call("send", to="ann"), "execute"),
        (node("Notify"), finish("ann told"), "execute"),
    )
    paused = run_sync(tools=log.tools(), model=scripted, store=store, plan=tree.id)
    assert paused.stop_reason == "awaiting_approval"
    assert paused.approval is not None and paused.approval["subject"]["tool"] == "send"
    assert log.named("send") == []
    assert shown(store, paused.run_id)["Notify"]["status"] == "running"
    done = approve_sync(paused.run_id, store=store, tools=log.tools(), model=scripted)
    assert done.status == "ok", done.message
    assert done.answer == "ann told"
    assert log.named("send") == ["ann"]
