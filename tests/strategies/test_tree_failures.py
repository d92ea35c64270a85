"""How a ``tree`` run fails: the failure reaches every node that needs it, and only once.

A node that fails before running its subtree (a node it needs failed) ends that subtree
too, so nothing elsewhere waits for it forever, also after a resume. A leaf tried again,
or split after a failed attempt, is told what the failed attempt already did, so a call
with side effects is not made twice.
"""

from __future__ import annotations

import threading
from typing import Any

from taskdecomp import TreeOptions, approve_sync, run_sync
from taskdecomp.budget import Budget
from taskdecomp.events import Event, NodeFinished
from taskdecomp.store import SqlStore
from taskdecomp.strategies.tree.view import run_tree
from tests.strategies.tree_support import (
    Log,
    asked_to_split,
    by_name,
    call,
    depend,
    finish,
    first_turn,
    model,
    node,
    payload,
    pg_url,
    sqlite_url,
    store,
    stored_tree,
    target,
)

__all__ = ["pg_url", "sqlite_url", "store"]  # fixtures, used by name

DEADLINE = Budget(max_seconds=60)
"""Far more than any of these runs takes: a run that waits forever stops on it instead."""


def shown(store: SqlStore, run_id: str) -> dict[str, tuple[str, str | None]]:
    view = run_tree(store, store.load_run(run_id))
    assert view is not None
    return {entry["name"]: (entry["status"], entry["reason"]) for entry in view["nodes"]}


# -- a failure before a subtree ran ---------------------------------------------------------


def test_a_node_failed_by_what_it_needs_ends_its_subtree_for_those_waiting_on_it(
    store: SqlStore,
) -> None:
    tree = stored_tree(store, "Root", {"Root": {"D": {}, "P": {"B": {}, "C": {}}, "A": {}}})
    depend(store, tree, "P", "D")  # P fails when D does, before B and C run
    depend(store, tree, "A", "B")  # A waits for B, which never runs
    scripted = model(
        (node("D"), call("broken", key="x"), "execute"),
        (r'"title": "(B|C|A)"', finish("done"), "execute"),
    )
    result = run_sync(
        tools=Log().tools(),
        model=scripted,
        store=store,
        plan=tree.id,
        tree=TreeOptions(decompose="none", node_retries=0),
        budget=DEADLINE,
    )
    ids = {name: by_name(tree, name) for name in ("D", "P", "B")}
    assert result.stop_reason == f"node_failed:{ids['D']}", result.message
    assert shown(store, result.run_id) == {
        "Root": ("failed", f"node_failed:{ids['D']}"),
        "D": ("failed", "tool_error:broken"),
        "P": ("failed", f"node_failed:{ids['D']}"),
        "B": ("failed", f"node_failed:{ids['P']}"),
        "C": ("failed", f"node_failed:{ids['P']}"),
        "A": ("failed", f"node_failed:{ids['B']}"),
    }
    executed = [payload(r)["step"]["title"] for r in scripted.calls if r.phase == "execute"]
    assert executed == ["D"]


def test_as_needed_the_failure_reaches_the_waiting_node_after_the_splits_fail_too(
    store: SqlStore,
) -> None:
    tree = stored_tree(store, "Root", {"Root": {"D": {}, "P": {"B": {}, "C": {}}, "A": {}}})
    depend(store, tree, "P", "D")
    depend(store, tree, "A", "B")
    scripted = model(
        (node("D"), call("broken", key="x"), "execute"),
        (target("D"), {"should_stop": True, "reason": "cannot split"}, "decompose"),
        (target("Root"), {"should_stop": True, "reason": "nothing else"}, "decompose"),
        (r'"title": "(B|C|A)"', finish("done"), "execute"),
    )
    result = run_sync(
        tools=Log().tools(), model=scripted, store=store, plan=tree.id, budget=DEADLINE
    )
    assert result.stop_reason == f"node_failed:{by_name(tree, 'D')}", result.message
    assert [a["target_task"]["name"] for a in asked_to_split(scripted)] == ["D", "Root"]


def test_a_resumed_run_ends_the_subtree_of_a_node_that_failed_before_it_stopped(
    store: SqlStore,
) -> None:
    """P failed (D, which it needs, failed) before the run paused for E's call; A waits for
    E and then for B, under P: after the approval, B ends as failed for A."""
    tree = stored_tree(
        store, "Root", {"Root": {"D": {}, "P": {"B": {}, "C": {}}, "E": {}, "A": {}}}
    )
    depend(store, tree, "P", "D")
    depend(store, tree, "A", "E", "B")
    p_failed = threading.Event()

    def watch(event: Event) -> None:
        if isinstance(event, NodeFinished) and event.node_id == by_name(tree, "P"):
            p_failed.set()

    def wait_for_p(key: str) -> str:
        """Return once P failed."""
        assert p_failed.wait(30)
        return f"{key} waited"

    log = Log()
    tools = [*log.tools(), wait_for_p]
    scripted = model(
        (node("D"), call("broken", key="x"), "execute"),
        (node("E") + r'.*"call": \{"tool": "send"', finish("e sent"), "execute"),
        (first_turn("E"), call("wait_for_p", key="e"), "execute"),
        (node("E"), call("send", to="e"), "execute"),
        (r'"title": "(B|C|A)"', finish("done"), "execute"),
    )
    options = TreeOptions(decompose="none", node_retries=0)
    paused = run_sync(
        tools=tools,
        model=scripted,
        store=store,
        plan=tree.id,
        tree=options,
        budget=DEADLINE,
        on_event=watch,
    )
    assert paused.stop_reason == "awaiting_approval", paused.message
    ids = {name: by_name(tree, name) for name in ("D", "P", "B")}
    before = shown(store, paused.run_id)
    assert before["P"] == ("failed", f"node_failed:{ids['D']}")
    assert before["B"] == ("failed", f"node_failed:{ids['P']}")
    assert before["A"][0] in ("pending", "running")
    done = approve_sync(paused.run_id, store=store, tools=tools, model=scripted)
    assert done.stop_reason == f"node_failed:{ids['D']}", done.message
    after = shown(store, done.run_id)
    assert after["E"] == ("ok", None)
    assert after["A"] == ("failed", f"node_failed:{ids['B']}")
    assert log.named("send") == ["e"]


def test_a_resumed_run_ends_the_unrun_subtree_of_a_node_stored_as_failed(
    store: SqlStore,
) -> None:
    """As a run stored before the nodes below a failed node were recorded: they are
    recorded now, as failed for it, and the run ends naming the node that failed first."""
    tree = stored_tree(
        store, "Root", {"Root": {"D": {}, "P": {"B": {}, "C": {}}, "E": {}, "A": {}}}
    )
    depend(store, tree, "P", "D")
    depend(store, tree, "A", "E", "B")
    log = Log()
    scripted = model(
        (node("D"), call("broken", key="x"), "execute"),
        (first_turn("E"), call("send", to="e"), "execute"),
        (node("E"), finish("e sent"), "execute"),
        (r'"title": "(B|C|A)"', finish("done"), "execute"),
    )
    options = TreeOptions(decompose="none", node_retries=0)
    paused = run_sync(
        tools=log.tools(),
        model=scripted,
        store=store,
        plan=tree.id,
        tree=options,
        budget=DEADLINE,
    )
    assert paused.stop_reason == "awaiting_approval", paused.message
    ids = {name: by_name(tree, name) for name in ("D", "P", "B")}
    stored = store.load_run(paused.run_id)
    state: dict[str, Any] = stored.state["tree"]
    nodes = state["nodes"]
    nodes[str(ids["D"])] = {**nodes.get(str(ids["D"]), {}), "status": "failed"}
    nodes[str(ids["D"])]["reason"] = "tool_error:broken"
    nodes[str(ids["P"])] = {"status": "failed", "reason": f"node_failed:{ids['D']}"}
    for name in ("B", "C", "A"):
        nodes.pop(str(by_name(tree, name)), None)
    store.save_state(
        paused.run_id,
        stored.plan,
        {"tree": state},
        approvals=stored.approvals,
        usage=stored.usage,
        events=(),
    )
    done = approve_sync(paused.run_id, store=store, tools=log.tools(), model=scripted)
    assert done.stop_reason == f"node_failed:{ids['D']}", done.message
    after = shown(store, done.run_id)
    assert after["B"] == after["C"] == ("failed", f"node_failed:{ids['P']}")
    assert after["A"] == ("failed", f"node_failed:{ids['B']}")
    assert after["E"] == ("ok", None)
