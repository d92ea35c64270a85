"""The ``tree`` strategy's options: which tree, how far to decompose, retries and approvals."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Decompose = Literal["as-needed", "upfront", "none"]
"""When a run splits tasks: when an attempt needs it, all at the start, or never."""

DECOMPOSE_MODES: tuple[Decompose, ...] = ("as-needed", "upfront", "none")


@dataclass(frozen=True, kw_only=True, slots=True)
class TreeOptions:
    """The ``tree`` strategy's settings (each is also ``--option KEY=VALUE``)."""

    plan_id: int | None = None
    """A stored plan tree to execute; ``None``: the goal becomes the root of a new one."""
    node_id: int | None = None
    """Execute only this node's subtree of ``plan_id``; ``None``: every root."""
    decompose: Decompose = "as-needed"
    """``as-needed``: split a leaf when its attempt fails or asks for it (ADaPT);
    ``upfront``: grow the tree breadth-first first, then execute it; ``none``: execute it
    as it is."""
    max_depth: int = 3
    """Deepest level a split may create, counted below the run's root (``DECOMP_MAX_DEPTH``)."""
    max_nodes: int = 50
    """Most nodes one run adds to the tree (``DECOMP_TOTAL_NODE_BUDGET``)."""
    max_children: int = 6
    """Most children one split may have."""
    node_retries: int = 1
    """Attempts at a failed leaf after the first, when it cannot be split."""
    redecompose: bool = True
    """Split an inner node again (once) when one of its children failed, before it fails."""
    approve_decompositions: bool = False
    """Pause for a human before the children of an as-needed split are executed."""
    max_agent_turns: int = 20
    """Most executor agent turns per attempt at a leaf."""

    def __post_init__(self) -> None:
        for name in ("max_depth", "max_nodes", "max_children", "max_agent_turns"):
            if not 1 <= getattr(self, name) <= 1000:
                raise ValueError(f"{name} takes a whole number from 1 to 1000")
        if not 0 <= self.node_retries <= 100:
            raise ValueError("node_retries takes a whole number from 0 to 100")
        if self.node_id is not None and self.plan_id is None:
            raise ValueError("node_id names a node of plan_id: give the plan too")
        for name in ("plan_id", "node_id"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} is a stored id, from 1")
