"""How a ``tree`` run sees its tree: active children after splits, depths, waits, cycles.

Pure: trees are built in memory, nothing is stored.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taskdecomp.stops import StopRun
from taskdecomp.strategies.tree.shape import TOP, Shape, check
from taskdecomp.strategies.tree.state import Split, TreeState
from taskdecomp.tree import NodeContext, NodeId, PlanNode, PlanTree, PlanTreeId

Spec = tuple[int, int | None, Sequence[int]]
"""A node: its id, its parent's id, the ids it depends on."""


def tree_of(*specs: Spec) -> PlanTree:
    """A plan tree of these nodes; siblings take positions in the order given."""
    positions: dict[int | None, int] = {}
    nodes = []
    for node_id, parent, deps in specs:
        position = positions[parent] = positions.get(parent, -1) + 1
        nodes.append(
            PlanNode(
                id=NodeId(node_id),
                plan_id=PlanTreeId(1),
                parent_id=None if parent is None else NodeId(parent),
                position=position,
                name=f"n{node_id}",
                instruction="",
                dependencies=tuple(NodeId(d) for d in deps),
                context=NodeContext(),
                leaf=False,
            )
        )
    return PlanTree(id=PlanTreeId(1), title="plan", nodes=tuple(nodes))


def shape(*specs: Spec, root: int | None = None, state: TreeState | None = None) -> Shape:
    state = state or TreeState()
    state.root = root
    return Shape(tree_of(*specs), state)


RELEASE = (
    (1, None, ()),
    (2, 1, ()),  # Build
    (3, 2, ()),  # Code
    (4, 2, ()),  # Test
    (5, 1, (2,)),  # Ship, after Build
    (6, 5, (4, 1)),  # Deploy, after Test (and its own root: already met)
    (7, 5, ()),  # Announce
)


def test_a_node_waits_for_its_dependencies_and_its_ancestors_but_not_its_lineage() -> None:
    seen = shape(*RELEASE)
    assert seen.waits_for(NodeId(6)) == [4, 2]  # its own, then Ship's
    assert seen.waits_for(NodeId(7)) == [2]  # Ship's: a child waits for what its parent does
    assert seen.waits_for(NodeId(3)) == []
    check(seen)


def test_a_subtree_run_ignores_dependencies_outside_it() -> None:
    seen = shape(*RELEASE, root=5)
    assert seen.waits_for(NodeId(6)) == []  # Test and Build are not part of this run
    assert seen.ids() == {5, 6, 7}
    assert [seen.depth(NodeId(n)) for n in (5, 6, 7)] == [0, 1, 1]
    assert seen.ancestors(NodeId(6)) == [5]


def test_every_root_of_a_plan_hangs_below_the_top() -> None:
    seen = shape((1, None, ()), (2, None, ()), (3, 2, ()))
    assert seen.root == TOP
    assert [kid.id for kid in seen.children(TOP)] == [1, 2]
    assert [seen.depth(NodeId(n)) for n in (1, 2, 3)] == [0, 0, 1]
    assert seen.ancestors(NodeId(3)) == [2, TOP]
    assert not seen.is_leaf(TOP) and seen.is_leaf(NodeId(1))


def test_after_a_split_only_its_children_are_active() -> None:
    state = TreeState()
    state.splits["1"] = Split(first_position=2, reason="x", children=[4, 5])
    seen = shape(
        (1, None, ()), (2, 1, ()), (3, 1, ()), (4, 1, ()), (5, 1, ()), (6, 2, ()), state=state
    )
    assert [kid.id for kid in seen.children(NodeId(1))] == [4, 5]
    assert seen.ids() == {TOP, 1, 4, 5}
    assert seen.depth(NodeId(6)) == 2  # an inactive node is as deep as its path says


def test_a_split_that_made_nothing_leaves_a_leaf() -> None:
    state = TreeState()
    state.splits["2"] = Split(first_position=0, reason="x", children=[])
    seen = shape((1, None, ()), (2, 1, ()), (3, 2, ()), root=1, state=state)
    assert seen.is_leaf(NodeId(2))


def test_added_counts_the_nodes_below_the_root_the_run_did_not_start_with() -> None:
    seen = shape(*RELEASE, root=5)
    assert seen.added({1, 2, 3, 4, 5}) == 2  # 6 and 7, below the run's root
    assert seen.added({1, 2, 3, 4, 5, 6, 7}) == 0


@pytest.mark.parametrize(
    "specs",
    [
        [(1, None, ()), (2, 1, (3,)), (3, 1, (2,))],  # siblings wait for each other
        [(1, None, ()), (2, 1, (4,)), (3, 1, ()), (4, 3, (2,))],  # across branches
        [(1, None, ()), (2, 1, (3,)), (3, 2, ())],  # a parent waits for its own child
        [(1, None, ()), (2, 1, ()), (3, 2, (4,)), (4, 1, (2,))],  # a child waits for its
    ],  # parent's successor, which waits for the parent
)
def test_nodes_that_wait_for_each_other_are_a_cycle(specs: list[Spec]) -> None:
    with pytest.raises(StopRun) as stopped:
        check(shape(*specs))
    assert stopped.value.reason == "invalid_tree:cycle"


def test_a_dependency_on_no_node_of_the_plan_is_refused() -> None:
    with pytest.raises(StopRun) as stopped:
        check(shape((1, None, ()), (2, 1, (99,))))
    assert stopped.value.reason == "invalid_tree:unknown_dependency"
    assert "node 2 depends on node 99" in stopped.value.message


@st.composite
def backward_trees(draw: st.DrawFn) -> list[Spec]:
    """Random trees whose dependencies name earlier nodes (in walk order) off the lineage."""
    count = draw(st.integers(min_value=1, max_value=12))
    parents: dict[int, int | None] = {1: None}
    for node_id in range(2, count + 1):
        parents[node_id] = draw(st.sampled_from([None, *range(1, node_id)]))
    order = list(_walk(parents))
    specs: list[Spec] = []
    for index, node_id in enumerate(order):
        lineage = set(_lineage(parents, node_id))
        allowed = [n for n in order[:index] if n not in lineage]
        deps = draw(st.lists(st.sampled_from(allowed), max_size=3)) if allowed else []
        specs.append((node_id, parents[node_id], deps))
    return specs


def _walk(parents: dict[int, int | None]) -> list[int]:
    kids: dict[int | None, list[int]] = {}
    for node_id, parent in parents.items():
        kids.setdefault(parent, []).append(node_id)
    out: list[int] = []
    stack = list(reversed(kids.get(None, [])))
    while stack:
        node_id = stack.pop()
        out.append(node_id)
        stack.extend(reversed(kids.get(node_id, [])))
    return out


def _lineage(parents: dict[int, int | None], node_id: int) -> list[int]:
    found: list[int] = []
    current: int | None = node_id
    while current is not None:
        found.append(current)
        current = parents[current]
    return found


@given(backward_trees())
def test_dependencies_on_earlier_nodes_never_make_a_cycle(specs: list[Spec]) -> None:
    seen = shape(*specs)
    check(seen)
    for node_id, _, _ in specs:
        for waited in seen.waits_for(NodeId(node_id)):
            assert waited not in seen.ancestors(NodeId(node_id))


@given(backward_trees(), st.data())
def test_a_node_that_depends_on_its_own_descendant_is_a_cycle(
    specs: list[Spec], data: st.DataObject
) -> None:
    parents = {node_id: parent for node_id, parent, _ in specs}
    pairs = [(a, d) for d in parents for a in _lineage(parents, d)[1:]]
    if not pairs:
        return
    ancestor, descendant = data.draw(st.sampled_from(pairs))
    changed = [
        (node_id, parent, [*deps, descendant] if node_id == ancestor else deps)
        for node_id, parent, deps in specs
    ]
    with pytest.raises(StopRun) as stopped:
        check(shape(*changed))
    assert stopped.value.reason == "invalid_tree:cycle"
