"""The ``tree`` strategy as registered: its options, its phases, how a stored run goes on."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskdecomp.errors import ConfigError, CorruptRecordError, TreeNotFoundError
from taskdecomp.runtime import RunContext
from taskdecomp.store.base import Store, StoredRun
from taskdecomp.strategies.base import Outcome, Phases, ToolsArg
from taskdecomp.strategies.registry import DataclassOptions, Setup
from taskdecomp.strategies.tree.options import TreeOptions
from taskdecomp.strategies.tree.runner import TreeRun
from taskdecomp.strategies.tree.splits import reject_waiting
from taskdecomp.strategies.tree.state import TreeState
from taskdecomp.tools import Toolset
from taskdecomp.tree import NodeId, PlanTreeId

if TYPE_CHECKING:
    from taskdecomp.store.sql import SqlStore
    from taskdecomp.store.trees import TreeRepository


class Tree(DataclassOptions):
    """Work through a plan tree, splitting a task further only where an attempt fails.

    A rejection of a paused run (``reject``) calls :meth:`on_reject`: the children of a
    split that waits for approval leave the stored tree.
    """

    name = "tree"
    summary = "execute a plan tree: leaves by the executor agent, split as needed (ADaPT)"
    starts_from_goal = True
    options_type = TreeOptions

    def start(self, setup: Setup, options: TreeOptions) -> Phases:
        """Store the goal as a new tree (or take the stored one), then work through it."""
        return _phases(setup, options, None)

    def resume(
        self, setup: Setup, options: TreeOptions, stored: StoredRun, tools: ToolsArg | None
    ) -> tuple[Toolset | None, Phases]:
        """Go on with the node statuses, splits and agent turns the run stored."""
        return None, _phases(setup, options, stored)

    def on_reject(self, store: Store, stored: StoredRun) -> Mapping[str, Any] | None:
        """A human rejected what paused run ``stored`` waits for: undo its waiting splits.

        The children of a split waiting for approval are deleted from the stored tree, so
        that no later run of the plan executes them unapproved; the split node fails,
        ``approval_rejected``. Returns the run's new state (``None``: nothing to undo).
        """
        sql = _sql(store)
        if sql is None:
            return None  # a run kept in memory: its tree went with its process
        from taskdecomp.store.trees import TreeRepository

        try:
            state = TreeState.from_stored(stored)
        except CorruptRecordError:
            return None  # nothing to undo by: the rejection itself must not fail on it
        return state.snapshot() if reject_waiting(state, TreeRepository(sql)) else None

    def default_goal(self, store: Store | None, options: TreeOptions) -> str:
        """The goal of a run of a stored tree: its node's name, or the plan's title.

        Raises:
            ConfigError: no store is given, or the plan or the node is not in it.
        """
        if options.plan_id is None:
            raise ConfigError("give a goal, or a stored plan tree to execute")
        sql = _sql(store)
        if sql is None:
            raise ConfigError("a stored plan tree is read from a store: pass store=")
        from taskdecomp.store.trees import TreeRepository

        trees, plan_id = TreeRepository(sql), PlanTreeId(options.plan_id)
        try:
            title = trees.name_of(plan_id)
            if options.node_id is None:
                return title
            return trees.name_of(plan_id, NodeId(options.node_id))
        except TreeNotFoundError as exc:
            raise ConfigError(str(exc)) from None


def _phases(setup: Setup, options: TreeOptions, stored: StoredRun | None) -> Phases:
    async def phases(ctx: RunContext, outcome: Outcome) -> None:
        state = TreeState.from_stored(stored) if stored is not None else TreeState()
        with _repository(setup.store) as repository:
            await TreeRun(ctx, outcome, options, state, repository).run()

    return phases


def _sql(store: Store | None) -> SqlStore | None:
    from taskdecomp.store.sql import SqlStore

    return store if isinstance(store, SqlStore) else None


@contextlib.contextmanager
def _repository(store: Store | None) -> Iterator[TreeRepository]:
    """The run store's plan trees; a throwaway SQLite file for a run kept in memory."""
    from taskdecomp.store.sql import open_store
    from taskdecomp.store.trees import TreeRepository

    sql = _sql(store)
    if sql is not None:
        yield TreeRepository(sql)
        return
    with tempfile.TemporaryDirectory(prefix="taskdecomp-tree-") as folder:
        scratch = open_store(f"sqlite:///{Path(folder) / 'trees.db'}")
        try:
            yield TreeRepository(scratch)
        finally:
            scratch.close()


STRATEGY = Tree()
"""The ``tree`` strategy, as registered."""
