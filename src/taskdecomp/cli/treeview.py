"""A ``tree`` run for people: its plan tree, each node with its status and result.

The tree is the JSON of :func:`taskdecomp.strategies.tree.view.run_tree` (what ``show
--json`` prints under ``"tree"`` and the service sends): the nodes below the run's root in
walk order, each with the run's record of it. Each node is drawn on one line: a mark and a
colour for its status, its id, its name, and a shortened result or the reason it failed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from taskdecomp.cli.display import line, literal, one_line

if TYPE_CHECKING:
    from taskdecomp.store import SqlStore, StoredRun

MARKS: dict[str, tuple[str, str]] = {
    "pending": ("·", "dim"),
    "running": ("▸", "yellow"),
    "ok": ("✓", "green"),
    "failed": ("✗", "red"),
    "decomposed": ("◆", "cyan"),
}
"""Each node status's mark and colour."""

RESULT_LIMIT = 120
"""Most characters of a node's result or failure shown in the tree (``--json`` has it all)."""


def is_tree(stored: StoredRun) -> bool:
    """Whether ``stored`` was started with the ``tree`` strategy."""
    return stored.config.get("strategy") == "tree"


def tree_of(store: SqlStore, stored: StoredRun) -> dict[str, Any] | None:
    """The tree of ``stored`` as JSON; ``None`` when it is not a tree run or has none yet.

    Raises:
        CorruptRecordError: the stored tree state does not decode.
    """
    if not is_tree(stored):
        return None
    from taskdecomp.strategies.tree.view import run_tree  # the store's trees, only for these

    return run_tree(store, stored)


def draw(out: Console, tree: Mapping[str, Any]) -> None:
    """Print ``tree`` as a tree, below a line naming its plan."""
    top = Tree(line((f"plan #{tree['plan_id']} ", "bold"), literal(tree["title"], limit=200)))
    branches: dict[Any, Tree] = {}
    for node in tree["nodes"]:
        parent = branches.get(node["parent_id"], top)
        branches[node["id"]] = parent.add(label(node))
    out.print(top)


def label(node: Mapping[str, Any]) -> Text:
    """One node's line: ``✓ [7] Shortlist venues  ok: five venues found``."""
    status = str(node["status"])
    mark, colour = MARKS.get(status, ("?", ""))
    text = line(
        (f"{mark} ", colour),
        (f"[{node['id']}] ", "dim"),
        literal(" ".join(str(node["name"]).split()), limit=200),
        "  ",
        (status, colour),
    )
    if status == "ok":
        text.append_text(literal(": " + one_line(node["result"]), limit=RESULT_LIMIT + 2))
    elif status == "failed":
        text.append_text(literal(": " + _failure(node), "red", limit=RESULT_LIMIT + 2))
    if node["attempts"] > 1 and status != "ok":
        text.append(f" (after {node['attempts']} attempts)", style="dim")
    if node.get("split"):
        text.append_text(literal(f"  split: {one_line(node['split'])}", "dim", limit=80))
    return text


def pending_split(approval: Mapping[str, Any], tree: Mapping[str, Any]) -> Text | None:
    """What a paused tree run waits for, when it is the split of one node; else ``None``.

    A split waiting for approval asks about its children as a plan of ``node-<id>`` steps.
    """
    subject = approval.get("subject")
    asked = subject.get("plan") if isinstance(subject, Mapping) else None
    if approval.get("kind") != "plan" or not isinstance(asked, list) or not asked:
        return None
    nodes = {node["id"]: node for node in tree["nodes"]}
    kids = [nodes.get(_node_id(step)) for step in asked]
    parents = {kid["parent_id"] for kid in kids if kid is not None}
    if None in kids or len(parents) != 1 or (parent := nodes.get(parents.pop())) is None:
        return None
    ids = ", ".join(str(kid["id"]) for kid in kids if kid is not None)
    return line(
        f"the split of node {parent['id']} ",
        literal(repr(parent["name"]), limit=200),
        f" into {'node' if len(kids) == 1 else 'nodes'} {ids} (pending in the tree above)",
    )


def _failure(node: Mapping[str, Any]) -> str:
    reason, message = node["reason"] or "failed", node["message"]
    return f"{reason} ({one_line(message)})" if message else str(reason)


def _node_id(step: Any) -> int | None:
    """The node a ``node-<id>`` step of an approval stands for."""
    step_id = step.get("id") if isinstance(step, Mapping) else None
    prefix, _, number = str(step_id).partition("-")
    return int(number) if prefix == "node" and number.isdigit() else None


__all__ = ["MARKS", "draw", "is_tree", "label", "pending_split", "tree_of"]
