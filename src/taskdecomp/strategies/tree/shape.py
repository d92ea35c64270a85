"""The plan tree as a run sees it: its scope, each node's active children, depths and waits.

A run works through one subtree (or every root of a plan). A node's children are the tree's,
except after a split the run asked for: then only the children that split wrote count (a
second split of an inner node leaves the first children in the tree, no longer active).

A node waits for the nodes it depends on (and so for their subtrees) and for whatever its
ancestors wait for. A dependency on one of its own ancestors is already met by being under
it, and is not waited for; one on a node of the plan outside the run's subtree is not
waited for either (that node is not part of this run). Anything else that makes a node wait
for itself is a cycle: :func:`check` refuses it before anything runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from taskdecomp.stops import StopRun, with_detail
from taskdecomp.strategies.tree.state import TreeState
from taskdecomp.tree import NodeId, PlanNode, PlanTree

TOP = NodeId(0)
"""The run's root when it works through every root of a plan (no stored node has id 0)."""


@dataclass(frozen=True, slots=True)
class Shape:
    """``tree`` with ``state``'s splits applied, seen from the run's root."""

    tree: PlanTree
    state: TreeState

    @property
    def root(self) -> NodeId:
        """The run's root: a node, or :data:`TOP` for every root of the plan."""
        return NodeId(self.state.root) if self.state.root is not None else TOP

    def node(self, node_id: NodeId) -> PlanNode | None:
        """The stored node (``None`` for :data:`TOP` or a node gone from the tree)."""
        return self.tree.node(node_id) if node_id != TOP else None

    def children(self, node_id: NodeId) -> list[PlanNode]:
        """The node's active children, by position."""
        kids = self.tree.children(None if node_id == TOP else node_id)
        split = self.state.splits.get(str(node_id))
        if split is None:
            return kids
        return [kid for kid in kids if kid.position >= split.first_position]

    def is_leaf(self, node_id: NodeId) -> bool:
        """Whether the node is executed itself (it has no active children)."""
        return node_id != TOP and not self.children(node_id)

    def scope(self) -> Iterator[tuple[PlanNode | None, int]]:
        """Every active node of the run with its depth below the run's root, parents first."""
        stack: list[tuple[NodeId, int]] = [(self.root, 0)]
        while stack:
            node_id, depth = stack.pop()
            yield self.node(node_id), depth
            stack.extend((kid.id, depth + 1) for kid in reversed(self.children(node_id)))

    def ids(self) -> set[NodeId]:
        """The ids of the run's active nodes (:data:`TOP` included when it is the root)."""
        return {node.id if node is not None else TOP for node, _ in self.scope()}

    def depth(self, node_id: NodeId) -> int:
        """How far below the run's root the node is."""
        if node_id == TOP:
            return 0
        path = [step.id for step in self.tree.path(node_id)]
        if self.root == TOP:
            return len(path) - 1
        return len(path) - 1 - path.index(self.root)

    def ancestors(self, node_id: NodeId) -> list[NodeId]:
        """The node's ancestors inside the run, nearest first (:data:`TOP` last, if root)."""
        if node_id == TOP or node_id == self.root:
            return []
        path = [step.id for step in self.tree.path(node_id)][:-1]
        if self.root != TOP:
            path = path[path.index(self.root) :]
        found = list(reversed(path))
        return [*found, TOP] if self.root == TOP else found

    def waits_for(self, node_id: NodeId) -> list[NodeId]:
        """The nodes whose end ``node_id`` waits for before it starts (see the module)."""
        inside = self.ids()
        lineage = {node_id, *self.ancestors(node_id)}
        waits: list[NodeId] = []
        for holder in (node_id, *self.ancestors(node_id)):
            node = self.node(holder)
            for dep in node.dependencies if node is not None else ():
                if dep in inside and dep not in lineage and dep not in waits:
                    waits.append(dep)
        return waits


def check(shape: Shape) -> None:
    """Refuse a tree the run cannot work through.

    Raises:
        StopRun: ``invalid_tree:unknown_dependency`` (a dependency names no node of the
            plan) or ``invalid_tree:cycle`` (nodes wait for each other).
    """
    known = {node.id for node in shape.tree.nodes}
    for node, _ in shape.scope():
        if node is None:
            continue
        for dep in node.dependencies:
            if dep not in known:
                raise StopRun(
                    with_detail("invalid_tree", "unknown_dependency"),
                    message=f"node {node.id} depends on node {dep}, which plan "
                    f"{shape.tree.id} does not have",
                )
    # A node starts after what it waits for and after its parent started; it ends after it
    # started and after its active children ended.
    after: dict[Event, list[Event]] = {}
    for node, _ in shape.scope():
        node_id = node.id if node is not None else TOP
        parent = shape.ancestors(node_id)[:1]
        after[(node_id, "start")] = [(w, "end") for w in shape.waits_for(node_id)] + [
            (p, "start") for p in parent
        ]
        after[(node_id, "end")] = [(node_id, "start")] + [
            (kid.id, "end") for kid in shape.children(node_id)
        ]
    cycle = _cycle(after)
    if cycle:
        named = list(dict.fromkeys(node_id for node_id, _ in cycle))
        raise StopRun(
            with_detail("invalid_tree", "cycle"),
            message="these nodes wait for each other: " + ", ".join(map(str, named)),
        )


Event = tuple[NodeId, str]
"""A node's start or end."""


def _cycle(after: dict[Event, list[Event]]) -> list[Event]:
    """A cycle of ``after`` (its events, the first repeated at the end), or ``[]``."""
    colour: dict[Event, int] = {}
    for start in after:
        if colour.get(start):
            continue
        stack: list[tuple[Event, Iterator[Event]]] = [(start, iter(after[start]))]
        path = [start]
        colour[start] = 1
        while stack:
            node_id, edges = stack[-1]
            nxt = next(edges, None)
            if nxt is None:
                colour[node_id] = 2
                stack.pop()
                path.pop()
            elif colour.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif not colour.get(nxt):
                colour[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(after.get(nxt, []))))
    return []
