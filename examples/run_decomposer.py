"""Both decomposer modes, end to end, on a SQLite file and a scripted model.

    python examples/run_decomposer.py [--db sqlite:///plans.db] [--model scripted:PATH]

1. Whole-plan mode: create a plan with one root task and decompose it breadth-first.
2. Single-node mode: decompose one node that the first pass could not (its model call
   timed out), with a different model, appending to whatever it has.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from taskdecomp.decomposition import DecompOptions
from taskdecomp.store import open_store
from taskdecomp.store.trees import TreeRepository
from taskdecomp.strategies.decompose import PlanDecomposer

HERE = Path(__file__).resolve().parent
GOAL = "Launch a developer conference in Berlin"


async def main(db: str, model: str) -> None:
    repository = TreeRepository(open_store(db))
    decomposer = PlanDecomposer(repository, model, options=DecompOptions(max_depth=2))

    tree, result = await decomposer.create_plan(GOAL)
    assert result is not None  # auto_on_create is on by default
    print("whole plan:", result.summary())

    nodes = repository.get_plan_tree(tree.id).nodes
    logistics = next(node for node in nodes if node.name == "Logistics")
    single = PlanDecomposer(repository, f"scripted:{HERE / 'decomposer' / 'logistics.json'}")
    again = await single.decompose_node(tree.id, logistics.id)
    print("one node:  ", again.summary())

    for node, depth in repository.get_plan_tree(tree.id).walk():
        print("  " * depth + f"[{node.id}] {node.name}" + (" (leaf)" if node.leaf else ""))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="store URL (default: a temporary SQLite file)")
    parser.add_argument("--model", default=f"scripted:{HERE / 'decomposer' / 'script.json'}")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(args.db or f"sqlite:///{tmp}/plans.db", args.model))
