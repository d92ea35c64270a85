"""The plan-tree repository, on a real SQLite file and on the real PostgreSQL server."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from taskdecomp.errors import TreeNotFoundError
from taskdecomp.store import SqlStore
from taskdecomp.store.trees import TreeRepository
from taskdecomp.tree import NewNode, NodeContext, NodeId, PlanTreeId

PG_URL = os.environ.get("TEST_PG_URL", "postgresql://postgres@127.0.0.1/test")


@pytest.fixture(params=["sqlite", "postgresql"])
def trees(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TreeRepository]:
    if request.param == "sqlite":
        store = SqlStore(f"sqlite:///{tmp_path / 'trees.db'}")
        yield TreeRepository(store)
        store.close()
        return
    schema = f"td_trees_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_URL.replace("postgresql://", "postgresql+psycopg://", 1))
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    store = SqlStore(f"{PG_URL}?options=-csearch_path%3D{schema}")
    try:
        yield TreeRepository(store)
    finally:
        store.close()
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def test_create_and_read_back(trees: TreeRepository) -> None:
    tree = trees.create_plan("Launch", [NewNode(name="Root", instruction="do it")])
    again = trees.get_plan_tree(tree.id)
    assert again == tree
    (root,) = again.roots()
    assert (root.name, root.instruction, root.position) == ("Root", "do it", 0)
    assert root.parent_id is None


def test_children_are_appended_in_order_and_walk_is_depth_first(trees: TreeRepository) -> None:
    tree = trees.create_plan("P", [NewNode(name="R")])
    root = tree.roots()[0]
    first = trees.write_children(tree.id, root.id, [NewNode(name="a"), NewNode(name="b")])
    later = trees.write_children(tree.id, root.id, [NewNode(name="c")])
    trees.write_children(tree.id, first[0].id, [NewNode(name="a1")])
    assert [n.position for n in first + later] == [0, 1, 2]
    walked = [(n.name, d) for n, d in trees.get_plan_tree(tree.id).walk()]
    assert walked == [("R", 0), ("a", 1), ("a1", 2), ("b", 1), ("c", 1)]
    assert [n.name for n in trees.get_plan_tree(tree.id).path(first[0].id)] == ["R", "a"]


def test_replace_deletes_the_old_subtree_in_the_same_write(trees: TreeRepository) -> None:
    tree = trees.create_plan("P", [NewNode(name="R")])
    root = tree.roots()[0]
    old = trees.write_children(tree.id, root.id, [NewNode(name="old")])
    trees.write_children(tree.id, old[0].id, [NewNode(name="old child")])
    new = trees.write_children(tree.id, root.id, [NewNode(name="new")], replace=True)
    names = [n.name for n in trees.get_plan_tree(tree.id).nodes]
    assert names == ["R", "new"]
    assert new[0].position == 0


def test_update_task(trees: TreeRepository) -> None:
    tree = trees.create_plan("P", [NewNode(name="R")])
    node = trees.create_task(tree.id, tree.roots()[0].id, NewNode(name="x"))
    changed = trees.update_task(
        node.id, instruction="now", leaf=True, context=NodeContext(combined="c", meta={"k": 1})
    )
    assert (changed.instruction, changed.leaf, changed.context.meta) == ("now", True, {"k": 1})
    assert changed.name == "x"


@pytest.mark.parametrize("value", ["nul \x00 inside", "lone \udc80 surrogate", "é" * 100_000])
def test_awkward_text_round_trips_identically(trees: TreeRepository, value: str) -> None:
    tree = trees.create_plan(value, [NewNode(name=value, instruction=value)])
    again = trees.get_plan_tree(tree.id)
    assert again.title == value
    assert again.roots()[0].name == value and again.roots()[0].instruction == value


def test_unknown_ids_are_clear_errors(trees: TreeRepository) -> None:
    with pytest.raises(TreeNotFoundError, match="no plan tree has id 999999"):
        trees.get_plan_tree(PlanTreeId(999999))
    tree = trees.create_plan("P", [NewNode(name="R")])
    with pytest.raises(TreeNotFoundError, match="no plan node has id 999999"):
        trees.write_children(tree.id, NodeId(999999), [NewNode(name="x")])
    with pytest.raises(TreeNotFoundError):
        trees.update_task(NodeId(999999), leaf=True)


def test_list_plans(trees: TreeRepository) -> None:
    a = trees.create_plan("first", [NewNode(name="R")])
    b = trees.create_plan("second", [])
    listed = trees.list_plans()
    assert listed[:2] == [(b.id, "second", 0), (a.id, "first", 1)]


def test_plans_page_newest_first_by_id(trees: TreeRepository) -> None:
    made = [trees.create_plan(f"plan {n}", [NewNode(name="R")] * (n % 3)).id for n in range(7)]
    pages, before = [], None
    while True:
        plans, before = trees.page_plans(limit=3, before=before)
        pages.append(plans)
        if before is None:
            break
    assert [[plan_id for plan_id, _, _ in page] for page in pages] == [
        made[6:3:-1],
        made[3:0:-1],
        made[:1],
    ]
    assert pages[0][0] == (made[6], "plan 6", 0) and pages[1][0] == (made[3], "plan 3", 0)
    assert trees.page_plans(limit=7) == (trees.list_plans(), None)


@pytest.mark.parametrize("given", [2**31, 2**63 - 1, 2**63, 10**20, -(2**63) - 1])
def test_an_id_no_column_holds_names_no_plan_or_node(trees: TreeRepository, given: int) -> None:
    plan = trees.create_plan("p", [NewNode(name="R")])
    with pytest.raises(TreeNotFoundError, match=f"no plan tree has id {given}"):
        trees.get_plan_tree(PlanTreeId(given))
    with pytest.raises(TreeNotFoundError, match=f"no plan tree has id {given}"):
        trees.write_children(PlanTreeId(given), None, [NewNode(name="C")])
    with pytest.raises(TreeNotFoundError, match=f"no plan node has id {given}"):
        trees.update_task(NodeId(given), name="x")
    with pytest.raises(TreeNotFoundError, match=f"no plan node has id {given}"):
        trees.write_children(plan.id, NodeId(given), [NewNode(name="C")])
    assert trees.page_plans(limit=5, before=PlanTreeId(given)) == (
        ([(plan.id, "p", 1)], None) if given > 0 else ([], None)
    )
