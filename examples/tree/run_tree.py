"""The tree strategy end to end: a goal worked through as needed, upfront, and one subtree.

    python examples/tree/run_tree.py [--db sqlite:///runs.db]

The scripted model (``script.json``, one rule per phase and task) plays the executor, the
decomposer and the roll-ups; the tools (``tools.py``) are real functions.

1. As needed: the goal is tried as one task; the executor asks to split it, and the
   decomposer gives three tasks. "Line up the speakers" is split because the executor asks
   for it, "Open ticket sales" because its tool call fails (the shop opens one tier per
   call). Each inner node's result is a roll-up of its children's; the root's is the answer.
2. Upfront, in a store of its own: the decomposer grows the tree first (it splits the
   tasks it did not mark as leaves), then the leaves run.
3. One subtree of the first run's tree, as it is stored (``decompose=none``): a new run
   of "Line up the speakers" alone.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from taskdecomp import Budget, RunResult, SqlStore, TreeOptions, open_store, run
from taskdecomp.run import RunId
from taskdecomp.strategies.tree.view import run_tree

HERE = Path(__file__).resolve().parent
GOAL = "Launch a developer conference in Berlin"
TOOLS = HERE / "tools.py"
MODEL = f"scripted:{HERE / 'script.json'}"
BUDGET = Budget(max_tool_calls=20, max_seconds=60)


def summary(label: str, result: RunResult) -> str:
    usage = result.usage
    return (
        f"{label}: {result.stop_reason}, {usage.llm_calls} model calls, "
        f"{usage.tool_calls} tool calls"
    )


def draw(store: SqlStore, result: RunResult) -> list[str]:
    """The run's tree: each node with its status, and its result or why it was split."""
    tree = run_tree(store, store.load_run(RunId(result.run_id)))
    assert tree is not None, "a tree run has its tree"
    lines = []
    for node in tree["nodes"]:
        line = "  " * node["depth"] + f"[{node['id']}] {node['name']}: {node['status']}"
        if node["split"]:
            line += f" (split: {node['split']})"
        elif node["result"] is not None:
            line += f" -> {node['result']}"
        lines.append(line)
    return lines


async def main(db: str, upfront_db: str) -> None:
    store = open_store(db)
    needed = await run(GOAL, strategy="tree", tools=TOOLS, model=MODEL, store=store, budget=BUDGET)
    print(summary("as needed", needed))
    for line in draw(store, needed):
        print(line)
    print("answer:", needed.answer)

    upfront_store = open_store(upfront_db)
    upfront = await run(
        GOAL,
        strategy="tree",
        tree=TreeOptions(decompose="upfront"),
        tools=TOOLS,
        model=MODEL,
        store=upfront_store,
        budget=BUDGET,
    )
    print(summary("upfront", upfront))
    upfront_store.close()

    tree = run_tree(store, store.load_run(RunId(needed.run_id)))
    assert tree is not None
    speakers = next(node for node in tree["nodes"] if node["name"] == "Line up the speakers")
    subtree = await run(
        plan=tree["plan_id"],
        node=speakers["id"],
        tree=TreeOptions(decompose="none"),
        tools=TOOLS,
        model=MODEL,
        store=store,
        budget=BUDGET,
    )
    print(summary(f"node {speakers['id']} alone", subtree) + f": {subtree.answer}")
    store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="store URL (default: a temporary SQLite file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(args.db or f"sqlite:///{tmp}/runs.db", f"sqlite:///{tmp}/upfront.db"))
