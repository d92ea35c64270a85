"""Embedded-model benchmark: plan latency, speed, and how often plans pass and are right.

    python bench/models.py [--goals 20] [--modes grammar,schema] [--model local]
                           [--output-modes json,prompt] [--min-plan-steps 3]
                           [--toolset sales|travel|all] [--strategy plan_execute|replan]
                           [--threads N] [--progress]

Runs the planner on the embedded model (SmolLM2-135M-Instruct unless ``--model
local:PATH.gguf``) for 20 different goals per toolset, once per constraint mode:

- ``grammar`` (the default): the project's plan grammar (no repeated tool, arguments limited
  to the goal's values in the tools' forms, compact JSON), decoded by the project's decoder
  (likely tokens judged first, the system prompt evaluated once);
- ``schema``: the configuration before it: llama-cpp-python's grammar for the plan's JSON
  schema (tool names an enum, per-tool ``args``), decoded by ``create_chat_completion``;
- ``json``: a grammar for any JSON object;
- ``none``: no grammar at all.

Then one row per output mode (``--output-modes``, default ``json,prompt``; ``none`` for no
such row), as a provider asks for structured output (:mod:`taskdecomp.models.outputs`):

- ``out:native``: the schema enforced (on the embedded model: the ``grammar`` row again);
- ``out:json``: a grammar for any JSON value, the schema stated in the system prompt;
- ``out:prompt``: no grammar, the schema in the system prompt, the answer's first JSON value.

``--min-plan-steps N`` (default 3, the seed's) sets the fewest steps a plan may have
(``Budget.min_plan_steps``).

Toolsets (``--toolset``, default ``all``, one table each):

- ``sales``: the sales example (``examples/sales_report/tools.py``), which the planner
  prompt's examples are drawn from;
- ``travel``: a travel desk (``bench/toolsets/travel_desk.py``) the prompt was never tuned
  on: integer ids, days as ``YYYY-MM-DD``, closed sets (cabin, reason, currency), goals
  written the way users write them ("March 3rd 2026", "booking #1042", "business class").

For each mode it prints, over the plan calls:

- ``plan p50 s`` and ``tok/s``: median seconds of the call and output tokens per second of it;
- ``prompt s``: median seconds from the call's start to its first streamed piece (reading the
  prompt, then the first token); ``decode s``: median seconds from there to the end;
  ``dec tok/s``: median of the tokens after the first over the decode seconds;
- ``tok in`` and ``tok out``: median prompt and answer tokens;
- ``parse``, ``policy``: the share of plans that parse, and that pass the policy boundary
  (target with the grammar: 100%);
- ``right``: the share that are also right for their goal: every tool the goal needs, the
  goal's values wherever a step passes one of the arguments it fixes (month, manager id), and
  for each tool it names, a call of that tool with the values it expects (ids, days, cities,
  cabins; strings compared without case);
- ``prec``: tool precision, steps that call a tool the goal needs over all tool steps, summed
  over the plans that passed. A plan has at least ``--min-plan-steps`` steps (3) and calls
  no tool twice, so with 3 a goal that needs one tool reaches at most 33%.

The combine call is scripted, so only the plan call is measured; the tools still run.

With ``--strategy replan`` every model call of the ``replan`` strategy is the embedded model:
planner, replanner and executor agent, within ``max_iterations=3`` and ``max_agent_turns=3``.
For each mode and phase it prints the answers produced, how many did not parse (a stop
``invalid_plan:non_json``, ``invalid_replan:non_json``, ``invalid_action:non_json``,
``<family>:truncated`` or ``llm_empty``, counted in the phase of the run's last model call),
the share that passed the policy boundary (a stop ``invalid_plan:*``, ``invalid_replan:*``,
``invalid_action:*`` or ``bad_ref:*`` refuses an answer), and the median seconds per call,
reading the prompt and decoding (target with the grammar: no answer fails to parse).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from taskdecomp import Budget, ModelCalled, Plan, ScriptedModel, Toolset, load_toolset, run
from taskdecomp.budget import MIN_PLAN_STEPS
from taskdecomp.events import Event
from taskdecomp.models.base import ModelRequest, ModelResponse, streams
from taskdecomp.models.local import Constraint, LocalModel
from taskdecomp.models.outputs import OutputMode
from taskdecomp.stops import LlmPhase
from taskdecomp.strategies.replan import ReplanOptions

ROOT = Path(__file__).resolve().parent.parent
SALES_TOOLS = ROOT / "examples" / "sales_report" / "tools.py"
TOOLSETS = ROOT / "bench" / "toolsets"
TARGET_POLICY_PASS_WITH_GRAMMAR = 1.0
TARGET_RIGHT = 0.80
"""Share of plans right for their goal with the default ``grammar`` mode."""
TARGET_PRECISION = 0.80
"""Tool precision (needed tool steps over all tool steps) with the ``grammar`` mode."""
TARGET_PLAN_P50_S = 5.0
"""Median plan call on an idle machine."""
REPLAN_OPTIONS = ReplanOptions(max_iterations=3, max_agent_turns=3)
REPLAN_PHASES: tuple[LlmPhase, ...] = ("plan", "replan", "execute")
UNPARSED = frozenset(
    {"invalid_plan:non_json", "invalid_replan:non_json", "invalid_action:non_json", "llm_empty"}
)
REFUSED = ("invalid_plan", "invalid_replan", "invalid_action", "bad_ref")
CONSTRAINTS: tuple[Constraint, ...] = ("grammar", "schema", "json", "none")
OUTPUT_MODES: tuple[OutputMode, ...] = ("native", "json", "prompt")


@dataclass(frozen=True, kw_only=True)
class Row:
    """One configuration of the embedded model measured: a row of the tables."""

    label: str
    constrain: Constraint = "grammar"
    output_mode: OutputMode = "native"


def rows(constraints: str, output_modes: str) -> list[Row]:
    """The rows ``--modes`` and ``--output-modes`` ask for, in a fixed order."""
    chosen, outputs = constraints.split(","), output_modes.split(",")
    unknown = sorted({*chosen} - {*CONSTRAINTS, ""} | ({*outputs} - {*OUTPUT_MODES, "none", ""}))
    if unknown:
        raise SystemExit(
            f"unknown modes {unknown!r}: --modes takes {', '.join(CONSTRAINTS)}; "
            f"--output-modes takes {', '.join(OUTPUT_MODES)} or none"
        )
    found = [Row(label=c, constrain=c) for c in CONSTRAINTS if c in chosen]
    return found + [Row(label=f"out:{m}", output_mode=m) for m in OUTPUT_MODES if m in outputs]


def plan_budget(seconds: float, min_plan_steps: int) -> Budget:
    """A budget of ``seconds`` whose plans have at least ``min_plan_steps`` steps."""
    return Budget(max_seconds=seconds, min_plan_steps=min_plan_steps)


@dataclass(frozen=True, kw_only=True)
class Goal:
    """A goal and what a right plan for it contains."""

    text: str
    needs: tuple[str, ...] = ()
    """Tools a right plan calls, besides those of ``calls``."""
    args: Mapping[str, object] = field(default_factory=dict)
    """Argument values fixed by the goal: a step that passes such an argument passes this."""
    calls: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    """Per tool: a right plan calls it at least once with (at least) these argument values."""

    @property
    def tools(self) -> frozenset[str]:
        """Every tool a right plan calls."""
        return frozenset(self.needs) | frozenset(self.calls)


def load_goals(path: Path) -> tuple[Goal, ...]:
    """The goals in a JSON file: a list of objects with the fields of :class:`Goal`."""
    items = json.loads(path.read_text(encoding="utf-8"))
    return tuple(Goal(**{**item, "needs": tuple(item.get("needs", ()))}) for item in items)


@dataclass(frozen=True, kw_only=True)
class Suite:
    """A toolset and the goals it is measured with."""

    name: str
    tools: Path
    goals: Path
    """A JSON file of goals (see :func:`load_goals`)."""


SUITES = {
    "sales": Suite(name="sales", tools=SALES_TOOLS, goals=TOOLSETS / "sales_report_goals.json"),
    "travel": Suite(
        name="travel",
        tools=TOOLSETS / "travel_desk.py",
        goals=TOOLSETS / "travel_desk_goals.json",
    ),
}


def same(value: object, expected: object) -> bool:
    """Whether an argument value is the expected one (strings compared without case)."""
    if isinstance(value, str) and isinstance(expected, str):
        return value.casefold() == expected.casefold()
    return not isinstance(value, bool) and value == expected


def passes(args: Mapping[str, object], expected: Mapping[str, object]) -> bool:
    """Whether ``args`` has every expected argument, with its expected value."""
    return all(name in args and same(args[name], value) for name, value in expected.items())


def is_right(plan: Plan, goal: Goal) -> bool:
    """Whether a valid plan calls what the goal needs, with the goal's argument values."""
    if not goal.tools <= {step.tool for step in plan.steps}:
        return False
    for step in plan.steps:
        fixed = {name: value for name, value in goal.args.items() if name in step.args}
        if not passes(step.args, fixed):
            return False
    return all(
        any(step.tool == name and passes(step.args, expected) for step in plan.steps)
        for name, expected in goal.calls.items()
    )


def needed_steps(plan: Plan, goal: Goal) -> tuple[int, int]:
    """The plan's steps that call a tool the goal needs, and all its tool steps."""
    tools = [step.tool for step in plan.steps if step.tool is not None]
    return sum(tool in goal.tools for tool in tools), len(tools)


@dataclass(frozen=True, kw_only=True)
class CallTiming:
    """Where the time of one model call went."""

    phase: LlmPhase
    prompt_s: float
    """From the call's start to its first streamed piece: the prompt, then the first token."""
    decode_s: float
    """From the first streamed piece to the end of the call."""
    tokens_in: int
    tokens_out: int

    @property
    def decode_speed(self) -> float | None:
        """Tokens per second after the first one, if there were any."""
        if self.tokens_out < 2 or self.decode_s <= 0:
            return None
        return (self.tokens_out - 1) / self.decode_s


class TimedModel:
    """A model that records, for each call, when its first piece came and when it ended."""

    def __init__(self, model: LocalModel) -> None:
        self.model = model
        self.timings: list[CallTiming] = []

    @property
    def name(self) -> str:
        """The wrapped model's name."""
        return self.model.name

    @property
    def streams(self) -> bool:
        """Whether the wrapped model streams (a run then streams its plan just the same)."""
        return streams(self.model)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer through the wrapped model; record the call's timing."""
        first: list[float] = []
        listener = request.on_text

        def on_text(piece: str) -> None:  # called from the model's worker thread
            if not first:
                first.append(time.perf_counter())
            if listener is not None:
                listener(piece)

        started = time.perf_counter()
        response = await self.model.complete(replace(request, on_text=on_text))
        ended = time.perf_counter()
        first_at = first[0] if first else ended
        timing = CallTiming(
            phase=request.phase,
            prompt_s=first_at - started,
            decode_s=ended - first_at,
            tokens_in=response.tokens_in,
            tokens_out=response.tokens_out,
        )
        self.timings.append(timing)
        return response


@dataclass
class Timings:
    """The timings of a set of model calls."""

    prompt: list[float] = field(default_factory=list)
    decode: list[float] = field(default_factory=list)
    speeds: list[float] = field(default_factory=list)
    tokens_in: list[float] = field(default_factory=list)
    tokens_out: list[float] = field(default_factory=list)

    def add(self, timing: CallTiming) -> None:
        """Count one call."""
        self.prompt.append(timing.prompt_s)
        self.decode.append(timing.decode_s)
        if timing.decode_speed is not None:
            self.speeds.append(timing.decode_speed)
        self.tokens_in.append(timing.tokens_in)
        self.tokens_out.append(timing.tokens_out)


def p50(values: Sequence[float], spec: str = ".2f") -> str:
    return format(statistics.median(values), spec) if values else "-"


@dataclass
class Tally:
    """Results of one mode."""

    mode: str
    latencies: list[float] = field(default_factory=list)
    speeds: list[float] = field(default_factory=list)
    timings: Timings = field(default_factory=Timings)
    parsed: int = 0
    passed: int = 0
    right: int = 0
    runs: int = 0
    needed_steps: int = 0
    tool_steps: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


async def measure(
    model: TimedModel,
    tools: Toolset,
    goal: Goal,
    tally: Tally,
    *,
    budget: Budget,
    show: bool = False,
) -> str:
    """Plan and run ``goal``; tally its plan call and plan; return its stop reason."""
    calls: list[ModelCalled] = []

    def collect(event: Event) -> None:
        if isinstance(event, ModelCalled) and event.phase == "plan":
            calls.append(event)

    model.timings.clear()
    result = await run(
        goal.text,
        tools=tools,
        model=model,
        combiner_model=ScriptedModel(rules=[], default="(combined)"),
        budget=budget,
        on_event=collect,
    )
    tally.runs += 1
    reason = str(result.stop_reason)
    tally.reasons[reason] = tally.reasons.get(reason, 0) + 1
    for timing in model.timings:
        tally.timings.add(timing)
    if calls:
        tally.latencies.append(calls[0].seconds)
        if calls[0].seconds > 0:
            tally.speeds.append(calls[0].tokens_out / calls[0].seconds)
    if reason in ("invalid_plan:non_json", "invalid_plan:truncated") or not calls:
        return reason
    tally.parsed += 1
    if result.plan is not None:
        tally.passed += 1
        tally.right += is_right(result.plan, goal)
        needed, steps = needed_steps(result.plan, goal)
        tally.needed_steps += needed
        tally.tool_steps += steps
        if show:
            print_plan(result.plan, goal)
    return reason


def print_plan(plan: Plan, goal: Goal) -> None:
    """One line per step: its tool and arguments, marked when the goal needs the tool."""
    print(f"  goal: {goal.text} -> {'right' if is_right(plan, goal) else 'wrong'}")
    for step in plan.steps:
        mark = "*" if step.tool in goal.tools else " "
        print(f"   {mark} {step.tool or '(instruction)'} {json.dumps(dict(step.args))}")


def share(part: int, whole: int) -> str:
    return f"{100 * part / whole:5.1f}%" if whole else "    -"


def print_reasons(tallies: Sequence[Tally | ReplanTally]) -> None:
    for t in tallies:
        reasons = ", ".join(f"{k} x{v}" for k, v in sorted(t.reasons.items(), key=lambda i: -i[1]))
        print(f"{t.mode}: {reasons}")


def print_table(model: LocalModel, suite: Suite, tallies: list[Tally]) -> None:
    print(
        f"toolset: {suite.name} ({suite.tools.name}); model: {model.name} ({model.path.name}); "
        f"goals: {tallies[0].runs} per mode"
    )
    header = (
        f"{'mode':<10} {'plan p50 s':>10} {'tok/s':>6} {'prompt s':>8} {'decode s':>8} "
        f"{'dec tok/s':>9} {'tok in':>6} {'tok out':>7} "
        f"{'parse':>6} {'policy':>6} {'right':>6} {'prec':>6}"
    )
    print(header)
    print("-" * len(header))
    for t in tallies:
        times = t.timings
        print(
            f"{t.mode:<10} {p50(t.latencies):>10} {p50(t.speeds, '.1f'):>6} "
            f"{p50(times.prompt):>8} {p50(times.decode):>8} {p50(times.speeds, '.1f'):>9} "
            f"{p50(times.tokens_in, '.0f'):>6} {p50(times.tokens_out, '.0f'):>7} "
            f"{share(t.parsed, t.runs):>6} {share(t.passed, t.runs):>6} "
            f"{share(t.right, t.runs):>6} {share(t.needed_steps, t.tool_steps):>6}"
        )
    print()
    print_reasons(tallies)


@dataclass
class PhaseTally:
    """The answers of one model phase of the ``replan`` strategy, in one mode."""

    answers: int = 0
    unparsed: int = 0
    refused: int = 0
    latencies: list[float] = field(default_factory=list)
    timings: Timings = field(default_factory=Timings)


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


async def measure_replan(
    model: TimedModel, tools: Toolset, goal: Goal, tally: ReplanTally, *, budget: Budget
) -> str:
    """Run ``goal`` with the replan strategy; tally its answers; return its stop reason."""
    calls: list[ModelCalled] = []

    def collect(event: Event) -> None:
        if isinstance(event, ModelCalled):
            calls.append(event)

    model.timings.clear()
    result = await run(
        goal.text,
        tools=tools,
        model=model,
        budget=budget,
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
    for timing in model.timings:
        tally.phases[timing.phase].timings.add(timing)
    if not calls or not calls[-1].ok:
        return reason
    last = tally.phases[result.llm_phase or calls[-1].phase]
    if reason in UNPARSED or reason.endswith(":truncated"):
        last.unparsed += 1
    elif reason.partition(":")[0] in REFUSED:
        last.refused += 1
    return reason


def print_replan_table(model: LocalModel, suite: Suite, tallies: list[ReplanTally]) -> None:
    print(
        f"toolset: {suite.name} ({suite.tools.name}); model: {model.name} ({model.path.name}); "
        f"strategy: replan; goals: {tallies[0].runs}"
    )
    header = (
        f"{'mode':<10} {'phase':<8} {'answers':>7} {'unparsed':>8} {'policy':>7} {'p50 s':>7} "
        f"{'prompt s':>8} {'decode s':>8}"
    )
    print(header)
    print("-" * len(header))
    for t in tallies:
        for name, phase in t.phases.items():
            passed = phase.answers - phase.unparsed - phase.refused
            print(
                f"{t.mode:<10} {name:<8} {phase.answers:>7} {phase.unparsed:>8} "
                f"{share(passed, phase.answers):>7} {p50(phase.latencies):>7} "
                f"{p50(phase.timings.prompt):>8} {p50(phase.timings.decode):>8}"
            )
    print()
    print_reasons(tallies)


def progress(suite: Suite, row: Row, done: int, goals: int, reason: str) -> None:
    """Print one goal's stop reason (``--progress``)."""
    print(f"  {suite.name} {row.label} goal {done}/{goals}: {reason}", flush=True)


def timed_model(path: str | None, row: Row, args: argparse.Namespace) -> TimedModel:
    model = LocalModel(
        path, constrain=row.constrain, output_mode=row.output_mode, n_threads=args.threads
    )
    model.load()
    return TimedModel(model)


async def plan_suite(
    suite: Suite, path: str | None, modes: list[Row], args: argparse.Namespace
) -> bool:
    """Measure ``suite`` in every mode and print its table; say whether it met the target."""
    tools, goals = load_toolset(suite.tools), load_goals(suite.goals)
    budget = plan_budget(300, args.min_plan_steps)
    tallies = []
    for row in modes:
        model = timed_model(path, row, args)
        tally = Tally(mode=row.label)
        for goal in goals[: args.goals]:
            reason = await measure(model, tools, goal, tally, budget=budget, show=args.show_plans)
            if args.progress:
                progress(suite, row, tally.runs, args.goals, reason)
        tallies.append(tally)
    print_table(LocalModel(path), suite, tallies)
    met = True
    for tally in tallies:
        if tally.mode in ("grammar", "schema"):
            met = print_targets(tally) and met
    return met


def print_targets(t: Tally) -> bool:
    """Print the mode's figures against the targets; say whether the policy target is met.

    Only the policy share fails the run: right, precision and latency are measured
    figures to report (latency depends on how busy the machine is).
    """
    checks = [("policy", t.passed / t.runs if t.runs else 0, TARGET_POLICY_PASS_WITH_GRAMMAR)]
    if t.mode == "grammar":
        checks += [
            ("right", t.right / t.runs if t.runs else 0, TARGET_RIGHT),
            ("prec", t.needed_steps / t.tool_steps if t.tool_steps else 0, TARGET_PRECISION),
        ]
    words = [
        f"{name} {value:.0%} (target {target:.0%}: {'MET' if value >= target else 'MISS'})"
        for name, value, target in checks
    ]
    if t.mode == "grammar" and t.latencies:
        median = statistics.median(t.latencies)
        verdict = "MET" if median <= TARGET_PLAN_P50_S else "MISS"
        words.append(f"plan p50 {median:.2f} s (target {TARGET_PLAN_P50_S:.0f} s idle: {verdict})")
    print(f"{t.mode}: " + "; ".join(words))
    return checks[0][1] >= TARGET_POLICY_PASS_WITH_GRAMMAR


async def replan_suite(
    suite: Suite, path: str | None, modes: list[Row], args: argparse.Namespace
) -> bool:
    """Measure ``suite`` with the replan strategy and print its table; say if it met the target."""
    tools, goals = load_toolset(suite.tools), load_goals(suite.goals)
    budget = plan_budget(600, args.min_plan_steps)
    tallies = []
    for row in modes:
        model = timed_model(path, row, args)
        tally = ReplanTally(mode=row.label)
        for goal in goals[: args.goals]:
            reason = await measure_replan(model, tools, goal, tally, budget=budget)
            if args.progress:
                progress(suite, row, tally.runs, args.goals, reason)
        tallies.append(tally)
    print_replan_table(LocalModel(path), suite, tallies)
    met = True
    for tally in tallies:
        if tally.mode in ("grammar", "schema") and tally.unparsed:
            print(f"below target: {tally.unparsed} answers did not parse in mode {tally.mode}")
            met = False
    return met


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--goals", type=int, default=20, help="goals per toolset (max 20)")
    parser.add_argument(
        "--modes", default="grammar,schema", help="grammar, schema, json and/or none"
    )
    parser.add_argument(
        "--output-modes",
        default="json,prompt",
        help="a row per output mode: native, json and/or prompt, or none",
    )
    parser.add_argument(
        "--min-plan-steps",
        type=int,
        default=MIN_PLAN_STEPS,
        help=f"fewest steps a plan may have (default {MIN_PLAN_STEPS})",
    )
    parser.add_argument("--model", default="local", help="local or local:PATH.gguf")
    parser.add_argument("--toolset", choices=(*SUITES, "all"), default="all")
    parser.add_argument("--strategy", choices=("plan_execute", "replan"), default="plan_execute")
    parser.add_argument(
        "--threads", type=int, default=None, help="CPU threads (default: as the model picks)"
    )
    parser.add_argument("--progress", action="store_true", help="print a line per goal")
    parser.add_argument(
        "--show-plans", action="store_true", help="print each plan (* marks a needed tool)"
    )
    args = parser.parse_args()
    path = args.model.partition(":")[2] or None
    modes = rows(args.modes, args.output_modes)
    suites = list(SUITES.values()) if args.toolset == "all" else [SUITES[args.toolset]]
    measure_suite = replan_suite if args.strategy == "replan" else plan_suite
    met = True
    for number, suite in enumerate(suites):
        if number:
            print()
        met = await measure_suite(suite, path, modes, args) and met
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
