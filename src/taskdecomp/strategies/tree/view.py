"""What a ``tree`` run looks like from outside: its tree with each node's status and result.

:func:`run_tree` is what ``taskdecomp show`` draws and what the service sends: the stored
plan tree below the run's root, each node with the run's record of it (``pending`` when the
run has not reached it). Only the run's own nodes are there (the ones the tree had when it
began and the ones its splits wrote: not what another run added since), and nodes an
earlier split made inactive are left out.
"""

from __future__ import annotations

from typing import Any

from taskdecomp.errors import TreeNotFoundError
from taskdecomp.store.base import StoredRun
from taskdecomp.store.sql import SqlStore
from taskdecomp.store.trees import TreeRepository
from taskdecomp.strategies.tree.shape import Shape
from taskdecomp.strategies.tree.state import STATE_KEY, TreeState
from taskdecomp.tree import PlanTreeId


def is_tree_run(stored: StoredRun) -> bool:
    """Whether ``stored`` is a run of the ``tree`` strategy that has its tree yet."""
    state = stored.state.get(STATE_KEY)
    return isinstance(state, dict) and state.get("plan_id") is not None


def run_tree(store: SqlStore, stored: StoredRun) -> dict[str, Any] | None:
    """The run's tree as JSON: ``plan_id``, ``root``, ``title`` and ``nodes`` (walk order).

    Each node has its stored fields (``id``, ``parent_id``, ``name``, ``instruction``,
    ``dependencies``, ``leaf``), its ``depth`` below the run's root, and the run's
    ``status``, ``result``, ``reason``, ``message``, ``attempts``, ``step_no`` and
    ``split`` (why the run split it, if it did). ``None`` when the run is not a tree run,
    or its tree is gone from the store.

    Raises:
        CorruptRecordError: the stored tree state does not decode.
    """
    if not is_tree_run(stored):
        return None
    state = TreeState.from_stored(stored)
    assert state.plan_id is not None  # is_tree_run
    try:
        tree = TreeRepository(store).get_plan_tree(PlanTreeId(state.plan_id))
    except TreeNotFoundError:
        return None
    shape = Shape(tree, state)
    if state.root is not None and tree.node(shape.root) is None:
        return None
    nodes = []
    for node, depth in shape.scope():
        if node is None:
            continue
        record = state.nodes.get(str(node.id))
        split = state.splits.get(str(node.id))
        nodes.append(
            {
                "id": node.id,
                "parent_id": node.parent_id,
                "name": node.name,
                "instruction": node.instruction,
                "dependencies": list(node.dependencies),
                "leaf": shape.is_leaf(node.id),
                "depth": depth,
                "status": record.status if record is not None else "pending",
                "result": record.result if record is not None else None,
                "reason": record.reason if record is not None else None,
                "message": record.message if record is not None else None,
                "attempts": record.attempts if record is not None else 0,
                "step_no": record.step_no if record is not None else None,
                "split": (split.reason or None) if split is not None and split.children else None,
            }
        )
    return {"plan_id": tree.id, "root": state.root, "title": tree.title, "nodes": nodes}
