"""Decomposer benchmark: a tree that fills the default 50-node budget at depth 3.

    python bench/decompose.py

A scripted model answers every node with 6 children after 200 ms. With the defaults
(depth 3, 6 children, 50 nodes) the tree is 1 root -> 6 -> 36 -> 8 (the budget cuts the
third level), asked in 3 BFS levels. The ideal is one model latency per level; a sequential
decomposer needs one latency per asked node. Then the same tree is grown again with random
answer latencies, several times, to check that the tree and the node count do not depend on
the order the answers arrive in.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from taskdecomp import ModelRequest, ModelResponse, ScriptedModel
from taskdecomp.decomposition import DecompOptions
from taskdecomp.store import SqlStore
from taskdecomp.store.trees import TreeRepository
from taskdecomp.strategies.decompose import PlanDecomposer

LATENCY_MS = 200
TARGET_RATIO = 1.3
ANSWER = {"children": [{"name": f"part {i}"} for i in range(1, 7)]}


class JitteredModel:
    """The same answers as the scripted model, after a random 0-50 ms delay."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)
        self._inner = ScriptedModel(rules=[(".", ANSWER)])

    @property
    def name(self) -> str:
        """The model string."""
        return "jittered"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer after a random delay."""
        await asyncio.sleep(self._random.random() * 0.05)
        return await self._inner.complete(request)


def grow(directory: Path, name: str, model: Any, concurrency: int) -> tuple[float, Any, Any]:
    repo = TreeRepository(SqlStore(f"sqlite:///{directory / name}.db"))
    decomposer = PlanDecomposer(repo, model, options=DecompOptions(concurrency=concurrency))
    started = time.perf_counter()
    tree, result = asyncio.run(decomposer.create_plan("Launch a developer conference in Berlin"))
    wall = time.perf_counter() - started
    grown = repo.get_plan_tree(tree.id)
    repo.store.close()
    shape = [(node.name, depth, node.position) for node, depth in grown.walk()]
    return wall, result, shape


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        rows = []
        for concurrency in (8, 1):
            model = ScriptedModel(rules=[(".", ANSWER)], latency_ms=LATENCY_MS)
            wall, result, _ = grow(directory, f"c{concurrency}", model, concurrency)
            ideal = result.stats["levels"] * LATENCY_MS / 1000
            rows.append((concurrency, wall, result, ideal))
        shapes = {repr(grow(directory, f"j{seed}", JitteredModel(seed), 8)[2]) for seed in range(5)}

    print(f"decompose, default budgets, scripted model {LATENCY_MS} ms per answer")
    header = f"{'concurrency':>11} {'wall':>9} {'calls':>6} {'levels':>6} {'nodes':>6}"
    print(f"{header} {'ideal':>8} {'ratio':>6}  target <={TARGET_RATIO}")
    for concurrency, wall, result, ideal in rows:
        ratio = wall / ideal
        verdict = "ok" if ratio <= TARGET_RATIO else "(sequential)" if concurrency == 1 else "MISS"
        print(
            f"{concurrency:>11} {wall * 1000:>7.0f}ms {result.stats['llm_calls']:>6} "
            f"{result.stats['levels']:>6} {result.stats['nodes_created']:>6} "
            f"{ideal * 1000:>6.0f}ms {ratio:>6.2f}  {verdict}"
        )
    nodes = rows[0][2].stats["nodes_created"]
    print(f"nodes created {nodes} (budget 50, stopped: {rows[0][2].stopped_reason})")
    print(f"random arrival orders, 5 runs: {len(shapes)} distinct tree(s)")


if __name__ == "__main__":
    main()
