"""Replan benchmark: model calls and wall time of the ``replan`` strategy against the ideal.

    python bench/replan.py [--repeat 5]

A scripted model answers after 200 ms; the five sales tools wait 100 ms each (async).

- sales: the planner gives the five tools as independent steps (one wave), the replanner
  responds: 2 model calls, ideal 200 + 100 + 200 ms (target: 2 calls, ratio <= 1.05).
- revision: the first wave asks for March, whose data does not exist; the replanner revises
  the plan to April, the second wave runs, then it responds: 3 model calls, ideal
  3 x 200 + 2 x 100 ms (target: ratio <= 1.05).
- per-step agent: the shape of Eino's planexecute / LangGraph's plan-and-execute tutorial on
  the same engine: the five tools as five sequential instruction steps, each one executor
  call to call its tool, one to finish and one replanner call: 1 + 3 x 5 = 16 model calls.

The ideal is the model latencies plus the tool waves on the critical path; the ratio is the
median wall time over it.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import time
from pathlib import Path
from typing import Any

from taskdecomp import Budget, ScriptedModel, Toolset, run
from taskdecomp.strategies.replan import ReplanOptions

MODEL_MS = 200
TOOL_MS = 100
TARGET_RATIO = 1.05
TARGET_SALES_CALLS = 2

_SOURCE = Path(__file__).resolve().parent.parent / "examples" / "sales_report" / "tools.py"
_SPEC = importlib.util.spec_from_file_location("sales_report_tools", _SOURCE)
assert _SPEC is not None and _SPEC.loader is not None
SALES = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(SALES)


async def fetch_sales_data(month: str) -> dict[str, Any]:
    """Daily gross sales of a month (YYYY-MM)."""
    await asyncio.sleep(TOOL_MS / 1000)
    return dict(SALES.fetch_sales_data(month))


async def fetch_refund_data(month: str) -> dict[str, Any]:
    """Daily refunds of a month (YYYY-MM)."""
    await asyncio.sleep(TOOL_MS / 1000)
    return dict(SALES.fetch_refund_data(month))


async def calculate_monthly_kpis(month: str) -> dict[str, Any]:
    """Gross, refunds, net, orders and refund rate of a month (YYYY-MM)."""
    await asyncio.sleep(TOOL_MS / 1000)
    return dict(SALES.calculate_monthly_kpis(month))


async def detect_risk_signals(month: str) -> dict[str, Any]:
    """Refund spikes of a month (YYYY-MM)."""
    await asyncio.sleep(TOOL_MS / 1000)
    return dict(SALES.detect_risk_signals(month))


async def get_manager_profile(manager_id: int) -> dict[str, Any]:
    """A sales manager's name, region and team."""
    await asyncio.sleep(TOOL_MS / 1000)
    return dict(SALES.get_manager_profile(manager_id))


TOOLS = Toolset.from_functions(
    [
        fetch_sales_data,
        fetch_refund_data,
        calculate_monthly_kpis,
        detect_risk_signals,
        get_manager_profile,
    ]
)
CALLS: list[tuple[str, dict[str, Any]]] = [(name, {"month": "2026-04"}) for name in list(TOOLS)[:4]]
CALLS.append(("get_manager_profile", {"manager_id": 42}))
RESPOND = {"kind": "respond", "response": "April 2026: net sales $26,825, one refund spike."}


def _tool_step(no: int, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"s{no}", "title": f"Run {tool}", "tool": tool, "args": args, "depends_on": []}


def _plan(steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": "plan", "steps": steps}


def sales_script() -> list[Any]:
    """One wave of five tool steps, then respond."""
    return [_plan([_tool_step(no, *call) for no, call in enumerate(CALLS, start=1)]), RESPOND]


def revision_script() -> list[Any]:
    """March has no data; the replanner revises to April; then respond."""
    march = {"month": "2026-03"}
    april = {"month": "2026-04"}
    first = _plan(
        [_tool_step(1, "fetch_sales_data", march), _tool_step(2, "fetch_refund_data", march)]
    )
    revised = _plan(
        [
            _tool_step(3, "calculate_monthly_kpis", april),
            _tool_step(4, "detect_risk_signals", april),
        ]
    )
    return [first, revised, RESPOND]


def per_step_script() -> list[Any]:
    """Five sequential instruction steps: call, finish and a replanner call for each."""
    steps = [
        {"id": f"s{no}", "title": f"Get {tool}", "instruction": f"Call {tool} with {args}"}
        for no, (tool, args) in enumerate(CALLS, start=1)
    ]
    script: list[Any] = [_plan(steps)]
    for no, (tool, args) in enumerate(CALLS, start=1):
        script.append({"kind": "call", "tool": tool, "args": args})
        script.append({"kind": "finish", "result": f"{tool} done"})
        script.append(_plan(steps[no:]) if no < len(CALLS) else RESPOND)
    return script


# label, script, model calls and tool waves on the critical path (the ideal), target
# model calls (0: any), whether the row has a target
WORKLOADS = (
    ("sales (1 wave)", sales_script, 2, 1, TARGET_SALES_CALLS, True),
    ("revision (2 waves)", revision_script, 3, 2, 0, True),
    ("per-step agent (5 steps)", per_step_script, 16, 5, 0, False),
)


async def _timed_run(script: list[Any]) -> tuple[float, int, int]:
    model = ScriptedModel(responses=script, latency_ms=MODEL_MS)
    started = time.perf_counter()
    result = await run(
        "April 2026 sales report for manager 42",
        tools=TOOLS,
        model=model,
        budget=Budget(max_seconds=60),
        strategy="replan",
        replan=ReplanOptions(),
    )
    elapsed = time.perf_counter() - started
    if not result.ok:
        raise SystemExit(f"benchmark run failed: {result.stop_reason} {result.message}")
    return elapsed, result.usage.llm_calls, result.usage.tool_calls


def rows(repeat: int) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for label, script, calls, waves, target_calls, judged in WORKLOADS:
        runs = [asyncio.run(_timed_run(script())) for _ in range(repeat)]
        wall = statistics.median(r[0] for r in runs)
        llm_calls, tool_calls = runs[0][1], runs[0][2]
        ideal = (calls * MODEL_MS + waves * TOOL_MS) / 1000
        ratio = wall / ideal
        if not judged:
            target, verdict = "-", "(for comparison)"
        else:
            calls_ok = target_calls in (0, llm_calls)
            target = f"{target_calls} calls, " if target_calls else ""
            target += f"<={TARGET_RATIO}"
            verdict = "ok" if calls_ok and ratio <= TARGET_RATIO else "MISS"
        out.append(
            (
                label,
                str(llm_calls),
                str(tool_calls),
                f"{wall * 1000:.1f} ms",
                f"{ideal * 1000:.0f} ms",
                f"{ratio:.3f}",
                target,
                verdict,
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per row (median)")
    args = parser.parse_args()

    print(f"replan, model {MODEL_MS} ms, tools {TOOL_MS} ms, median of {args.repeat}")
    print(
        f"{'workload':<25} {'model':>5} {'tools':>5} {'wall':>10} {'ideal':>8} {'ratio':>6}  target"
    )
    for label, calls, tools, wall, ideal, ratio, target, verdict in rows(args.repeat):
        print(
            f"{label:<25} {calls:>5} {tools:>5} {wall:>10} {ideal:>8} {ratio:>6}"
            f"  {target:<16} {verdict}"
        )


if __name__ == "__main__":
    main()
