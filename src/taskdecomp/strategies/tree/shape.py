"""The plan tree as a run sees it: its scope, each node's active children, depths and waits.

A run works through one subtree (or every root of a plan), and sees only its own nodes:
the ones the tree had when it began and the ones its splits wrote (whatever another run
of the plan adds is not there). A node's children are the tree's, except after a split
the run made: then only the children that split wrote count (a second split of an inner
node replaces the first children, which the run keeps on record).

A node waits for the nodes it depends on (and so for their subtrees) and for whatever its
ancestors wait for. A dependency on one of its own ancestors is already met by being under
it, and is not waited for; one on a node of the plan outside the run's subtree is not
waited for either (that node is not part of this run). Anything else that makes a node wait
for itself is a cycle: :func:`check` refuses it before anything runs.
"""

from __future__ import annotations

from collections.abc import Iterator

from taskdecomp.stops import StopRun, with_detail
from taskdecomp.strategies.tree.state import TreeState
from taskdecomp.tree import NodeId, PlanNode, PlanTree

TOP = NodeId(0)
"""The run's root when it works through every root of a plan (no stored node has id 0)."""


class Shape:
    """``tree`` with ``state``'s splits applied, seen from the run's root.

    Built once per version of the tree (the run makes a new one after every split): the
    children, depths and ancestors of every node are indexed up front, so asking about a
    node costs nothing whatever the size of the tree.
    """

    def __init__(self, tree: PlanTree, state: TreeState) -> None:
        self.tree = tree
        self.state = state
        self.root = NodeId(state.root) if state.root is not None else TOP
        """The run's root: a node, or :data:`TOP` for every root of the plan."""
        members = state.members()
        nodes = [node for node in tree.nodes if members is None or node.id in members]
        self._nodes = {node.id: node for node in nodes}
        self._kids: dict[NodeId, list[PlanNode]] = {}
        for node in sorted(nodes, key=lambda node: node.position):
            self._kids.setdefault(node.parent_id or TOP, []).append(node)
        self._depths: dict[NodeId, int] = {}
        self._parents: dict[NodeId, NodeId] = {}
        for node_id, depth in self._walk():
            self._depths[node_id] = depth
            for kid in self.children(node_id):
                self._parents[kid.id] = node_id

    def node(self, node_id: NodeId) -> PlanNode | None:
        """The stored node (``None`` for :data:`TOP`, or a node that is not the run's)."""
        return self._nodes.get(node_id)

    def children(self, node_id: NodeId) -> list[PlanNode]:
        """The node's active children, by position."""
        kids = self._kids.get(node_id, [])
        split = self.state.splits.get(str(node_id))
        if split is None or split.children is None:
            return list(kids)
        chosen = set(split.children)
        return [kid for kid in kids if kid.id in chosen]

    def is_leaf(self, node_id: NodeId) -> bool:
        """Whether the node is executed itself (it has no active children)."""
        return node_id != TOP and not self.children(node_id)

    def scope(self) -> Iterator[tuple[PlanNode | None, int]]:
        """Every active node of the run with its depth (:meth:`depth`), parents first."""
        for node_id, _ in self._walk():
            yield self.node(node_id), self.depth(node_id)

    def ids(self) -> set[NodeId]:
        """The ids of the run's active nodes (:data:`TOP` included when it is the root)."""
        return set(self._depths)

    def depth(self, node_id: NodeId) -> int:
        """How far below the run's root the node is (with :data:`TOP`, roots are 0).

        A node outside the run's active nodes is as deep as its stored path says.
        """
        if node_id not in self._depths:
            path = [step.id for step in self.tree.path(node_id)]
            return len(path) - 1 - (path.index(self.root) if self.root in path else 0)
        return max(self._depths[node_id] - (1 if self.root == TOP else 0), 0)

    def ancestors(self, node_id: NodeId) -> list[NodeId]:
        """The node's ancestors inside the run, nearest first (:data:`TOP` last, if root)."""
        found: list[NodeId] = []
        parent = self._parents.get(node_id)
        while parent is not None:
            found.append(parent)
            parent = self._parents.get(parent)
        return found

    def path(self, node_id: NodeId) -> list[PlanNode]:
        """The run's nodes from a root of the plan down to ``node_id``, inclusive."""
        path: list[PlanNode] = []
        node = self._nodes.get(node_id)
        while node is not None:
            path.append(node)
            node = self._nodes.get(node.parent_id) if node.parent_id is not None else None
        return path[::-1]

    def below(self, node_id: NodeId) -> list[NodeId]:
        """The node's active descendants, parents first."""
        found: list[NodeId] = []
        stack = [kid.id for kid in reversed(self.children(node_id))]
        while stack:
            kid = stack.pop()
            found.append(kid)
            stack.extend(grandkid.id for grandkid in reversed(self.children(kid)))
        return found

    def waits_for(self, node_id: NodeId) -> list[NodeId]:
        """The nodes whose end ``node_id`` waits for before it starts (see the module)."""
        lineage = {node_id, *self.ancestors(node_id)}
        waits: list[NodeId] = []
        for holder in (node_id, *self.ancestors(node_id)):
            node = self.node(holder)
            for dep in node.dependencies if node is not None else ():
                if dep in self._depths and dep not in lineage and dep not in waits:
                    waits.append(dep)
        return waits

    def added(self, known: set[int]) -> int:
        """How many nodes below the run's root (active or not) are not in ``known``.

        What a run stored before it counted the nodes it wrote had added.
        """
        count, stack = 0, [self.root]
        while stack:
            kids = self._kids.get(stack.pop(), ())
            count += sum(1 for kid in kids if kid.id not in known)
            stack.extend(kid.id for kid in kids)
        return count

    def _walk(self) -> Iterator[tuple[NodeId, int]]:
        """The active nodes from the run's root down, with their depth below it."""
        stack: list[tuple[NodeId, int]] = [(self.root, 0)]
        while stack:
            node_id, depth = stack.pop()
            yield node_id, depth
            stack.extend((kid.id, depth + 1) for kid in reversed(self.children(node_id)))


def check(shape: Shape) -> None:
    """Refuse a tree the run cannot work through.

    Raises:
        StopRun: ``invalid_tree:unknown_dependency`` (a dependency names no node of the
            plan) or ``invalid_tree:cycle`` (nodes wait for each other).
    """
    for node, _ in shape.scope():
        if node is None:
            continue
        for dep in node.dependencies:
            if shape.node(dep) is None:
                raise StopRun(
                    with_detail("invalid_tree", "unknown_dependency"),
                    message=f"node {node.id} depends on node {dep}, which plan "
                    f"{shape.tree.id} does not have",
                )
    cycle = _cycle(_order(shape))
    if cycle:
        named = list(dict.fromkeys(node_id for node_id, _ in cycle))
        raise StopRun(
            with_detail("invalid_tree", "cycle"),
            message="these nodes wait for each other: " + ", ".join(map(str, named)),
        )


Event = tuple[NodeId, str]
"""A node's start or end."""


def _order(shape: Shape) -> dict[Event, list[Event]]:
    """What each start and end of a node comes after.

    A node starts after what it waits for and after its parent started; it ends after it
    started and after its active children ended.
    """
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
    return after


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
