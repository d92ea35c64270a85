"""The ``plan_execute`` strategy (seed 000/001): plan once, validate, execute, combine.

1. The planner model gets the goal and the catalog of allowed tools and returns a JSON plan.
2. The policy boundary parses and validates it; an invalid plan never reaches a tool.
3. The scheduler runs the steps through the gateway (in order, or as a DAG).
4. One combine call, without tools, writes the answer from the history.

Every run returns a :class:`~taskdecomp.run.RunResult` with a stop reason.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taskdecomp import stops
from taskdecomp.budget import MIN_PLAN_STEPS, Budget, Meter
from taskdecomp.events import EventBus, PlanCreated, RunStarted, RunStopped, Subscriber
from taskdecomp.gateway import ToolGateway
from taskdecomp.models import Model, ModelRequest, resolve_model
from taskdecomp.plan import Plan
from taskdecomp.policy import parse_model_json, validate_plan_action
from taskdecomp.prompts import render
from taskdecomp.run import RunId, RunResult, new_run_id
from taskdecomp.runtime import Clock, RunContext
from taskdecomp.scheduler import execute_plan
from taskdecomp.stops import LlmPhase, StopReason, StopRun
from taskdecomp.tools import Toolset, ToolSpec, load_toolset

ToolsArg = Toolset | str | Path | Iterable[Callable[..., Any] | ToolSpec]
"""A toolset, a path or module name to load one from, or a list of functions."""


def as_toolset(tools: ToolsArg) -> Toolset:
    """Accept any :data:`ToolsArg` and return a :class:`~taskdecomp.tools.Toolset`."""
    if isinstance(tools, Toolset):
        return tools
    if isinstance(tools, str | Path):
        return load_toolset(tools)
    return Toolset.from_functions(tools)


@dataclass(kw_only=True)
class _Outcome:
    """How far a run got; turned into the result at the end."""

    reason: StopReason = stops.SUCCESS
    plan: Plan | None = None
    raw_plan: Any = None
    answer: str | None = None
    llm_phase: LlmPhase | None = None
    message: str | None = None

    def stop(self, signal: StopRun) -> None:
        self.reason = signal.reason
        self.llm_phase = signal.llm_phase
        self.message = signal.message or None


async def run(
    goal: str,
    *,
    tools: ToolsArg,
    model: Model | str,
    allow: Iterable[str] | None = None,
    budget: Budget | None = None,
    combiner_model: Model | str | None = None,
    on_event: Subscriber | None = None,
    run_id: RunId | None = None,
    clock: Clock | None = None,
) -> RunResult:
    """Plan, execute and combine ``goal``; always returns a result, never raises for a run failure.

    Args:
        goal: what to achieve, in words.
        tools: the toolset (see :data:`ToolsArg`).
        model: the planner model, or a model string such as ``scripted:plan.json``.
        allow: tool names the plan may use; default: every tool in the toolset.
        budget: limits; default: the seed's.
        combiner_model: a different model for the combine call; default: ``model``.
        on_event: receives every event of the run.
        run_id: use this id instead of a fresh one.
        clock: monotonic clock, for tests.

    Raises:
        ConfigError: the toolset or a model string cannot be loaded (before the run starts).
    """
    toolset = as_toolset(tools)
    budget = budget or Budget()
    meter = Meter(budget=budget)
    ctx = RunContext(
        run_id=run_id or new_run_id(),
        goal=goal,
        model=resolve_model(model),
        gateway=ToolGateway(
            allow=toolset.keys() if allow is None else allow,
            toolset=toolset,
            meter=meter,
            max_workers=budget.max_parallel,
        ),
        meter=meter,
        events=EventBus([on_event] if on_event else []),
    )
    if clock is not None:
        ctx.clock = clock
    combiner = resolve_model(combiner_model) if combiner_model is not None else None
    started = ctx.clock()
    ctx.events.emit(RunStarted(run_id=ctx.run_id, goal=goal))
    outcome = _Outcome()
    try:
        await _run_phases(ctx, outcome, budget, combiner)
    except asyncio.CancelledError:
        outcome.reason = stops.CANCELLED
        _finish(ctx, outcome, started)
        raise
    finally:
        ctx.gateway.close()
    return _finish(ctx, outcome, started)


async def _run_phases(
    ctx: RunContext, outcome: _Outcome, budget: Budget, combiner: Model | None
) -> None:
    deadline = asyncio.timeout(budget.max_seconds)
    try:
        async with deadline:
            outcome.plan = await _plan(ctx, outcome, budget)
            ctx.events.emit(PlanCreated(run_id=ctx.run_id, plan=outcome.plan))
            await execute_plan(outcome.plan, ctx, max_parallel=budget.max_parallel)
            outcome.answer = await _combine(ctx, combiner)
    except StopRun as signal:
        outcome.stop(signal)
    except TimeoutError:
        if not deadline.expired():
            raise
        outcome.reason = stops.MAX_SECONDS
        outcome.message = f"the run passed its {budget.max_seconds}s deadline"


async def _plan(ctx: RunContext, outcome: _Outcome, budget: Budget) -> Plan:
    allowed = ctx.gateway.allow
    payload = {
        "goal": ctx.goal,
        "max_plan_steps": budget.max_plan_steps,
        "available_tools": ctx.gateway.toolset.catalog(allowed),
    }
    system = render("planner", min_steps=MIN_PLAN_STEPS, max_steps=budget.max_plan_steps)
    request = ModelRequest(
        phase="plan",
        messages=(
            {"role": "system", "content": system},
            {"role": "user", "content": json.dumps(payload, ensure_ascii=True)},
        ),
    )
    response = await ctx.ask(request)
    outcome.raw_plan = response.text
    action = parse_model_json(response.text)
    outcome.raw_plan = action
    plan = validate_plan_action(action, max_plan_steps=budget.max_plan_steps, allowed_tools=allowed)
    outcome.raw_plan = None
    return plan


async def _combine(ctx: RunContext, combiner: Model | None) -> str:
    history = sorted(ctx.history, key=lambda entry: entry.step_no)
    payload = {"goal": ctx.goal, "history": [entry.to_dict() for entry in history]}
    request = ModelRequest(
        phase="finalize",
        messages=(
            {"role": "system", "content": render("combiner")},
            {"role": "user", "content": json.dumps(payload, ensure_ascii=True)},
        ),
    )
    response = await ctx.ask(request, model=combiner)
    return response.text.strip()


def _finish(ctx: RunContext, outcome: _Outcome, started: float) -> RunResult:
    result = RunResult(
        run_id=ctx.run_id,
        status="ok" if outcome.reason == stops.SUCCESS else "stopped",
        stop_reason=outcome.reason,
        answer=outcome.answer if outcome.reason == stops.SUCCESS else None,
        plan=outcome.plan,
        raw_plan=outcome.raw_plan,
        llm_phase=outcome.llm_phase,
        message=outcome.message,
        trace=tuple(ctx.trace),
        history=tuple(sorted(ctx.history, key=lambda entry: entry.step_no)),
        usage=ctx.meter.snapshot(seconds=ctx.clock() - started),
    )
    ctx.events.emit(RunStopped(run_id=ctx.run_id, result=result))
    return result


def run_sync(goal: str, **kwargs: Any) -> RunResult:
    """Blocking :func:`run`, for scripts and notebooks without an event loop.

    Raises:
        RuntimeError: when called from inside a running event loop (use ``await run(...)``).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run(goal, **kwargs))
    raise RuntimeError("run_sync() cannot run inside an event loop; use `await run(...)`")
