"""``run``'s flags for the ``tree`` strategy: which tree to execute, and how to split it.

``--plan PLAN_ID`` (with ``--node NODE_ID``: one subtree) executes a stored plan tree, and
implies ``--strategy tree``; otherwise GOAL becomes the root of a new tree. The other flags
are :class:`~taskdecomp.strategies.tree.TreeOptions` by another name; the decomposer's
``DECOMP_MAX_DEPTH``, ``DECOMP_TOTAL_NODE_BUDGET`` and ``DECOMP_MAX_CHILDREN`` are their
defaults, below the flags.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from taskdecomp.cli.strategies import Flag
from taskdecomp.errors import ConfigError
from taskdecomp.strategies.tree.options import DECOMPOSE_MODES


@dataclass(frozen=True, kw_only=True, slots=True)
class TreeFlags:
    """The tree flags of one ``run`` (``None``: not given)."""

    plan_id: int | None = None
    node_id: int | None = None
    decompose: str | None = None
    node_retries: int | None = None
    redecompose: bool | None = None
    approve_decompositions: bool = False
    max_depth: int | None = None
    max_nodes: int | None = None

    def flags(self) -> dict[Flag, Any]:
        """Each option key and its flag, with the value given (``None``: not given)."""
        return {
            ("plan_id", "--plan"): self.plan_id,
            ("node_id", "--node"): self.node_id,
            ("decompose", "--decompose"): self.decompose,
            ("node_retries", "--node-retries"): self.node_retries,
            ("redecompose", _REDECOMPOSE[self.redecompose is not False]): self.redecompose,
            ("approve_decompositions", "--approve-decompositions"): (
                self.approve_decompositions or None
            ),
            ("max_depth", "--max-depth"): self.max_depth,
            ("max_nodes", "--max-nodes"): self.max_nodes,
        }


_REDECOMPOSE = {True: "--redecompose", False: "--no-redecompose"}

_OPTIONS = (
    click.option(
        "--plan",
        "plan_id",
        type=click.IntRange(min=1),
        help="tree: execute this stored plan tree (taskdecomp decompose, taskdecomp tree) "
        "instead of a new one from GOAL; implies --strategy tree.",
    ),
    click.option(
        "--node",
        "node_id",
        type=click.IntRange(min=1),
        help="tree, with --plan: execute only this node's subtree.",
    ),
    click.option(
        "--decompose",
        type=click.Choice(DECOMPOSE_MODES),
        help="tree: as-needed splits a task only when its attempt fails or asks for it; "
        "upfront grows the whole tree first, then executes it; none executes it as it is. "
        "[as-needed]",
    ),
    click.option(
        "--node-retries",
        type=click.IntRange(min=0, max=100),
        help="tree: attempts at a failed task after the first, when it cannot be split. [1]",
    ),
    click.option(
        "--redecompose/--no-redecompose",
        default=None,
        help="tree: split a task again, once, when one of its subtasks failed, before it "
        "fails too. [on]",
    ),
    click.option(
        "--approve-decompositions",
        is_flag=True,
        help="tree: pause for approval before the subtasks of an as-needed split run.",
    ),
    click.option(
        "--max-depth",
        type=click.IntRange(min=1, max=1000),
        help="tree: deepest level a split may create, below the run's root.  "
        "[env: DECOMP_MAX_DEPTH; default: 3]",
    ),
    click.option(
        "--max-nodes",
        type=click.IntRange(min=1, max=1000),
        help="tree: most nodes one run adds to the tree.  "
        "[env: DECOMP_TOTAL_NODE_BUDGET; default: 50]",
    ),
)
_NAMES = tuple(field.name for field in dataclasses.fields(TreeFlags))


def tree_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the tree flags to ``command``; it gets them as one ``tree`` argument."""

    @functools.wraps(command)
    def with_tree(*args: Any, **kwargs: Any) -> Any:
        tree = TreeFlags(**{name: kwargs.pop(name) for name in _NAMES})
        return command(*args, tree=tree, **kwargs)

    decorated: Callable[..., Any] = with_tree
    for option in reversed(_OPTIONS):
        decorated = option(decorated)
    return decorated


def tree_source(
    goal: str | None, goal_file: Path | None, tree: TreeFlags, strategy: str, *, named: bool
) -> str:
    """The strategy to run: ``tree`` with ``--plan``, else ``strategy``.

    ``named``: whether ``--strategy`` was given (``--plan`` with another one is refused).

    Raises:
        click.UsageError: ``--node`` without ``--plan``, ``--plan`` with GOAL or with
            another strategy.
    """
    if tree.plan_id is None:
        if tree.node_id is not None:
            raise click.UsageError("--node needs --plan: the stored plan tree the node is in")
        return strategy
    if named and strategy != "tree":
        raise click.UsageError(
            f"--plan executes a stored plan tree, which only --strategy tree does; drop "
            f"--strategy {strategy}"
        )
    if goal is not None or goal_file is not None:
        raise click.UsageError(
            "give either GOAL (the root of a new plan tree) or --plan ID (a stored one), not "
            "both: a stored tree's goal is its title, or its node's name"
        )
    return "tree"


ENVIRONMENT = {
    "max_depth": ("DECOMP_MAX_DEPTH", "max_depth"),
    "max_nodes": ("DECOMP_TOTAL_NODE_BUDGET", "total_node_budget"),
    "max_children": ("DECOMP_MAX_CHILDREN", "max_children"),
}
"""Each tree option the decomposer's environment sets: its variable and setting."""


def tree_defaults() -> dict[str, Any]:
    """The tree options the environment sets (``DECOMP_*``), below any flag.

    Raises:
        ConfigError: a variable does not parse, or is out of range (it is named).
    """
    from taskdecomp.settings import load_decomp_settings
    from taskdecomp.strategies.tree import TreeOptions

    decomp = load_decomp_settings()
    found: dict[str, Any] = {}
    for key, (variable, setting) in ENVIRONMENT.items():
        value = getattr(decomp, setting)
        if value is None:
            continue
        try:
            TreeOptions(**{key: value})
        except ValueError as exc:
            raise ConfigError(f"bad environment setting: {variable}={value}: {exc}") from None
        found[key] = value
    return found


__all__ = ["ENVIRONMENT", "TreeFlags", "tree_defaults", "tree_options", "tree_source"]
