"""Engine benchmarks: orchestration overhead per step, and fan-out efficiency of DAG plans.

    python bench/engine.py [--repeat 5]

(a) A 50-step plan, zero-latency scripted model, no-op tools: wall time per step
    (target under 100 microseconds per step).
(b) 8 independent 100 ms steps, then one step that depends on all of them, with a model
    latency of 200 ms: wall time over the ideal of 2 model calls + 2 tool latencies
    (target at most 1.05).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from taskdecomp import Budget, ScriptedModel, Toolset, run

TARGET_OVERHEAD_US = 100
TARGET_FANOUT_RATIO = 1.05


def _plan(steps: int, tool: str, *, dag: bool = False) -> dict[str, Any]:
    return {
        "kind": "plan",
        "steps": [
            {"id": f"s{i}", "title": f"step {i}", "tool": tool, "args": {"n": i}}
            | ({"depends_on": []} if dag else {})
            for i in range(steps)
        ],
    }


async def noop_async(n: int) -> int:
    """Do nothing (async)."""
    return n


def noop_sync(n: int) -> int:
    """Do nothing (sync, so it runs in the worker thread pool)."""
    return n


async def sleep_100ms(n: int) -> int:
    """Wait 100 ms."""
    await asyncio.sleep(0.1)
    return n


async def _timed_run(plan: dict[str, Any], tools: Toolset, latency_ms: float = 0) -> float:
    steps = len(plan["steps"])
    budget = Budget(
        max_plan_steps=steps, max_execute_steps=steps, max_tool_calls=steps, max_seconds=120
    )
    model = ScriptedModel(responses=[plan, "done"], latency_ms=latency_ms)
    started = time.perf_counter()
    result = await run("bench", tools=tools, model=model, budget=budget)
    elapsed = time.perf_counter() - started
    if not result.ok:
        raise SystemExit(f"benchmark run failed: {result.stop_reason} {result.message}")
    return elapsed


def _best(plan: dict[str, Any], tools: Toolset, repeat: int, latency_ms: float = 0) -> float:
    return min(asyncio.run(_timed_run(plan, tools, latency_ms)) for _ in range(repeat))


def overhead_rows(repeat: int) -> list[tuple[str, str, str, str]]:
    rows = []
    for label, tool, dag in (
        ("async no-op tools, sequential", noop_async, False),
        ("async no-op tools, DAG (all ready)", noop_async, True),
        ("sync no-op tools (thread pool), sequential", noop_sync, False),
    ):
        name = tool.__name__
        tools = Toolset.from_functions([tool])  # loaded once, as a user's toolset is
        t50 = _best(_plan(50, name, dag=dag), tools, repeat)
        t3 = _best(_plan(3, name, dag=dag), tools, repeat)
        per_step = t50 / 50 * 1e6
        marginal = (t50 - t3) / 47 * 1e6
        verdict = "ok" if per_step < TARGET_OVERHEAD_US else "MISS"
        rows.append((label, f"{per_step:.1f} us", f"{marginal:.1f} us", verdict))
    return rows


def fanout_row(repeat: int) -> tuple[str, str, str, str]:
    plan = _plan(8, "sleep_100ms", dag=True)
    plan["steps"].append(
        {
            "id": "join",
            "title": "join",
            "tool": "sleep_100ms",
            "args": {"n": 99},
            "depends_on": [f"s{i}" for i in range(8)],
        }
    )
    tools = Toolset.from_functions([sleep_100ms])
    walls = [asyncio.run(_timed_run(plan, tools, 200)) for _ in range(repeat)]
    wall = statistics.median(walls)
    ideal = 2 * 0.2 + 2 * 0.1
    ratio = wall / ideal
    verdict = "ok" if ratio <= TARGET_FANOUT_RATIO else "MISS"
    return (f"{wall * 1000:.1f} ms", f"{ideal * 1000:.0f} ms", f"{ratio:.3f}", verdict)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure (best/median)")
    args = parser.parse_args()

    print(f"(a) orchestration overhead, 50-step plan, best of {args.repeat}")
    print(f"{'case':<44} {'per step':>10} {'marginal':>10}  target <{TARGET_OVERHEAD_US} us")
    for label, per_step, marginal, verdict in overhead_rows(args.repeat):
        print(f"{label:<44} {per_step:>10} {marginal:>10}  {verdict}")
    print()
    print(f"(b) fan-out 8 x 100 ms + join, model 200 ms, median of {args.repeat}")
    wall, ideal, ratio, verdict = fanout_row(args.repeat)
    print(f"{'wall':>10} {'ideal':>10} {'ratio':>8}  target <={TARGET_FANOUT_RATIO}")
    print(f"{wall:>10} {ideal:>10} {ratio:>8}  {verdict}")


if __name__ == "__main__":
    main()
