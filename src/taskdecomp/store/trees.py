"""Plan trees in the store: the repository the decomposer reads and writes.

Two tables, added by migration 2 (:mod:`taskdecomp.store.schema`): ``plan_trees`` (one row
a plan) and ``plan_nodes`` (one row a node, with its parent, position, dependencies, context
and leaf flag). Text goes
through :mod:`taskdecomp.store.codec`, like every other table, so both backends store the
same bytes. :meth:`TreeRepository.write_children` writes all the children of one node in
one transaction: either every child is stored or none is; :meth:`TreeRepository.delete_nodes`
deletes nodes with their subtrees, and reroutes the dependencies on them, in one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pydantic import TypeAdapter
from sqlalchemy import Connection, Select, delete, func, insert, select, update
from sqlalchemy.engine import Row

from taskdecomp.errors import TreeNotFoundError
from taskdecomp.store.codec import decode_as, decode_text, encode_json, encode_text
from taskdecomp.store.schema import plan_nodes, plan_trees
from taskdecomp.store.sql import SqlStore
from taskdecomp.tree import NewNode, NodeContext, NodeId, PlanNode, PlanTree, PlanTreeId

_PG_INTEGER = 2**31 - 1
"""PostgreSQL's ``integer``: the plan tables' ids (``SERIAL``)."""
_SQLITE_INTEGER = 2**63 - 1
"""SQLite's ``INTEGER``."""

_DEPENDENCIES: TypeAdapter[tuple[int, ...]] = TypeAdapter(tuple[int, ...])
_CONTEXT: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])


class TreeRepository:
    """Plan trees stored in a :class:`~taskdecomp.store.sql.SqlStore`.

    Args:
        store: the store to use (its migrations create the tables).
    """

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    def create_plan(self, title: str, roots: Sequence[NewNode] = ()) -> PlanTree:
        """Store a new plan with ``roots``, in one transaction; return it."""
        with self.store.write() as conn:
            row = {"title": encode_text(title, what="the plan title"), "created_at": self._now()}
            plan_id = PlanTreeId(int(_inserted_id(conn.execute(insert(plan_trees).values(**row)))))
            self._insert(conn, plan_id, None, roots, start=0)
        return self.get_plan_tree(plan_id)

    def get_plan_tree(self, plan_id: PlanTreeId) -> PlanTree:
        """The plan and all its nodes.

        Raises:
            TreeNotFoundError: no plan has this id.
            CorruptRecordError: a row does not decode.
        """
        with self.store.read() as conn:
            return _load(conn, plan_id)

    def name_of(self, plan_id: PlanTreeId, node_id: NodeId | None = None) -> str:
        """The plan's title, or the name of its node ``node_id``, without reading the tree.

        Raises:
            TreeNotFoundError: no plan has this id, or it has no such node.
        """
        with self.store.read() as conn:
            if node_id is None:
                query = select(plan_trees.c.title).where(plan_trees.c.id == plan_id)
                row = _by_id(conn, query, plan_id)
                what = f"title of plan {plan_id}"
            else:
                query = select(plan_nodes.c.name).where(
                    plan_nodes.c.id == node_id, plan_nodes.c.plan_id == plan_id
                )
                row = _by_id(conn, query, node_id) if 0 <= plan_id <= _largest_id(conn) else None
                what = f"name of plan node {node_id}"
        if row is None:
            if node_id is None:
                raise TreeNotFoundError(
                    f"no plan tree has id {plan_id!r}; `taskdecomp tree` lists them"
                )
            raise TreeNotFoundError(f"plan {plan_id} has no node {node_id}")
        return decode_text(row[0], where=what)

    def create_task(self, plan_id: PlanTreeId, parent_id: NodeId | None, node: NewNode) -> PlanNode:
        """Append one node under ``parent_id`` (a root for ``None``)."""
        return self.write_children(plan_id, parent_id, [node])[0]

    def update_task(
        self,
        node_id: NodeId,
        *,
        name: str | None = None,
        instruction: str | None = None,
        context: NodeContext | None = None,
        leaf: bool | None = None,
    ) -> PlanNode:
        """Change some fields of a node; return it.

        Raises:
            TreeNotFoundError: no node has this id.
        """
        values: dict[str, Any] = {}
        if name is not None:
            values["name"] = encode_text(name, what="the node name")
        if instruction is not None:
            values["instruction"] = encode_text(instruction, what="the instruction")
        if context is not None:
            values["context"] = encode_json(context.to_dict(), what="the node context")
        if leaf is not None:
            values["leaf"] = leaf
        with self.store.write() as conn:
            plan_id = _plan_of(conn, node_id)
            if values:
                conn.execute(update(plan_nodes).where(plan_nodes.c.id == node_id).values(**values))
        node = self.get_plan_tree(plan_id).node(node_id)
        assert node is not None  # it was there inside the transaction above
        return node

    def write_children(
        self,
        plan_id: PlanTreeId,
        parent_id: NodeId | None,
        children: Sequence[NewNode],
        *,
        replace: bool = False,
    ) -> list[PlanNode]:
        """Write ``children`` under ``parent_id`` in one transaction and return them.

        With ``replace``, the parent's existing children (and everything below them) are
        deleted first, in the same transaction; otherwise the new children come after them.

        Raises:
            TreeNotFoundError: the plan or the parent does not exist.
            StoreError: a write failed; nothing of this call was stored.
        """
        with self.store.write() as conn:
            _check_parent(conn, plan_id, parent_id)
            if replace:
                _delete_children(conn, plan_id, parent_id)
            start = _next_position(conn, plan_id, parent_id)
            return self._insert(conn, plan_id, parent_id, children, start=start)

    def delete_nodes(self, plan_id: PlanTreeId, node_ids: Sequence[int]) -> int:
        """Delete the nodes of plan ``plan_id`` in ``node_ids``, with their subtrees.

        One transaction. A node left in the plan that depended on a deleted node depends on
        that node's nearest ancestor that is left instead (or on nothing, when none is, or
        when that is the node itself or one of its ancestors), so the plan stays one that
        can be worked through. Ids that name no node of the plan are skipped.

        Returns:
            How many nodes were deleted (subtrees included).
        """
        with self.store.write() as conn:
            query = select(plan_nodes.c.id, plan_nodes.c.parent_id, plan_nodes.c.dependencies)
            rows = conn.execute(query.where(plan_nodes.c.plan_id == plan_id)).all()
            parents = {NodeId(row.id): _id_or_none(row.parent_id) for row in rows}
            gone = _subtrees(parents, set(node_ids))
            if not gone:
                return 0
            for row in rows:
                node_id = NodeId(row.id)
                deps = decode_as(_DEPENDENCIES, row.dependencies, where=f"plan node {node_id}")
                if node_id in gone or not gone.intersection(deps):
                    continue
                kept = _rerouted(node_id, deps, parents, gone)
                values = {"dependencies": encode_json(kept, what="the dependencies")}
                conn.execute(update(plan_nodes).where(plan_nodes.c.id == node_id).values(values))
            conn.execute(delete(plan_nodes).where(plan_nodes.c.id.in_(sorted(gone))))
        return len(gone)

    def list_plans(self) -> list[tuple[PlanTreeId, str, int]]:
        """Every plan: id, title and node count, newest first."""
        with self.store.read() as conn:
            return _plans(conn, limit=None, before=None)

    def page_plans(
        self, *, limit: int, before: PlanTreeId | None = None
    ) -> tuple[list[tuple[PlanTreeId, str, int]], PlanTreeId | None]:
        """At most ``limit`` plans with an id below ``before``, newest first (a keyset on id).

        Returns:
            The plans (id, title, node count), and the ``before`` of the next page: ``None``
            when this page is the last.
        """
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        with self.store.read() as conn:
            plans = _plans(conn, limit=limit + 1, before=before)
        more = len(plans) > limit
        return plans[:limit], plans[limit - 1][0] if more else None

    def _insert(
        self,
        conn: Connection,
        plan_id: PlanTreeId,
        parent_id: NodeId | None,
        nodes: Sequence[NewNode],
        *,
        start: int,
    ) -> list[PlanNode]:
        """Insert ``nodes`` and return them as stored (the codec round-trips exactly)."""
        now = self._now()
        written = []
        for position, node in enumerate(nodes, start=start):
            row = _node_row(node) | {
                "plan_id": plan_id,
                "parent_id": parent_id,
                "position": position,
                "created_at": now,
            }
            node_id = NodeId(_inserted_id(conn.execute(insert(plan_nodes).values(**row))))
            written.append(
                PlanNode(
                    id=node_id,
                    plan_id=plan_id,
                    parent_id=parent_id,
                    position=position,
                    name=node.name,
                    instruction=node.instruction,
                    dependencies=node.dependencies,
                    context=node.context,
                    leaf=node.leaf,
                )
            )
        return written

    def _now(self) -> float:
        return self.store.now()


def _plans(
    conn: Connection, *, limit: int | None, before: PlanTreeId | None
) -> list[tuple[PlanTreeId, str, int]]:
    count = (
        select(func.count())
        .select_from(plan_nodes)
        .where(plan_nodes.c.plan_id == plan_trees.c.id)
        .scalar_subquery()
    )
    query = select(plan_trees.c.id, plan_trees.c.title, count).order_by(plan_trees.c.id.desc())
    if before is not None and before <= 1:
        return []  # ids start at 1
    if before is not None and before <= _largest_id(conn):  # above it: every id is below
        query = query.where(plan_trees.c.id < before)
    if limit is not None:
        query = query.limit(limit)
    return [
        (PlanTreeId(row[0]), decode_text(row[1], where="plan title"), int(row[2]))
        for row in conn.execute(query)
    ]


def _largest_id(conn: Connection) -> int:
    """The largest id the plan tables' ``INTEGER`` columns hold on this backend."""
    return _PG_INTEGER if conn.dialect.name == "postgresql" else _SQLITE_INTEGER


def _by_id(conn: Connection, query: Select[Any], given: int) -> Row[Any] | None:
    """The first row of ``query`` for id ``given``, ``None`` when there is none.

    An id that does not fit the id columns names nothing: the database is not asked (it
    would refuse to compare it).
    """
    if not 0 <= given <= _largest_id(conn):
        return None
    return conn.execute(query).first()


def _inserted_id(result: Any) -> int:
    key = result.inserted_primary_key
    assert key is not None  # a single-row insert always has one
    return int(key[0])


def _node_row(node: NewNode) -> dict[str, Any]:
    return {
        "name": encode_text(node.name, what="the node name"),
        "instruction": encode_text(node.instruction, what="the instruction"),
        "dependencies": encode_json(list(node.dependencies), what="the dependencies"),
        "context": encode_json(node.context.to_dict(), what="the node context"),
        "leaf": node.leaf,
    }


def _check_parent(conn: Connection, plan_id: PlanTreeId, parent_id: NodeId | None) -> None:
    found = _by_id(conn, select(plan_trees.c.id).where(plan_trees.c.id == plan_id), plan_id)
    if found is None:
        raise TreeNotFoundError(f"no plan tree has id {plan_id!r}; `taskdecomp tree` lists them")
    if parent_id is not None and _plan_of(conn, parent_id) != plan_id:
        raise TreeNotFoundError(f"node {parent_id!r} is not in plan {plan_id!r}")


def _plan_of(conn: Connection, node_id: NodeId) -> PlanTreeId:
    row = _by_id(conn, select(plan_nodes.c.plan_id).where(plan_nodes.c.id == node_id), node_id)
    if row is None:
        raise TreeNotFoundError(f"no plan node has id {node_id!r}")
    return PlanTreeId(int(row[0]))


def _delete_children(conn: Connection, plan_id: PlanTreeId, parent_id: NodeId | None) -> None:
    # Deleting a child cascades to its descendants (foreign key ON DELETE CASCADE).
    where = (
        plan_nodes.c.parent_id.is_(None)
        if parent_id is None
        else (plan_nodes.c.parent_id == parent_id)
    )
    conn.execute(delete(plan_nodes).where(plan_nodes.c.plan_id == plan_id, where))


def pruned(tree: PlanTree, node_ids: Sequence[int]) -> PlanTree:
    """``tree`` as :meth:`TreeRepository.delete_nodes` would leave it (nothing is written)."""
    parents = {node.id: node.parent_id for node in tree.nodes}
    gone = _subtrees(parents, set(node_ids))
    nodes = tuple(
        replace(node, dependencies=tuple(_rerouted(node.id, node.dependencies, parents, gone)))
        if gone.intersection(node.dependencies)
        else node
        for node in tree.nodes
        if node.id not in gone
    )
    return replace(tree, nodes=nodes)


def _id_or_none(value: Any) -> NodeId | None:
    return None if value is None else NodeId(int(value))


def _subtrees(parents: Mapping[NodeId, NodeId | None], tops: set[int]) -> set[NodeId]:
    """The nodes of ``parents`` in ``tops`` and every node below one of them."""
    gone: set[NodeId] = set()
    for node_id in parents:
        line: list[NodeId] = []
        at: NodeId | None = node_id
        while at is not None and at not in gone and at not in tops:
            line.append(at)
            at = parents.get(at)
        if at is not None:  # reached a deleted node: the whole line is below it
            gone.update(line)
            gone.add(at)
    return gone


def _rerouted(
    node_id: NodeId,
    deps: Sequence[int],
    parents: Mapping[NodeId, NodeId | None],
    gone: set[NodeId],
) -> list[NodeId]:
    """``node_id``'s dependencies with each deleted node replaced by its ancestor left."""
    lineage: set[int] = set()
    at: NodeId | None = node_id
    while at is not None:
        lineage.add(at)
        at = parents.get(at)
    kept: list[NodeId] = []
    for dep in deps:
        target: NodeId | None = NodeId(dep)
        while target is not None and target in gone:
            target = parents.get(target)
        if target is not None and target not in lineage and target not in kept:
            kept.append(target)
    return kept


def _next_position(conn: Connection, plan_id: PlanTreeId, parent_id: NodeId | None) -> int:
    where = (
        plan_nodes.c.parent_id.is_(None)
        if parent_id is None
        else (plan_nodes.c.parent_id == parent_id)
    )
    query = select(func.max(plan_nodes.c.position)).where(plan_nodes.c.plan_id == plan_id, where)
    highest = conn.execute(query).scalar()
    return 0 if highest is None else int(highest) + 1


def _load(conn: Connection, plan_id: PlanTreeId) -> PlanTree:
    head = _by_id(conn, select(plan_trees).where(plan_trees.c.id == plan_id), plan_id)
    if head is None:
        raise TreeNotFoundError(f"no plan tree has id {plan_id!r}; `taskdecomp tree` lists them")
    query = select(plan_nodes).where(plan_nodes.c.plan_id == plan_id).order_by(plan_nodes.c.id)
    nodes = tuple(_node(row) for row in conn.execute(query))
    title = decode_text(head.title, where=f"title of plan {plan_id}")
    return PlanTree(id=plan_id, title=title, nodes=nodes)


def _node(row: Row[Any]) -> PlanNode:
    where = f"plan node {row.id}"
    context = decode_as(_CONTEXT, row.context, where=f"context of {where}")
    return PlanNode(
        id=NodeId(row.id),
        plan_id=PlanTreeId(row.plan_id),
        parent_id=None if row.parent_id is None else NodeId(row.parent_id),
        position=int(row.position),
        name=decode_text(row.name, where=f"name of {where}"),
        instruction=decode_text(row.instruction, where=f"instruction of {where}"),
        dependencies=tuple(
            NodeId(d) for d in decode_as(_DEPENDENCIES, row.dependencies, where=where)
        ),
        context=NodeContext(
            combined=context.get("combined"),
            sections=tuple(context.get("sections") or ()),
            meta=dict(context.get("meta") or {}),
        ),
        leaf=bool(row.leaf),
    )
