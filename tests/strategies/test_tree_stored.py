"""What a ``tree`` run leaves in the stored plan tree, for the runs that come after it.

A split a human rejected leaves the tree (a later run would otherwise run its children
unapproved). Deleting nodes keeps the plan one that can be worked through: the nodes that
depended on them depend on what is left above them.
"""

from __future__ import annotations

from taskdecomp import TreeOptions, TreeRepository, reject, run_sync
from taskdecomp.store import SqlStore
from taskdecomp.strategies.tree.view import run_tree
from taskdecomp.tree import NewNode, PlanTree
from tests.strategies.tree_support import (
    Log,
    asked_to_split,
    by_name,
    call,
    depend,
    executed,
    finish,
    kids,
    model,
    node,
    pg_url,
    rolling,
    sqlite_url,
    store,
    stored_tree,
    target,
    wants_split,
)

__all__ = ["pg_url", "sqlite_url", "store"]  # fixtures, used by name


def stored(store: SqlStore, tree: PlanTree) -> list[tuple[str, str | None, list[str]]]:
    """Each stored node: its name, its parent's name and the names it depends on."""
    now = TreeRepository(store).get_plan_tree(tree.id)
    names = {n.id: n.name for n in now.nodes}
    return [
        (
            n.name,
            names[n.parent_id] if n.parent_id is not None else None,
            [names.get(d, f"#{d}") for d in n.dependencies],
        )
        for n in now.nodes
    ]


# -- a rejected split -------------------------------------------------------------------------


def test_a_rejected_split_leaves_the_stored_tree_and_no_later_run_runs_it(
    store: SqlStore,
) -> None:
    tree = stored_tree(store, "Trip", {"Trip": {}})
    scripted = model(
        (node("Trip"), wants_split(), "execute"),
        (target("Trip"), kids("Flights", "Hotel"), "decompose"),
    )
    options = TreeOptions(approve_decompositions=True)
    paused = run_sync(tools=Log().tools(), model=scripted, store=store, plan=tree.id, tree=options)
    assert paused.stop_reason == "awaiting_approval", paused.message
    assert [name for name, _, _ in stored(store, tree)] == ["Trip", "Flights", "Hotel"]
    ended = reject(paused.run_id, reason="book a package holiday", store=store)
    assert ended.stop_reason == "approval_rejected"
    assert stored(store, tree) == [("Trip", None, [])]
    view = run_tree(store, store.load_run(paused.run_id))
    assert view is not None
    assert [(n["name"], n["status"], n["reason"], n["leaf"]) for n in view["nodes"]] == [
        ("Trip", "failed", "approval_rejected", True)
    ]
    again = model(
        (node("Trip"), wants_split(), "execute"),
        (target("Trip"), kids("Package holiday"), "decompose"),
        (r'"title"', finish("booked"), "execute"),
    )
    later = run_sync(tools=Log().tools(), model=again, store=store, plan=tree.id, tree=options)
    assert later.stop_reason == "awaiting_approval"  # its own split, asked for again
    assert executed(again) == ["Trip"]
    assert [a["target_task"]["name"] for a in asked_to_split(again)] == ["Trip"]


def test_a_rejected_tool_call_leaves_the_stored_tree_as_it_was(store: SqlStore) -> None:
    tree = stored_tree(store, "Tell", {"Tell": {"Notify": {}, "Log": {}}})
    scripted = model(
        (node("Notify"), call("send", to="ann"), "execute"),
        (node("Log"), finish("logged"), "execute"),
    )
    paused = run_sync(tools=Log().tools(), model=scripted, store=store, plan=tree.id)
    assert paused.stop_reason == "awaiting_approval", paused.message
    before = store.load_run(paused.run_id).state
    reject(paused.run_id, reason="not now", store=store)
    assert stored(store, tree) == [("Tell", None, []), ("Notify", "Tell", []), ("Log", "Tell", [])]
    assert store.load_run(paused.run_id).state == before


def test_an_approved_split_is_not_undone_by_a_later_rejection(store: SqlStore) -> None:
    from taskdecomp import approve_sync

    tree = stored_tree(store, "Trip", {"Trip": {}})
    log = Log()
    scripted = model(
        (node("Trip"), wants_split(), "execute"),
        (target("Trip"), kids("Flights", "Tell"), "decompose"),
        (node("Flights"), finish("flights booked"), "execute"),
        (node("Tell"), call("send", to="ann"), "execute"),
        (rolling("Trip"), "trip ready", "rollup"),
    )
    options = TreeOptions(approve_decompositions=True)
    paused = run_sync(tools=log.tools(), model=scripted, store=store, plan=tree.id, tree=options)
    assert paused.stop_reason == "awaiting_approval"
    on_call = approve_sync(paused.run_id, store=store, tools=log.tools(), model=scripted)
    assert on_call.stop_reason == "awaiting_approval", on_call.message
    assert on_call.approval is not None and on_call.approval["kind"] == "tool"
    reject(on_call.run_id, reason="do not tell ann", store=store)
    assert [name for name, _, _ in stored(store, tree)] == ["Trip", "Flights", "Tell"]


# -- deleting nodes -----------------------------------------------------------------------------


def test_deleting_nodes_takes_their_subtrees_and_reroutes_what_depended_on_them(
    store: SqlStore,
) -> None:
    tree = stored_tree(
        store,
        "Event",
        {"Event": {"Venue": {"Hall": {"Floor": {}}, "Garden": {}}, "Invite": {}, "Print": {}}},
    )
    depend(store, tree, "Invite", "Hall")  # -> Venue, the deleted node's ancestor left
    depend(store, tree, "Print", "Floor", "Invite", "Garden")
    depend(store, tree, "Garden", "Floor")  # -> Venue: its own ancestor, so dropped
    repository = TreeRepository(store)
    other = repository.create_plan("Other", [NewNode(name="Elsewhere")])
    gone = repository.delete_nodes(
        tree.id, [by_name(tree, "Hall"), other.nodes[0].id, by_name(tree, "Floor")]
    )
    assert gone == 2  # Hall and Floor, below it; a node of another plan is not touched
    assert stored(store, tree) == [
        ("Event", None, []),
        ("Venue", "Event", []),
        ("Invite", "Event", ["Venue"]),
        ("Print", "Event", ["Venue", "Invite", "Garden"]),
        ("Garden", "Venue", []),
    ]
    assert [n.name for n in repository.get_plan_tree(other.id).nodes] == ["Elsewhere"]
    assert repository.delete_nodes(tree.id, [by_name(tree, "Hall")]) == 0  # already gone
