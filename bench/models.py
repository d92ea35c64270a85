"""Embedded-model benchmark: plan latency, speed, and how often plans pass the policy boundary.

    python bench/models.py [--goals 20] [--modes schema,none] [--model local]
                           [--strategy plan_execute|replan] [--threads N]

Runs the planner on the embedded model (SmolLM2-135M-Instruct unless ``--model
local:PATH.gguf``) for 20 different goals with the sales toolset, once per constraint mode:

- ``schema``: the plan's JSON-schema grammar (tool names an enum, per-tool ``args``);
- ``json``: a grammar for any JSON object;
- ``none``: no grammar at all.

For each mode it prints the median plan latency, output tokens per second, the share of
plans that parse, the share that pass the policy boundary (target with the grammar: 100%),
and the share that are also *right* for their goal (every tool the goal needs, and the
goal's month and manager id in the arguments). The combine call is scripted, so only the
plan call is measured; the tools still run.

With ``--strategy replan`` every model call of the ``replan`` strategy is the embedded model:
planner, replanner and executor agent, within ``max_iterations=3`` and ``max_agent_turns=3``.
For each mode and phase it prints the answers produced, how many did not parse (a stop
``invalid_plan:non_json``, ``invalid_replan:non_json``, ``invalid_action:non_json``,
``<family>:truncated`` or ``llm_empty``, counted in the phase of the run's last model call),
the share that passed the policy boundary (a stop ``invalid_plan:*``, ``invalid_replan:*``,
``invalid_action:*`` or ``bad_ref:*`` refuses an answer), and the median seconds per call
(target with the grammar: no answer fails to parse).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from taskdecomp import Budget, ModelCalled, RunResult, ScriptedModel, load_toolset, run
from taskdecomp.events import Event
from taskdecomp.models.local import Constraint, LocalModel
from taskdecomp.strategies.replan import ReplanOptions

SALES_TOOLS = Path(__file__).resolve().parent.parent / "examples" / "sales_report" / "tools.py"
TARGET_POLICY_PASS_WITH_GRAMMAR = 1.0
REPLAN_OPTIONS = ReplanOptions(max_iterations=3, max_agent_turns=3)
REPLAN_PHASES = ("plan", "replan", "execute")
UNPARSED = frozenset(
    {"invalid_plan:non_json", "invalid_replan:non_json", "invalid_action:non_json", "llm_empty"}
)
REFUSED = ("invalid_plan", "invalid_replan", "invalid_action", "bad_ref")


@dataclass(frozen=True, kw_only=True)
class Goal:
    """A goal and what a right plan for it contains."""

    text: str
    needs: tuple[str, ...]
    month: str | None = None
    manager_id: int | None = None


GOALS = (
    Goal(
        text="Prepare an April 2026 monthly sales summary for manager_id=42 in USD. Include "
        "gross sales, refunds, net sales, refund rate, and one risk note.",
        needs=("calculate_monthly_kpis", "detect_risk_signals", "get_manager_profile"),
        month="2026-04",
        manager_id=42,
    ),
    Goal(
        text="Report net sales and the refund rate for 2026-04.",
        needs=("calculate_monthly_kpis",),
        month="2026-04",
    ),
    Goal(
        text="List the daily gross sales and the daily refunds of March 2026.",
        needs=("fetch_sales_data", "fetch_refund_data"),
        month="2026-03",
    ),
    Goal(
        text="Check May 2026 for refund risk signals and explain them.",
        needs=("detect_risk_signals",),
        month="2026-05",
    ),
    Goal(
        text="Who is manager 7, and how did sales go in April 2026?",
        needs=("get_manager_profile",),
        month="2026-04",
        manager_id=7,
    ),
    Goal(
        text="Build a KPI overview for June 2026: gross, refunds, net and orders.",
        needs=("calculate_monthly_kpis",),
        month="2026-06",
    ),
    Goal(
        text="Find the day with the largest refunds in April 2026 and whether it is a risk.",
        needs=("fetch_refund_data", "detect_risk_signals"),
        month="2026-04",
    ),
    Goal(
        text="Write a briefing for manager_id=42 about February 2026 sales and risks.",
        needs=("get_manager_profile", "detect_risk_signals"),
        month="2026-02",
        manager_id=42,
    ),
    Goal(
        text="Compute the refund rate of January 2026 from sales and refunds.",
        needs=("calculate_monthly_kpis",),
        month="2026-01",
    ),
    Goal(
        text="Give the team of manager 7 a summary of gross sales for 2026-04.",
        needs=("get_manager_profile", "fetch_sales_data"),
        month="2026-04",
        manager_id=7,
    ),
    Goal(
        text="Audit the refunds of July 2026: daily values, total and warnings.",
        needs=("fetch_refund_data", "detect_risk_signals"),
        month="2026-07",
    ),
    Goal(
        text="What was the top sales day in April 2026, and the number of orders?",
        needs=("calculate_monthly_kpis",),
        month="2026-04",
    ),
    Goal(
        text="Prepare a one-page monthly report for August 2026 with KPIs and risks.",
        needs=("calculate_monthly_kpis", "detect_risk_signals"),
        month="2026-08",
    ),
    Goal(
        text="Get the profile of manager 42 and the April 2026 KPIs for their region.",
        needs=("get_manager_profile", "calculate_monthly_kpis"),
        month="2026-04",
        manager_id=42,
    ),
    Goal(
        text="Summarize September 2026: daily sales, daily refunds, and net sales.",
        needs=("fetch_sales_data", "fetch_refund_data", "calculate_monthly_kpis"),
        month="2026-09",
    ),
    Goal(
        text="Is there a refund spike in October 2026? Show the refund data behind it.",
        needs=("detect_risk_signals", "fetch_refund_data"),
        month="2026-10",
    ),
    Goal(
        text="Send manager_id=7 the November 2026 gross sales, refunds and net sales.",
        needs=("get_manager_profile", "calculate_monthly_kpis"),
        month="2026-11",
        manager_id=7,
    ),
    Goal(
        text="Explain the change between gross and net sales for December 2026.",
        needs=("calculate_monthly_kpis",),
        month="2026-12",
    ),
    Goal(
        text="Collect all data for a March 2026 review: sales, refunds, KPIs, risks.",
        needs=(
            "fetch_sales_data",
            "fetch_refund_data",
            "calculate_monthly_kpis",
            "detect_risk_signals",
        ),
        month="2026-03",
    ),
    Goal(
        text="For manager 42, report April 2026 orders, refund rate and any risk warning.",
        needs=("get_manager_profile", "calculate_monthly_kpis", "detect_risk_signals"),
        month="2026-04",
        manager_id=42,
    ),
)


@dataclass
class Tally:
    """Results of one mode."""

    mode: str
    latencies: list[float] = field(default_factory=list)
    speeds: list[float] = field(default_factory=list)
    parsed: int = 0
    passed: int = 0
    right: int = 0
    runs: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


def is_right(result: RunResult, goal: Goal) -> bool:
    """Whether a valid plan has what the goal needs, with the goal's month and manager."""
    if result.plan is None:
        return False
    tools = {step.tool for step in result.plan.steps}
    if not set(goal.needs) <= tools:
        return False
    for step in result.plan.steps:
        month = step.args.get("month")
        if "month" in step.args and goal.month is not None and month != goal.month:
            return False
        manager = step.args.get("manager_id")
        if "manager_id" in step.args and goal.manager_id not in (None, manager):
            return False
    return True


async def measure(model: LocalModel, goal: Goal, tally: Tally) -> None:
    calls: list[ModelCalled] = []

    def collect(event: Event) -> None:
        if isinstance(event, ModelCalled) and event.phase == "plan":
            calls.append(event)

    result = await run(
        goal.text,
        tools=load_toolset(SALES_TOOLS),
        model=model,
        combiner_model=ScriptedModel(rules=[], default="(combined)"),
        budget=Budget(max_seconds=300),
        on_event=collect,
    )
    tally.runs += 1
    reason = str(result.stop_reason)
    tally.reasons[reason] = tally.reasons.get(reason, 0) + 1
    if calls:
        tally.latencies.append(calls[0].seconds)
        if calls[0].seconds > 0:
            tally.speeds.append(calls[0].tokens_out / calls[0].seconds)
    if reason in ("invalid_plan:non_json", "invalid_plan:truncated") or not calls:
        return
    tally.parsed += 1
    if result.plan is not None:
        tally.passed += 1
        tally.right += is_right(result, goal)


def share(part: int, whole: int) -> str:
    return f"{100 * part / whole:5.1f}%" if whole else "    -"


def print_table(model: LocalModel, tallies: list[Tally]) -> None:
    print(f"model: {model.name} ({model.path.name}); goals: {tallies[0].runs} per mode")
    header = (
        f"{'grammar':<8} {'plan p50 s':>10} {'tok/s':>7} {'parse':>7} {'policy':>7} {'right':>7}"
    )
    print(header)
    print("-" * len(header))
    for t in tallies:
        p50 = statistics.median(t.latencies) if t.latencies else float("nan")
        speed = statistics.median(t.speeds) if t.speeds else float("nan")
        print(
            f"{t.mode:<8} {p50:>10.2f} {speed:>7.1f} {share(t.parsed, t.runs):>7} "
            f"{share(t.passed, t.runs):>7} {share(t.right, t.runs):>7}"
        )
    print()
    for t in tallies:
        reasons = ", ".join(f"{k} x{v}" for k, v in sorted(t.reasons.items(), key=lambda i: -i[1]))
        print(f"{t.mode}: {reasons}")


@dataclass
class PhaseTally:
    """The answers of one model phase of the ``replan`` strategy, in one mode."""

    answers: int = 0
    unparsed: int = 0
    refused: int = 0
    latencies: list[float] = field(default_factory=list)


@dataclass
class ReplanTally:
    """Results of one mode with ``--strategy replan``."""

    mode: str
    runs: int = 0
    phases: dict[str, PhaseTally] = field(
        default_factory=lambda: {phase: PhaseTally() for phase in REPLAN_PHASES}
    )
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def unparsed(self) -> int:
        """Answers that did not parse, in all phases."""
        return sum(phase.unparsed for phase in self.phases.values())


async def measure_replan(model: LocalModel, goal: Goal, tally: ReplanTally) -> str:
    """Run ``goal`` with the replan strategy; tally its answers; return its stop reason."""
    calls: list[ModelCalled] = []

    def collect(event: Event) -> None:
        if isinstance(event, ModelCalled):
            calls.append(event)

    result = await run(
        goal.text,
        tools=load_toolset(SALES_TOOLS),
        model=model,
        budget=Budget(max_seconds=600),
        strategy="replan",
        replan=REPLAN_OPTIONS,
        on_event=collect,
    )
    tally.runs += 1
    reason = str(result.stop_reason)
    tally.reasons[reason] = tally.reasons.get(reason, 0) + 1
    for call in calls:
        if call.ok:
            tally.phases[call.phase].answers += 1
            tally.phases[call.phase].latencies.append(call.seconds)
    if not calls or not calls[-1].ok:
        return reason
    last = tally.phases[result.llm_phase or calls[-1].phase]
    if reason in UNPARSED or reason.endswith(":truncated"):
        last.unparsed += 1
    elif reason.partition(":")[0] in REFUSED:
        last.refused += 1
    return reason


def print_replan_table(model: LocalModel, tallies: list[ReplanTally]) -> None:
    print(f"model: {model.name} ({model.path.name}); strategy: replan; goals: {tallies[0].runs}")
    header = (
        f"{'grammar':<8} {'phase':<8} {'answers':>7} {'unparsed':>8} {'policy':>7} {'p50 s':>7}"
    )
    print(header)
    print("-" * len(header))
    for t in tallies:
        for name, phase in t.phases.items():
            p50 = f"{statistics.median(phase.latencies):.2f}" if phase.latencies else "-"
            passed = phase.answers - phase.unparsed - phase.refused
            print(
                f"{t.mode:<8} {name:<8} {phase.answers:>7} {phase.unparsed:>8} "
                f"{share(passed, phase.answers):>7} {p50:>7}"
            )
    print()
    for t in tallies:
        reasons = ", ".join(f"{k} x{v}" for k, v in sorted(t.reasons.items(), key=lambda i: -i[1]))
        print(f"{t.mode}: {reasons}")


async def main_plan_execute(
    path: str | None, modes: list[Constraint], args: argparse.Namespace
) -> int:
    tallies = []
    for mode in modes:
        model = LocalModel(path, constrain=mode, n_threads=args.threads)
        model.load()
        tally = Tally(mode=mode)
        for goal in GOALS[: args.goals]:
            await measure(model, goal, tally)
        tallies.append(tally)
    print_table(LocalModel(path), tallies)
    schema = next((t for t in tallies if t.mode == "schema"), None)
    if schema is not None and schema.passed < schema.runs * TARGET_POLICY_PASS_WITH_GRAMMAR:
        print(f"below target: {schema.passed}/{schema.runs} plans passed with the grammar")
        return 1
    return 0


async def main_replan(path: str | None, modes: list[Constraint], args: argparse.Namespace) -> int:
    tallies = []
    for mode in modes:
        model = LocalModel(path, constrain=mode, n_threads=args.threads)
        model.load()
        tally = ReplanTally(mode=mode)
        for goal in GOALS[: args.goals]:
            reason = await measure_replan(model, goal, tally)
            if args.progress:
                print(f"  {mode} goal {tally.runs}/{args.goals}: {reason}", flush=True)
        tallies.append(tally)
    print_replan_table(LocalModel(path), tallies)
    schema = next((t for t in tallies if t.mode == "schema"), None)
    if schema is not None and schema.unparsed:
        print(f"below target: {schema.unparsed} answers did not parse with the grammar")
        return 1
    return 0


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--goals", type=int, default=len(GOALS), help="how many goals (max 20)")
    parser.add_argument("--modes", default="schema,none", help="schema, json and/or none")
    parser.add_argument("--model", default="local", help="local or local:PATH.gguf")
    parser.add_argument("--strategy", choices=("plan_execute", "replan"), default="plan_execute")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: all)")
    parser.add_argument("--progress", action="store_true", help="print a line per goal")
    args = parser.parse_args()
    path = args.model.partition(":")[2] or None
    modes: list[Constraint] = [m for m in ("schema", "json", "none") if m in args.modes.split(",")]
    if args.strategy == "replan":
        return await main_replan(path, modes, args)
    return await main_plan_execute(path, modes, args)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
