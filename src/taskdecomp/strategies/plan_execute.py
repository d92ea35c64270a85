"""The ``plan_execute`` strategy (seed 000/001): plan once, validate, execute, combine.

1. The planner model gets the goal and the catalog of allowed tools and returns a JSON plan.
2. The policy boundary parses and validates it; an invalid plan never reaches a tool.
3. The scheduler runs the steps through the gateway (in order, or as a DAG).
4. One combine call, without tools, writes the answer from the history.

Every run returns a :class:`~taskdecomp.run.RunResult` with a stop reason. Given a store,
a run is checkpointed after every step and :func:`resume` continues it after a crash.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taskdecomp import durable, stops
from taskdecomp.budget import MIN_PLAN_STEPS, Budget, Meter, Usage
from taskdecomp.durable import Journal
from taskdecomp.events import EventBus, PlanCreated, RunStarted, RunStopped, Subscriber
from taskdecomp.gateway import ToolGateway
from taskdecomp.models import Model, ModelRequest, resolve_model
from taskdecomp.models.schemas import plan_schema
from taskdecomp.plan import Plan, TaskId
from taskdecomp.policy import parse_model_json, validate_plan_action
from taskdecomp.prompts import render
from taskdecomp.run import RunId, RunResult, new_run_id
from taskdecomp.runtime import Clock, RunContext
from taskdecomp.scheduler import execute_plan
from taskdecomp.stops import LlmPhase, StopReason, StopRun
from taskdecomp.store.base import DEFAULT_LEASE_SECONDS, Lease, Store, StoredRun
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
    store: Store | None = None,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
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
        store: keep the run there, checkpointed after every step, so :func:`resume` can
            continue it; default: nothing is stored.
        lease_seconds: how long the run's lease in the store outlives this process if it
            dies (see :func:`resume`); renewed every third of it while the run is in flight.

    Raises:
        ConfigError: the toolset or a model string cannot be loaded (before the run starts).
        StoreError: the store cannot be written; the run is then left to :func:`resume`.
    """
    toolset = as_toolset(tools)
    budget = budget or Budget()
    ctx = _context(
        goal, toolset, resolve_model(model), allow, budget, on_event, run_id or new_run_id()
    )
    if clock is not None:
        ctx.clock = clock
    combiner = resolve_model(combiner_model) if combiner_model is not None else None
    started = ctx.clock()
    if store is not None:
        new = durable.new_run(
            ctx.run_id,
            goal,
            tools=tools,
            model=ctx.model,  # the resolved model's name: file paths made absolute
            combiner_model=combiner,
            allow=ctx.gateway.allow,
            budget=budget,
        )
        ttl = durable.lease_seconds(lease_seconds)
        lease = store.create_run(new, owner=durable.new_owner_id(), ttl=ttl)
        ctx.journal = _journal(ctx, store, lease, segment=1, started=started)
    async with durable.leased(ctx.journal):
        return await _execute(ctx, _Outcome(), budget, combiner, started=started)


async def resume(
    run_id: str,
    *,
    store: Store,
    tools: ToolsArg | None = None,
    model: Model | str | None = None,
    allow: Iterable[str] | None = None,
    budget: Budget | None = None,
    combiner_model: Model | str | None = None,
    on_event: Subscriber | None = None,
    clock: Clock | None = None,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
) -> RunResult:
    """Continue a stored run that crashed, was killed, or stopped on ``max_seconds``.

    The stored plan is reused and finished steps are not run again; their history comes
    from the store. An unfinished step runs again when its tool is ``read_only`` or
    ``idempotent`` (with the same idempotency key). An ``unsafe`` step that started and
    left no result is never called again: the run stops with
    ``interrupted_unknown_outcome:<step>`` for a human to decide. The deadline
    (``max_seconds``) starts afresh.

    Budgets cover the whole run: model calls, tokens and cost spent before the resume
    count; each finished step counts as one tool call and loop detection knows its call,
    while an attempt that left no result is not counted (it is retried, not repeated).

    A run that has already ended (any other stop reason) is returned as stored and
    nothing is written.

    One process owns a run at a time: resume takes the run's lease and is refused while
    another process holds it (a run in flight elsewhere); the lease of a process that died
    expires ``lease_seconds`` after its last renewal. Should this process be taken over
    in turn (it stalled past its lease), it stops with ``lease_lost`` without writing.

    Args:
        run_id: the stored run.
        store: where it is stored.
        tools: the toolset; default: the one stored with the run.
        model: the planner model; default: the one stored with the run.
        allow: tools the plan may use; default: the stored list.
        budget: limits; default: the stored budget.
        combiner_model: the combine call's model; default: the stored one, else ``model``.
        on_event: receives every event of the resumed segment.
        clock: monotonic clock, for tests.
        lease_seconds: this process's lease on the run (see :func:`run`).

    Raises:
        RunNotFoundError: no run has this id.
        RunLeasedError: another process owns the run; the message names it.
        LeaseLostError: another process took the run over the moment this one took it.
        CorruptRecordError: the stored run does not decode.
        ConfigError: no toolset or model was stored and none is given, or one cannot load.
        StoreError: the store cannot be read or written.
    """
    stored = store.load_run(RunId(run_id))
    if not stored.resumable:
        return stored.result()
    config = durable.stored_config(stored)
    budget = budget or config.budget
    toolset = as_toolset(
        tools if tools is not None else durable.require(stored.tools, "tools", stored.run_id)
    )
    planner = resolve_model(model or durable.require(stored.model, "model", stored.run_id))
    combiner_spec = combiner_model or config.combiner_model
    combiner = resolve_model(combiner_spec) if combiner_spec is not None else None
    allowed = config.allow if allow is None else allow
    goal = stored.summary.goal
    ctx = _context(goal, toolset, planner, allowed, budget, on_event, stored.run_id)
    if clock is not None:
        ctx.clock = clock
    lease, stored = durable.take_over(store, stored.run_id, seconds=lease_seconds)
    _restore(ctx, stored)
    started = ctx.clock() - stored.usage.seconds
    ctx.journal = _journal(ctx, store, lease, segment=stored.segments + 1, started=started)
    async with durable.leased(ctx.journal):
        if not stored.resumable:  # it ended while this process waited for its lease
            return stored.result()
        ctx.journal.reopened()
        outcome = _Outcome(plan=stored.plan)
        step_id = stored.in_doubt()
        if step_id is None:
            done = stored.finished_steps()
            return await _execute(ctx, outcome, budget, combiner, started=started, done=done)
        ctx.events.emit(RunStarted(run_id=ctx.run_id, goal=goal))
        outcome.stop(durable.interrupted(stored, step_id))
        return _finish(ctx, outcome, started)


def _restore(ctx: RunContext, stored: StoredRun) -> None:
    """Put a stored run's trace, history and spending back into ``ctx``."""
    ctx.trace.extend(stored.trace)
    ctx.history.extend(stored.history)
    meter, usage = ctx.meter, stored.usage
    meter.llm_calls, meter.cost_usd = usage.llm_calls, usage.cost_usd
    meter.tokens_in, meter.tokens_out = usage.tokens_in, usage.tokens_out
    meter.tool_calls = len(stored.history)
    for entry in stored.history:
        ctx.gateway.remember(entry.plan_step.tool, entry.plan_step.args)


def _context(
    goal: str,
    toolset: Toolset,
    model: Model,
    allow: Iterable[str] | None,
    budget: Budget,
    on_event: Subscriber | None,
    run_id: RunId,
) -> RunContext:
    meter = Meter(budget=budget)
    return RunContext(
        run_id=run_id,
        goal=goal,
        model=model,
        gateway=ToolGateway(
            allow=toolset.keys() if allow is None else allow,
            toolset=toolset,
            meter=meter,
            max_workers=budget.max_parallel,
        ),
        meter=meter,
        events=EventBus([on_event] if on_event else []),
    )


def _journal(
    ctx: RunContext, store: Store, lease: Lease, *, segment: int, started: float
) -> Journal:
    def usage() -> Usage:
        return ctx.meter.snapshot(seconds=ctx.clock() - started)

    journal = Journal(store, lease, segment=segment, usage=usage)
    ctx.events.subscribe(journal)
    return journal


async def _execute(
    ctx: RunContext,
    outcome: _Outcome,
    budget: Budget,
    combiner: Model | None,
    *,
    started: float,
    done: frozenset[TaskId] = frozenset(),
) -> RunResult:
    ctx.events.emit(RunStarted(run_id=ctx.run_id, goal=ctx.goal))
    try:
        await _run_phases(ctx, outcome, budget, combiner, done)
    except asyncio.CancelledError:
        outcome.reason = stops.CANCELLED
        _finish(ctx, outcome, started)
        raise
    finally:
        ctx.gateway.close()
    return _finish(ctx, outcome, started)


async def _run_phases(
    ctx: RunContext,
    outcome: _Outcome,
    budget: Budget,
    combiner: Model | None,
    done: frozenset[TaskId],
) -> None:
    deadline = asyncio.timeout(budget.max_seconds)
    try:
        async with deadline:
            if outcome.plan is None:
                outcome.plan = await _plan(ctx, outcome, budget)
                ctx.events.emit(PlanCreated(run_id=ctx.run_id, plan=outcome.plan))
                if ctx.journal is not None:
                    ctx.journal.plan_created(outcome.plan)
            await execute_plan(outcome.plan, ctx, max_parallel=budget.max_parallel, done=done)
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
    catalog = ctx.gateway.toolset.catalog(allowed)
    payload = {
        "goal": ctx.goal,
        "max_plan_steps": budget.max_plan_steps,
        "available_tools": catalog,
    }
    system = render("planner", min_steps=MIN_PLAN_STEPS, max_steps=budget.max_plan_steps)
    request = ModelRequest(
        phase="plan",
        messages=(
            {"role": "system", "content": system},
            {"role": "user", "content": json.dumps(payload, ensure_ascii=True)},
        ),
        json_schema=plan_schema(catalog, min_steps=MIN_PLAN_STEPS, max_steps=budget.max_plan_steps),
        schema_name="plan",
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
    if ctx.journal is not None:
        return ctx.journal.finished(result)  # lease_lost if another process took the run
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
