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
    retry,
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


# -- splits the run did not take, and second splits ---------------------------------------------


def test_refused_children_leave_the_stored_tree_and_the_next_run_of_the_plan_works(
    store: SqlStore,
) -> None:
    tree = stored_tree(store, "Event", {"Event": {"Venue": {}, "Invite": {}}})
    invite = by_name(tree, "Invite")
    depend(store, tree, "Invite", "Venue")
    scripted = model(
        (retry("Venue"), finish("Kosmos"), "execute"),
        (node("Venue"), wants_split(), "execute"),
        (node("Invite"), finish("invited"), "execute"),
        (
            target("Venue"),  # Ask would wait for Invite, which waits for Venue
            {"children": [{"name": "Ask", "dependencies": [invite]}, {"name": "Sign"}]},
            "decompose",
        ),
        (rolling("Event"), "done", "rollup"),
    )
    first = run_sync(tools=Log().tools(), model=scripted, store=store, plan=tree.id)
    assert first.status == "ok", first.message
    assert stored(store, tree) == [
        ("Event", None, []),
        ("Venue", "Event", []),
        ("Invite", "Event", ["Venue"]),
    ]
    again = model((r'"title"', finish("x"), "execute"), (rolling("Event"), "done", "rollup"))
    options = TreeOptions(decompose="none")
    second = run_sync(tools=Log().tools(), model=again, store=store, plan=tree.id, tree=options)
    assert second.status == "ok", second.message
    assert sorted(executed(again)) == ["Invite", "Venue"]


def test_a_second_split_replaces_the_old_children_in_the_stored_tree(store: SqlStore) -> None:
    tree = stored_tree(store, "Event", {"Event": {"Venue": {"Hall": {}, "Garden": {}}, "Ads": {}}})
    depend(store, tree, "Ads", "Garden")  # on an old child: on Venue, once it is gone
    scripted = model(
        (node("Hall"), call("broken", key="hall"), "execute"),
        (node("Garden"), finish("garden free"), "execute"),
        (target("Hall"), {"should_stop": True, "reason": "one call"}, "decompose"),
        (target("Venue"), kids("Boat"), "decompose"),
        (node("Boat"), finish("boat booked"), "execute"),
        (node("Ads"), finish("ads out"), "execute"),
        (rolling("Event"), "event ready", "rollup"),
    )
    result = run_sync(
        tools=Log().tools(),
        model=scripted,
        store=store,
        plan=tree.id,
        tree=TreeOptions(node_retries=0),
    )
    assert result.status == "ok", result.message
    assert stored(store, tree) == [
        ("Event", None, []),
        ("Venue", "Event", []),
        ("Ads", "Event", ["Venue"]),
        ("Boat", "Venue", []),
    ]
    view = run_tree(store, store.load_run(result.run_id))
    assert view is not None
    assert [(n["name"], n["status"]) for n in view["nodes"]] == [
        ("Event", "ok"),
        ("Venue", "ok"),
        ("Boat", "ok"),
        ("Ads", "ok"),
    ]
    state = store.load_run(result.run_id).state["tree"]
    kept = state["nodes"][str(by_name(tree, "Garden"))]
    assert (kept["status"], kept["result"]) == ("ok", "garden free")  # the run keeps its record
    assert state["splits"][str(by_name(tree, "Venue"))].get("drop", []) == []  # done with


def test_a_second_split_that_would_leave_the_stored_plan_circular_is_refused(
    store: SqlStore,
) -> None:
    """Ads needs Garden, under Venue; the new child Flyer needs Ads. With Garden gone, Ads
    would need Venue, which would need Flyer, which needs Ads: the old children stay."""
    tree = stored_tree(store, "Event", {"Event": {"Venue": {"Hall": {}, "Garden": {}}, "Ads": {}}})
    ads = by_name(tree, "Ads")
    depend(store, tree, "Ads", "Garden")
    scripted = model(
        (node("Hall"), call("broken", key="hall"), "execute"),
        (node("Garden"), finish("garden free"), "execute"),
        (target("Hall"), {"should_stop": True, "reason": "one call"}, "decompose"),
        (target("Venue"), {"children": [{"name": "Flyer", "dependencies": [ads]}]}, "decompose"),
        (target("Event"), {"should_stop": True, "reason": "no"}, "decompose"),
        (node("Ads"), finish("ads out"), "execute"),
    )
    result = run_sync(
        tools=Log().tools(),
        model=scripted,
        store=store,
        plan=tree.id,
        tree=TreeOptions(node_retries=0),
    )
    assert result.stop_reason == f"node_failed:{by_name(tree, 'Hall')}", result.message
    assert stored(store, tree) == [
        ("Event", None, []),
        ("Venue", "Event", []),
        ("Ads", "Event", ["Garden"]),
        ("Hall", "Venue", []),
        ("Garden", "Venue", []),
    ]


# -- a run's own nodes ------------------------------------------------------------------------


def test_a_finished_runs_tree_does_not_change_when_a_later_run_splits_its_nodes(
    store: SqlStore,
) -> None:
    tree = stored_tree(store, "Trip", {"Trip": {}})
    first = run_sync(
        tools=Log().tools(),
        model=model((node("Trip"), finish("booked it all"), "execute")),
        store=store,
        plan=tree.id,
    )
    later = model(
        (node("Trip"), wants_split(), "execute"),
        (target("Trip"), kids("Flights", "Hotel"), "decompose"),
        (r'"title"', finish("ok"), "execute"),
        (rolling("Trip"), "done", "rollup"),
    )
    second = run_sync(tools=Log().tools(), model=later, store=store, plan=tree.id)
    assert second.status == "ok", second.message
    view = run_tree(store, store.load_run(first.run_id))
    assert view is not None
    assert [(n["name"], n["status"], n["leaf"]) for n in view["nodes"]] == [("Trip", "ok", True)]
    view = run_tree(store, store.load_run(second.run_id))
    assert view is not None
    assert [n["name"] for n in view["nodes"]] == ["Trip", "Flights", "Hotel"]


def test_a_resumed_run_does_not_run_the_nodes_another_run_added_meanwhile(
    store: SqlStore,
) -> None:
    from taskdecomp import approve_sync

    tree = stored_tree(store, "Launch", {"Launch": {"Tell": {}, "Ship": {}}})
    depend(store, tree, "Ship", "Tell")
    log = Log()
    first = model(
        (node("Tell") + r'.*"call": \{"tool": "send"', finish("told"), "execute"),
        (node("Tell"), call("send", to="ann"), "execute"),
        (node("Ship"), finish("shipped"), "execute"),
        (rolling("Launch"), "launched", "rollup"),
    )
    paused = run_sync(tools=log.tools(), model=first, store=store, plan=tree.id)
    assert paused.stop_reason == "awaiting_approval", paused.message
    other = model(
        (node("Tell"), finish("told by phone"), "execute"),
        (node("Ship"), wants_split(), "execute"),
        (target("Ship"), kids("Pack", "Post"), "decompose"),
        (r'"title": "(Pack|Post)"', finish("done"), "execute"),
        (rolling("Ship"), "packed and posted", "rollup"),
        (rolling("Launch"), "launched", "rollup"),
    )
    meanwhile = run_sync(tools=Log().tools(), model=other, store=store, plan=tree.id)
    assert meanwhile.status == "ok", meanwhile.message
    done = approve_sync(paused.run_id, store=store, tools=log.tools(), model=first)
    assert done.status == "ok", done.message
    assert set(executed(first)) == {"Tell", "Ship"}  # Ship as the leaf it was: no Pack, Post
    assert executed(first).count("Ship") == 1
    view = run_tree(store, store.load_run(done.run_id))
    assert view is not None
    assert [n["name"] for n in view["nodes"]] == ["Launch", "Tell", "Ship"]


def test_a_run_stored_before_it_kept_its_own_nodes_sees_every_node(store: SqlStore) -> None:
    tree = stored_tree(store, "Trip", {"Trip": {}})
    scripted = model(
        (node("Trip"), wants_split(), "execute"),
        (target("Trip"), kids("Flights", "Hotel"), "decompose"),
        (r'"title"', finish("ok"), "execute"),
        (rolling("Trip"), "done", "rollup"),
    )
    result = run_sync(tools=Log().tools(), model=scripted, store=store, plan=tree.id)
    loaded = store.load_run(result.run_id)
    state = dict(loaded.state["tree"])
    assert state.pop("created") == [
        by_name(TreeRepository(store).get_plan_tree(tree.id), n) for n in ("Flights", "Hotel")
    ]
    state.pop("added")
    store.save_state(
        result.run_id,
        loaded.plan,
        {"tree": state},
        approvals=loaded.approvals,
        usage=loaded.usage,
        events=(),
    )
    view = run_tree(store, store.load_run(result.run_id))
    assert view is not None
    assert [n["name"] for n in view["nodes"]] == ["Trip", "Flights", "Hotel"]
