"""Queued runs of the ``tree`` strategy: a worker works through a tree, splitting as needed.

The run is submitted like any other (``strategy="tree"``); the worker stores the goal as a
new plan tree in the queue's database, splits the root when its executor asks to, runs the
two children (each one ``look`` call) and rolls them up. A run of a stored plan names it in
its options.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from taskdecomp.run import RunId
from taskdecomp.store.trees import TreeRepository
from taskdecomp.strategies.tree.view import run_tree
from taskdecomp.tree import NewNode
from tests.scale.conftest import Cluster


def _leaf(title: str, n: int) -> list[dict[str, Any]]:
    """A child that calls ``look`` once, then finishes with what it saw."""
    return [
        {
            "phase": "execute",
            "match": f'"title": "{title}".*"turns": \\[\\]',
            "response": {"kind": "call", "tool": "look", "args": {"n": n, "ms": 50}},
        },
        {
            "phase": "execute",
            "match": f'"title": "{title}"',
            "response": {"kind": "finish", "result": f"{title} done"},
        },
    ]


def _model(cluster: Cluster) -> str:
    children = [
        {"name": "Flights", "instruction": "find flights", "leaf": True},
        {"name": "Hotel", "instruction": "book a hotel", "leaf": True},
    ]
    rules = [
        *_leaf("Flights", 1),
        *_leaf("Hotel", 2),
        {
            "phase": "execute",
            "match": '"title": "Plan a trip',
            "response": {"kind": "decompose", "reason": "two separate bookings"},
        },
        {"phase": "decompose", "match": ".", "response": {"children": children}},
        {"phase": "rollup", "match": ".", "response": "trip planned: flights and hotel"},
    ]
    script = cluster.home / "model-tree.json"
    script.write_text(json.dumps({"rules": rules}))
    cluster.models["tree"] = f"scripted:{script}"
    return "tree"


def test_a_worker_works_through_a_submitted_tree_run_splitting_its_root(
    cluster: Cluster,
) -> None:
    model = _model(cluster)
    cluster.start()
    run_id = cluster.submit("Plan a trip to Lisbon", model, strategy="tree")

    ended = cluster.ended([run_id], timeout=120)

    assert (ended[run_id].status, ended[run_id].stop_reason) == ("ok", "success")
    stored = cluster.store.load_run(RunId(run_id))
    assert stored.answer == "trip planned: flights and hotel"
    tree = run_tree(cluster.store, stored)
    assert tree is not None
    by_name = {node["name"]: node for node in tree["nodes"]}
    assert set(by_name) == {"Plan a trip to Lisbon", "Flights", "Hotel"}
    assert {name: node["status"] for name, node in by_name.items()} == dict.fromkeys(by_name, "ok")
    assert by_name["Hotel"]["result"] == "Hotel done"
    assert by_name["Plan a trip to Lisbon"]["split"]
    looks = Counter(c.key.split(":")[0] for c in cluster.calls() if c.event == "start")
    assert looks == Counter({run_id: 2})  # each leaf's one call, once


def test_a_submitted_run_of_a_stored_plan_runs_its_tree_as_it_is(cluster: Cluster) -> None:
    model = _model(cluster)
    trees = TreeRepository(cluster.store)
    plan = trees.create_plan("Plan a trip", [NewNode(name="Plan a trip")])
    root = plan.nodes[0].id
    trees.write_children(plan.id, root, [NewNode(name="Flights"), NewNode(name="Hotel")])
    cluster.start()
    run_id = cluster.submit(
        "Plan a trip", model, strategy="tree", options={"plan_id": plan.id, "decompose": "none"}
    )

    ended = cluster.ended([run_id], timeout=120)

    assert (ended[run_id].status, ended[run_id].stop_reason) == ("ok", "success")
    stored = cluster.store.load_run(RunId(run_id))
    assert stored.answer == "trip planned: flights and hotel"
    assert len(trees.get_plan_tree(plan.id).nodes) == 3  # nothing was split
