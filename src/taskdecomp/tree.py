"""Plan trees: a persisted tree of tasks that the decomposer grows breadth-first.

A plan tree has roots and nodes; each node has a name, an instruction, a parent, a position
among its siblings, dependencies on other nodes of the same plan, a context
(``combined``, ``sections``, ``meta``) and a ``leaf`` flag that says it needs no further
decomposition. Nodes carry no priority or status: how work on them goes is not the tree's
business. Trees are frozen; the store returns a new one after every change.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NewType

PlanTreeId = NewType("PlanTreeId", int)
"""The id of a plan tree."""

NodeId = NewType("NodeId", int)
"""The id of a node, unique across every plan tree of a store."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeContext:
    """What a node knows beyond its instruction."""

    combined: str | None = None
    """A short summary of the context."""
    sections: tuple[Any, ...] = ()
    """Context sections, as the model or the user gave them."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Free-form metadata."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"combined": self.combined, "sections": list(self.sections), "meta": dict(self.meta)}


@dataclass(frozen=True, kw_only=True, slots=True)
class NewNode:
    """A node to be written; the store gives it an id and a position."""

    name: str
    instruction: str = ""
    dependencies: tuple[NodeId, ...] = ()
    context: NodeContext = field(default_factory=NodeContext)
    leaf: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanNode:
    """A stored node of a plan tree."""

    id: NodeId
    plan_id: PlanTreeId
    parent_id: NodeId | None
    """``None`` for a root."""
    position: int
    """0-based order among its siblings."""
    name: str
    instruction: str
    dependencies: tuple[NodeId, ...]
    """Nodes of the same plan this one needs first."""
    context: NodeContext
    leaf: bool
    """True when the node needs no further decomposition."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the shape of ``created_tasks`` entries)."""
        return {
            "id": self.id,
            "plan_id": self.plan_id,
            "parent_id": self.parent_id,
            "position": self.position,
            "name": self.name,
            "instruction": self.instruction,
            "dependencies": list(self.dependencies),
            "context": self.context.to_dict(),
            "leaf": self.leaf,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanTree:
    """A plan and all its nodes."""

    id: PlanTreeId
    title: str
    nodes: tuple[PlanNode, ...]
    """Every node, parents before children, siblings by position."""

    def node(self, node_id: NodeId) -> PlanNode | None:
        """The node with this id, or ``None``."""
        return next((n for n in self.nodes if n.id == node_id), None)

    def roots(self) -> list[PlanNode]:
        """Nodes without a parent, by position."""
        return self.children(None)

    def children(self, node_id: NodeId | None) -> list[PlanNode]:
        """Direct children of ``node_id`` (roots for ``None``), by position."""
        return sorted((n for n in self.nodes if n.parent_id == node_id), key=lambda n: n.position)

    def path(self, node_id: NodeId) -> list[PlanNode]:
        """The nodes from a root down to ``node_id``, inclusive."""
        by_id = {n.id: n for n in self.nodes}
        path: list[PlanNode] = []
        current = by_id.get(node_id)
        while current is not None:
            path.append(current)
            current = by_id.get(current.parent_id) if current.parent_id is not None else None
        return path[::-1]

    def walk(self) -> Iterator[tuple[PlanNode, int]]:
        """Every node with its depth (roots are depth 0), depth-first in position order."""
        stack = [(root, 0) for root in reversed(self.roots())]
        kids: dict[NodeId | None, list[PlanNode]] = {}
        for node in self.nodes:
            kids.setdefault(node.parent_id, []).append(node)
        while stack:
            node, depth = stack.pop()
            yield node, depth
            children = sorted(kids.get(node.id, []), key=lambda n: n.position)
            stack.extend((child, depth + 1) for child in reversed(children))

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the plan and its nodes in walk order."""
        return {
            "id": self.id,
            "title": self.title,
            "nodes": [node.to_dict() | {"depth": depth} for node, depth in self.walk()],
        }
