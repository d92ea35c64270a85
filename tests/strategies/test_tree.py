"""The ``tree`` strategy runs a plan tree: leaves by the executor agent, split as needed.

Scripted models stand in for the executor, the decomposer and the roll-ups (one rule per
phase and node); the runs are stored in a real SQLite file and on the real PostgreSQL.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from taskdecomp import (
    ConfigError,
    ScriptedModel,
    TreeOptions,
    TreeRepository,
    run_sync,
)
from taskdecomp.events import Event, NodeDecomposed, NodeFinished, NodeStarted
from taskdecomp.store import SqlStore
from taskdecomp.strategies.tree.view import run_tree
from tests.strategies.tree_support import (
    Log,
    asked_to_split,
    by_name,
    call,
    depend,
    executed,
    finish,
    first_turn,
    kids,
    model,
    node,
    payload,
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

GOAL = "Launch a developer conference in Berlin"


def tree_of(store: SqlStore, run_id: str) -> dict[str, Any]:
    """The run's tree as ``show`` and the service see it, by node name."""
    view = run_tree(store, store.load_run(run_id))
    assert view is not None
    return {entry["name"]: entry for entry in view["nodes"]}


def statuses(store: SqlStore, run_id: str) -> dict[str, str]:
    return {name: entry["status"] for name, entry in tree_of(store, run_id).items()}


def children_in_store(store: SqlStore, run_id: str, name: str) -> list[str]:
    """The names of the stored children of the node called ``name`` (active or not)."""
    plan_id = store.load_run(run_id).state["tree"]["plan_id"]
    tree = TreeRepository(store).get_plan_tree(plan_id)
    return [kid.name for kid in tree.children(by_name(tree, name))]


# -- splitting as needed ------------------------------------------------------------------

TRIGGERS = {
    "the executor asks": (
        [(node(GOAL), wants_split("a venue and speakers are two jobs"), "execute")],
        {},
        "the executor asked to split the task: a venue and speakers are two jobs",
    ),
    "a tool fails": (
        [(node(GOAL), call("broken", key="everything"), "execute")],
        {},
        "an attempt failed (tool_error:broken): RuntimeError: the service is down for everything",
    ),
    "the agent runs out of turns": (
        [
            (first_turn(GOAL), call("lookup", key="venues"), "execute"),
            (node(GOAL), call("lookup", key="speakers"), "execute"),
        ],
        {"max_agent_turns": 2},
        "an attempt failed (max_agent_turns:node-",
    ),
    "an action is refused": (
        [(node(GOAL), call("send", to="everyone"), "execute")],
        {},
        "an attempt failed (invalid_action:tool_not_allowed:send)",
    ),
}


@pytest.mark.parametrize("trigger", list(TRIGGERS))
def test_a_leaf_is_split_when_its_attempt_fails_and_its_children_run(
    store: SqlStore, trigger: str
) -> None:
    root_rules, options, failure = TRIGGERS[trigger]
    log = Log()
    scripted = model(
        *root_rules,
        (first_turn("Venue"), call("lookup", key="venue"), "execute"),
        (node("Venue"), finish("Kosmos, 800 seats"), "execute"),
        (node("Speakers"), finish("12 confirmed"), "execute"),
        (target(GOAL), kids("Venue", "Speakers"), "decompose"),
        (rolling(GOAL), "Kosmos with 12 speakers", "rollup"),
    )
    result = run_sync(
        GOAL,
        tools=log.tools(),
        model=scripted,
        allow=["lookup", "broken"],
        store=store,
        strategy="tree",
        tree=TreeOptions(**options),
    )
    assert result.status == "ok", result.message
    assert result.answer == "Kosmos with 12 speakers"
    [request] = asked_to_split(scripted)
    assert request["failure"].startswith(failure)
    assert request["mode_hint"] == "single_node"
    assert request["target_task"]["name"] == GOAL
    assert children_in_store(store, result.run_id, GOAL) == ["Venue", "Speakers"]
    assert statuses(store, result.run_id) == {GOAL: "ok", "Venue": "ok", "Speakers": "ok"}
    shown = tree_of(store, result.run_id)
    assert shown["Venue"]["result"] == "Kosmos, 800 seats"
    # why it was split; the decomposer is also told what the failed attempt did
    assert shown[GOAL]["split"] == request["failure"].partition("\nAlready done")[0]
    assert ("lookup", "venue") in log.calls and log.named("send") == []


def test_a_decomposition_asked_for_is_stored_with_its_events(store: SqlStore) -> None:
    live: list[Event] = []
    scripted = model(
        (node(GOAL), wants_split(), "execute"),
        (node("Venue"), finish("Kosmos"), "execute"),
        (node("Speakers"), finish("12"), "execute"),
        (target(GOAL), kids("Venue", "Speakers"), "decompose"),
        (rolling(GOAL), "ready", "rollup"),
    )
    result = run_sync(
        GOAL,
        tools=Log().tools(),
        model=scripted,
        store=store,
        strategy="tree",
        on_event=live.append,
    )
    assert result.status == "ok", result.message
    node_kinds = ("NodeStarted", "NodeFinished", "NodeDecomposed")
    stored = [e for e in store.load_events(result.run_id) if e.kind in node_kinds]
    shown = [e for e in live if isinstance(e, NodeStarted | NodeFinished | NodeDecomposed)]
    assert [e.kind for e in stored] == [type(e).__name__ for e in shown]
    plan_id = store.load_run(result.run_id).state["tree"]["plan_id"]
    tree = TreeRepository(store).get_plan_tree(plan_id)
    root, venue, speakers = (by_name(tree, name) for name in (GOAL, "Venue", "Speakers"))
    split = next(e for e in stored if e.kind == "NodeDecomposed")
    assert split.data == {
        "node_id": root,
        "children": [venue, speakers],
        "reason": "the executor asked to split the task: it has several parts",
    }
    finished = {e.data["node_id"]: e.data for e in stored if e.kind == "NodeFinished"}
    assert finished[venue]["result"] == "Kosmos" and finished[venue]["status"] == "ok"
    assert finished[root]["result"] == "ready"
    order = [(e.kind, e.data["node_id"]) for e in stored]
    assert order.index(("NodeDecomposed", root)) < order.index(("NodeStarted", venue))
    assert order[-1] == ("NodeFinished", root)
    steps = [e for e in store.load_events(result.run_id) if e.kind == "StepFinished"]
    assert len(steps) == 3  # Venue, Speakers and the root's roll-up: each a checkpointed step


def test_one_child_passes_its_result_up_without_a_rollup(store: SqlStore) -> None:
    scripted = model(
        (node(GOAL), wants_split(), "execute"),
        (node("Everything"), finish("all booked"), "execute"),
        (target(GOAL), kids("Everything"), "decompose"),
    )
    result = run_sync(GOAL, tools=Log().tools(), model=scripted, store=store, strategy="tree")
    assert result.status == "ok", result.message
    assert result.answer == "all booked"
    assert "rollup" not in phases(scripted)


def test_a_run_without_a_store_splits_and_answers_too() -> None:
    scripted = model(
        (node(GOAL), wants_split(), "execute"),
        (node("Venue"), finish("Kosmos"), "execute"),
        (node("Speakers"), finish("12"), "execute"),
        (target(GOAL), kids("Venue", "Speakers"), "decompose"),
        (rolling(GOAL), "Kosmos, 12 speakers", "rollup"),
    )
    result = run_sync(GOAL, tools=Log().tools(), model=scripted, strategy="tree")
    assert result.status == "ok", result.message
    assert result.answer == "Kosmos, 12 speakers"
    assert phases(scripted) == ["execute", "decompose", "execute", "execute", "rollup"]
    # by step number: the root (its roll-up) is step 1, its children 2 and 3
    assert [step.plan_step.id for step in result.history] == ["node-1", "node-2", "node-3"]


# -- upfront and none ---------------------------------------------------------------------


def test_upfront_grows_the_tree_breadth_first_then_executes_its_leaves(store: SqlStore) -> None:
    scripted = model(
        (target(GOAL), kids("Plan", "Run", leaf=False), "decompose"),
        (target("Plan"), kids("Venue", "Budget"), "decompose"),
        (target("Run"), kids("Doors open"), "decompose"),
        (r'"title": "(Venue|Budget|Doors open)"', finish("done"), "execute"),
        (rolling("Plan"), "planned", "rollup"),
        (rolling(GOAL), "launched", "rollup"),
    )
    result = run_sync(
        GOAL,
        tools=Log().tools(),
        model=scripted,
        store=store,
        strategy="tree",
        tree=TreeOptions(decompose="upfront", max_depth=2),
    )
    assert result.status == "ok", result.message
    assert result.answer == "launched"
    assert phases(scripted)[:3] == ["decompose"] * 3  # every split before any task runs
    assert "decompose" not in phases(scripted)[3:]
    asked = asked_to_split(scripted)
    assert [a["target_task"]["name"] for a in asked[:1]] == [GOAL]
    assert sorted(a["target_task"]["name"] for a in asked[1:]) == ["Plan", "Run"]
    assert {a["mode_hint"] for a in asked} == {"plan_bfs"}
    assert sorted(executed(scripted)) == ["Budget", "Doors open", "Venue"]
    assert phases(scripted).count("rollup") == 2  # Plan and the root; Run has one child
    assert result.usage.llm_calls == 3 + 3 + 2
    assert statuses(store, result.run_id) == dict.fromkeys(
        [GOAL, "Plan", "Venue", "Budget", "Run", "Doors open"], "ok"
    )


def test_none_runs_the_stored_tree_as_it_is_and_keeps_what_finished(store: SqlStore) -> None:
    tree = stored_tree(
        store, "Conference", {"Conference": {"Venue": {}, "Catering": {}, "Talks": {}}}
    )
    log = Log()
    scripted = model(
        (node("Venue"), finish("Kosmos"), "execute"),
        (node("Catering"), call("broken", key="menu"), "execute"),
        (node("Talks"), finish("12 talks"), "execute"),
    )
    result = run_sync(
        tools=log.tools(),
        model=scripted,
        store=store,
        plan=tree.id,
        tree=TreeOptions(decompose="none"),
    )
    catering = by_name(tree, "Catering")
    assert result.stop_reason == f"node_failed:{catering}"
    assert "tool_error:broken" in (result.message or "")
    assert "decompose" not in phases(scripted)
    assert log.named("broken") == ["menu", "menu"]  # retried once: the same call, no loop
    shown = tree_of(store, result.run_id)
    assert shown["Venue"]["status"] == "ok" and shown["Venue"]["result"] == "Kosmos"
    assert shown["Talks"]["result"] == "12 talks"
    assert shown["Catering"]["status"] == "failed"
    assert shown["Catering"]["reason"] == "tool_error:broken"
    assert shown["Catering"]["attempts"] == 2
    assert shown["Conference"]["reason"] == f"node_failed:{catering}"
    assert children_in_store(store, result.run_id, "Catering") == []  # the tree is as it was


@pytest.mark.parametrize("retries", [0, 1])
def test_a_failed_leaf_is_tried_again_node_retries_times(store: SqlStore, retries: int) -> None:
    tree = stored_tree(store, "Trip", {"Trip": {"Book": {}}})
    log = Log()
    log.fail_first("hotel", 1)
    scripted = model(
        (retry("Book") + r'.*"turns": \[\{', finish("booked"), "execute"),
        (node("Book") + r'.*"turns": \[\{', finish("booked"), "execute"),
        (node("Book"), call("flaky", key="hotel"), "execute"),
    )
    result = run_sync(
        tools=log.tools(),
        model=scripted,
        store=store,
        plan=tree.id,
        tree=TreeOptions(decompose="none", node_retries=retries),
    )
    assert log.named("flaky") == ["hotel"] * (retries + 1)
    if retries == 0:
        assert result.stop_reason == f"node_failed:{by_name(tree, 'Book')}"
        return
    assert result.status == "ok", result.message
    assert result.answer == "booked"
    again = [payload(r) for r in scripted.calls if r.phase == "execute"][1]
    assert again["step"]["id"].endswith(".2")
    assert again["last_attempt"]["failed"] == "tool_error:flaky"
    assert tree_of(store, result.run_id)["Book"]["attempts"] == 1


# -- a subtree, order and concurrency -----------------------------------------------------


def test_a_subtree_runs_alone_with_its_node_as_the_goal(store: SqlStore) -> None:
    tree = stored_tree(
        store,
        "Conference",
        {"Conference": {"Venue": {"Shortlist": {}, "Book": {}}, "Talks": {"Call for papers": {}}}},
    )
    scripted = model(
        (r'"title": "(Shortlist|Book)"', finish("done"), "execute"),
        (rolling("Venue"), "Kosmos booked", "rollup"),
    )
    venue = by_name(tree, "Venue")
    result = run_sync(
        tools=Log().tools(),
        model=scripted,
        store=store,
        plan=tree.id,
        node=venue,
        tree=TreeOptions(decompose="none"),
    )
    assert result.status == "ok", result.message
    assert result.answer == "Kosmos booked"
    assert sorted(executed(scripted)) == ["Book", "Shortlist"]
    stored = store.load_run(result.run_id)
    assert stored.summary.goal == "Venue"
    view = run_tree(store, stored)
    assert view is not None and view["root"] == venue
    assert [(n["name"], n["depth"]) for n in view["nodes"]] == [
        ("Venue", 0),
        ("Shortlist", 1),
        ("Book", 1),
    ]


def test_dependencies_across_branches_run_in_order_with_the_results(store: SqlStore) -> None:
    tree = stored_tree(
        store,
        "Release",
        {"Release": {"Build": {"Code": {}, "Test": {}}, "Ship": {"Deploy": {}, "Announce": {}}}},
    )
    depend(store, tree, "Deploy", "Test")
    depend(store, tree, "Announce", "Build")  # an inner node: its whole subtree first
    live: list[Event] = []
    scripted = model(
        *[(node(name), finish(f"{name} done"), "execute") for name in ("Code", "Test", "Deploy")],
        (node("Announce"), finish("announced"), "execute"),
        (rolling("Build"), "built and tested", "rollup"),
        (rolling("Ship"), "shipped", "rollup"),
        (rolling("Release"), "released", "rollup"),
    )
    result = run_sync(
        tools=Log().tools(),
        model=scripted,
        store=store,
        plan=tree.id,
        tree=TreeOptions(decompose="none"),
        on_event=live.append,
    )
    assert result.status == "ok", result.message
    order = [
        (type(e).__name__, e.node_id) for e in live if isinstance(e, NodeStarted | NodeFinished)
    ]
    ids = {name: by_name(tree, name) for name in ("Test", "Deploy", "Build", "Announce")}
    assert order.index(("NodeFinished", ids["Test"])) < order.index(("NodeStarted", ids["Deploy"]))
    assert order.index(("NodeFinished", ids["Build"])) < order.index(
        ("NodeStarted", ids["Announce"])
    )
    requests = {
        payload(r)["step"]["title"]: payload(r) for r in scripted.calls if r.phase == "execute"
    }
    assert requests["Deploy"]["dependencies"] == [
        {"id": ids["Test"], "name": "Test", "result": "Test done"}
    ]
    assert requests["Announce"]["dependencies"] == [
        {"id": ids["Build"], "name": "Build", "result": "built and tested"}
    ]
    assert requests["Code"]["dependencies"] == []
    assert requests["Deploy"]["path"] == ["Release", "Ship", "Deploy"]


def test_independent_branches_run_at_once(store: SqlStore) -> None:
    """Each tool waits until the other is in flight too: run one after the other, both fail."""
    tree = stored_tree(store, "Two teams", {"Left": {"Left task": {}}, "Right": {"Right task": {}}})
    meeting = threading.Barrier(2, timeout=30)
    met: list[str] = []

    def meet(side: str) -> str:
        """Wait for the other side."""
        meeting.wait()
        met.append(side)
        return f"{side} met"

    scripted = model(
        (first_turn("Left task"), call("meet", side="left"), "execute"),
        (first_turn("Right task"), call("meet", side="right"), "execute"),
        (r'"title": "(Left|Right) task"', finish("met"), "execute"),
        (rolling("Two teams"), "both met", "rollup"),
    )
    result = run_sync(
        tools=[meet], model=scripted, store=store, plan=tree.id, tree=TreeOptions(decompose="none")
    )
    assert result.status == "ok", result.message
    assert sorted(met) == ["left", "right"]
    assert result.answer == "both met"  # the roll-up of the plan's two roots
    view = run_tree(store, store.load_run(result.run_id))
    assert view is not None and view["root"] is None
    assert [(n["name"], n["depth"], n["status"]) for n in view["nodes"]] == [
        ("Left", 0, "ok"),
        ("Left task", 1, "ok"),
        ("Right", 0, "ok"),
        ("Right task", 1, "ok"),
    ]


def test_max_parallel_bounds_the_leaves_in_flight(store: SqlStore) -> None:
    from taskdecomp.budget import Budget

    tree = stored_tree(store, "Many", {"Many": {"A": {}, "B": {}, "C": {}}})
    lock, flight, peak = threading.Lock(), [0], [0]

    def work(name: str) -> str:
        """Takes a while."""
        with lock:
            flight[0] += 1
            peak[0] = max(peak[0], flight[0])
        threading.Event().wait(0.2)
        with lock:
            flight[0] -= 1
        return name

    scripted = model(
        (r'"title": "([ABC])".*"turns": \[\]', call("work", name="x"), "execute"),
        (r'"title": "[ABC]"', finish("worked"), "execute"),
        (rolling("Many"), "all worked", "rollup"),
    )
    result = run_sync(
        tools=[work],
        model=scripted,
        store=store,
        plan=tree.id,
        tree=TreeOptions(decompose="none"),
        budget=Budget(max_parallel=1),
    )
    assert result.status == "ok", result.message
    assert peak == [1]


# -- trees that cannot run ----------------------------------------------------------------


def test_a_dependency_cycle_stops_the_run_before_anything_runs(store: SqlStore) -> None:
    tree = stored_tree(store, "Loop", {"Loop": {"A": {}, "B": {}, "C": {}}})
    depend(store, tree, "A", "B")
    depend(store, tree, "B", "A")
    scripted = model((".", finish("never"), "execute"))
    result = run_sync(tools=Log().tools(), model=scripted, store=store, plan=tree.id)
    assert result.stop_reason == "invalid_tree:cycle"
    assert scripted.calls == []
    named = (result.message or "").rpartition(": ")[2].split(", ")
    assert sorted(named) == sorted([str(by_name(tree, "A")), str(by_name(tree, "B"))])


def test_a_dependency_on_no_node_stops_the_run_before_anything_runs(store: SqlStore) -> None:
    tree = stored_tree(store, "Lost", {"Lost": {"A": {}}})
    from sqlalchemy import update

    from taskdecomp.store.codec import encode_json
    from taskdecomp.store.schema import plan_nodes

    with store.write() as conn:
        conn.execute(
            update(plan_nodes)
            .where(plan_nodes.c.id == by_name(tree, "A"))
            .values(dependencies=encode_json([987654], what="dependencies"))
        )
    scripted = model((".", finish("never"), "execute"))
    result = run_sync(tools=Log().tools(), model=scripted, store=store, plan=tree.id)
    assert result.stop_reason == "invalid_tree:unknown_dependency"
    assert "987654" in (result.message or "")
    assert scripted.calls == []


def test_a_run_of_a_plan_or_node_that_is_not_stored_is_refused(store: SqlStore) -> None:
    tree = stored_tree(store, "Here", {"Here": {}})
    scripted = model((".", finish("x"), "execute"))
    tools = Log().tools()
    with pytest.raises(ConfigError, match="no plan tree has id 4242"):
        run_sync(tools=tools, model=scripted, store=store, plan=4242)
    with pytest.raises(ConfigError, match=f"plan {tree.id} has no node 4242"):
        run_sync(tools=tools, model=scripted, store=store, plan=tree.id, node=4242)
    with pytest.raises(ConfigError, match="give plan= too"):
        run_sync(tools=tools, model=scripted, store=store, node=by_name(tree, "Here"))
    with pytest.raises(ConfigError, match="not 'replan'"):
        run_sync(tools=tools, model=scripted, store=store, plan=tree.id, strategy="replan")
    with pytest.raises(ConfigError, match="pass store="):
        run_sync(tools=tools, model=scripted, plan=tree.id)
    result = run_sync("Go on", tools=tools, model=scripted, store=store, plan=4242)
    assert result.stop_reason == "invalid_tree:no_plan"  # with a goal, the run itself says so


# -- failure, depth and splitting again ---------------------------------------------------


def _failing_child(store: SqlStore, *, redecompose: bool, second: Any) -> tuple[Any, Any]:
    log = Log()
    scripted = model(
        (node(GOAL), wants_split(), "execute"),
        (node("Venue"), call("broken", key="venue"), "execute"),
        (node("Speakers"), finish("12 confirmed"), "execute"),
        (node("Book a hall"), finish("hall booked"), "execute"),
        (node("Book a boat"), call("broken", key="boat"), "execute"),
        (target(GOAL) + r'.*"existing_children": \[\{', second, "decompose"),
        (target(GOAL), kids("Venue", "Speakers"), "decompose"),
    )
    result = run_sync(
        GOAL,
        tools=log.tools(),
        model=scripted,
        store=store,
        strategy="tree",
        tree=TreeOptions(max_depth=1, redecompose=redecompose),
    )
    return result, scripted


def test_a_leaf_that_fails_at_the_maximum_depth_fails_its_parents_branch(store: SqlStore) -> None:
    result, scripted = _failing_child(store, redecompose=False, second=kids("never"))
    shown = tree_of(store, result.run_id)
    venue = shown["Venue"]["id"]
    assert result.stop_reason == f"node_failed:{venue}"
    assert len(asked_to_split(scripted)) == 1  # Venue is at the maximum depth: never split
    venue_turns = [
        r for r in scripted.calls if r.phase == "execute" and "Venue" in str(payload(r)["step"])
    ]
    assert venue_turns and all("decompose" not in str(r.json_schema) for r in venue_turns)
    assert shown["Venue"]["attempts"] == 2
    assert shown["Speakers"]["status"] == "ok" and shown["Speakers"]["result"] == "12 confirmed"
    assert shown[GOAL]["status"] == "failed"
    assert shown[GOAL]["reason"] == f"node_failed:{venue}"


def test_a_parent_whose_child_failed_is_split_again_once(store: SqlStore) -> None:
    result, scripted = _failing_child(store, redecompose=True, second=kids("Book a hall"))
    assert result.status == "ok", result.message
    assert result.answer == "hall booked"  # its one new child's result
    first, second = asked_to_split(scripted)
    assert "failure" in first and second["failure"].startswith("its subtask 'Venue' failed")
    assert [c["name"] for c in second["target_task"]["existing_children"]] == ["Venue", "Speakers"]
    # the new child replaces the old ones, in the stored tree too
    assert children_in_store(store, result.run_id, GOAL) == ["Book a hall"]
    assert list(tree_of(store, result.run_id)) == [GOAL, "Book a hall"]
    speakers = store.load_run(result.run_id).state["tree"]["nodes"]
    assert "12 confirmed" in [record.get("result") for record in speakers.values()]  # kept


def test_a_parent_split_again_fails_when_its_new_children_fail(store: SqlStore) -> None:
    result, scripted = _failing_child(store, redecompose=True, second=kids("Book a boat"))
    shown = tree_of(store, result.run_id)
    assert result.stop_reason == f"node_failed:{shown['Book a boat']['id']}"
    assert len(asked_to_split(scripted)) == 2  # never a third time
    assert shown[GOAL]["reason"] == f"node_failed:{shown['Book a boat']['id']}"


def test_a_split_whose_children_would_wait_for_each_other_is_not_taken(store: SqlStore) -> None:
    tree = stored_tree(store, "Event", {"Event": {"Venue": {}, "Invite": {}}})
    venue, invite = by_name(tree, "Venue"), by_name(tree, "Invite")
    depend(store, tree, "Invite", "Venue")
    scripted = model(
        (retry("Venue"), finish("Kosmos"), "execute"),
        (node("Venue"), wants_split(), "execute"),
        (node("Invite"), finish("invited"), "execute"),
        (
            target("Venue"),
            {"children": [{"name": "Ask", "dependencies": [invite]}, {"name": "Sign"}]},
            "decompose",
        ),
        (rolling("Event"), "done", "rollup"),
    )
    result = run_sync(tools=Log().tools(), model=scripted, store=store, plan=tree.id)
    assert result.status == "ok", result.message
    assert children_in_store(store, result.run_id, "Venue") == []  # written, then taken out
    shown = tree_of(store, result.run_id)
    assert list(shown) == ["Event", "Venue", "Invite"]  # not run: Ask would wait forever
    assert shown["Venue"]["result"] == "Kosmos" and shown["Venue"]["attempts"] == 1
    assert venue != invite


def test_a_stored_run_has_a_step_per_node_in_its_plan_and_history(store: SqlStore) -> None:
    scripted: ScriptedModel = model(
        (node(GOAL), wants_split(), "execute"),
        (node("Venue"), finish("Kosmos"), "execute"),
        (node("Speakers"), finish("12"), "execute"),
        (target(GOAL), kids("Venue", "Speakers"), "decompose"),
        (rolling(GOAL), "ready", "rollup"),
    )
    result = run_sync(GOAL, tools=Log().tools(), model=scripted, store=store, strategy="tree")
    stored = store.load_run(result.run_id)
    assert stored.summary.status == "ok" and stored.answer == "ready"
    assert [step.plan_step.id.partition("-")[0] for step in stored.history] == ["node"] * 3
    assert stored.plan is not None and [s.title for s in stored.plan.steps] == [
        GOAL,
        "Venue",
        "Speakers",
    ]


def test_a_second_split_that_is_refused_leaves_the_children_it_had(store: SqlStore) -> None:
    tree = stored_tree(
        store, "Event", {"Event": {"Venue": {"Hall": {}, "Garden": {}}, "Invite": {}}}
    )
    depend(store, tree, "Invite", "Venue")
    invite = by_name(tree, "Invite")
    scripted = model(
        (node("Hall"), call("broken", key="hall"), "execute"),
        (node("Garden"), finish("garden free"), "execute"),
        (target("Venue"), {"children": [{"name": "Ask", "dependencies": [invite]}]}, "decompose"),
        (target("Event"), {"should_stop": True, "reason": "nothing else to try"}, "decompose"),
    )
    result = run_sync(
        tools=Log().tools(),
        model=scripted,
        store=store,
        plan=tree.id,
        tree=TreeOptions(max_depth=2),
    )
    assert result.stop_reason == f"node_failed:{by_name(tree, 'Hall')}"
    # Venue and then Event, once each; Hall is at the maximum depth
    assert [a["target_task"]["name"] for a in asked_to_split(scripted)] == ["Venue", "Event"]
    assert children_in_store(store, result.run_id, "Venue") == ["Hall", "Garden"]  # no Ask
    shown = tree_of(store, result.run_id)
    assert list(shown) == ["Event", "Venue", "Hall", "Garden", "Invite"]
    assert shown["Venue"]["status"] == "failed" and shown["Invite"]["status"] == "failed"
    assert shown["Garden"]["result"] == "garden free"
