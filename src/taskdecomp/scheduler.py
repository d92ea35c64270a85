"""The scheduler: runs a plan's steps through the gateway.

A plan without ``depends_on`` runs in order, one step at a time. A plan with it is a DAG:
every step whose prerequisites have finished is ready, and ready steps run concurrently, at
most ``max_parallel`` at once, started in plan order. The first step that stops the run
cancels the others. The run's deadline is the caller's ``asyncio.timeout``; cancellation
reaches in-flight steps wherever they are.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from taskdecomp import stops
from taskdecomp.events import StepFinished, StepStarted
from taskdecomp.gateway import args_hash
from taskdecomp.plan import Plan, Step, TaskId
from taskdecomp.run import HistoryEntry, TraceEntry
from taskdecomp.runtime import RunContext
from taskdecomp.stops import StopRun


async def execute_plan(plan: Plan, ctx: RunContext, *, max_parallel: int) -> None:
    """Run every step of ``plan``, recording trace and history in ``ctx``.

    Raises:
        StopRun: ``max_execute_steps`` before anything runs when the plan is too long, or the
            first step failure's reason.
    """
    if len(plan.steps) > ctx.meter.budget.max_execute_steps:
        raise StopRun(
            stops.MAX_EXECUTE_STEPS,
            message=f"the plan has {len(plan.steps)} steps; the budget allows "
            f"{ctx.meter.budget.max_execute_steps}",
        )
    numbers = {step.id: no for no, step in enumerate(plan.steps, start=1)}
    waiting = {step.id: set(deps) for step, deps in zip(plan.steps, _deps(plan), strict=True)}
    pending = list(plan.steps)
    running: dict[asyncio.Task[None], TaskId] = {}
    try:
        while pending or running:
            for step in _ready(pending, waiting, limit=max_parallel - len(running)):
                pending.remove(step)
                task = asyncio.create_task(run_step(numbers[step.id], step, ctx))
                running[task] = step.id
            if not running:  # unreachable for a validated plan; never wait forever
                raise StopRun(stops.invalid_plan("cycle"), message="no step can start")
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in _in_plan_order(done, running, numbers):
                finished = running.pop(task)
                task.result()  # re-raises the step's StopRun
                for deps in waiting.values():
                    deps.discard(finished)
    finally:
        await _cancel(running)


def _deps(plan: Plan) -> Iterable[tuple[TaskId, ...]]:
    deps = plan.dependencies()
    return (deps[step.id] for step in plan.steps)


def _ready(pending: list[Step], waiting: dict[TaskId, set[TaskId]], *, limit: int) -> list[Step]:
    return [step for step in pending if not waiting[step.id]][: max(limit, 0)]


def _in_plan_order(
    done: set[asyncio.Task[None]],
    running: dict[asyncio.Task[None], TaskId],
    numbers: dict[TaskId, int],
) -> list[asyncio.Task[None]]:
    return sorted(done, key=lambda task: numbers[running[task]])


async def _cancel(running: dict[asyncio.Task[None], TaskId]) -> None:
    for task in running:
        task.cancel()
    if running:
        await asyncio.gather(*running, return_exceptions=True)


async def run_step(step_no: int, step: Step, ctx: RunContext) -> None:
    """Call one step's tool and record the outcome in ``ctx``.

    Raises:
        StopRun: when the gateway refuses or the tool fails.
    """
    ctx.events.emit(StepStarted(run_id=ctx.run_id, step_no=step_no, step=step))
    started = ctx.clock()

    def record(
        ok: bool, *, reason: stops.StopReason | None = None, error: str | None = None
    ) -> TraceEntry:
        entry = TraceEntry(
            step_no=step_no,
            step_id=step.id,
            tool=step.tool,
            args_hash=args_hash(step.args),
            ok=ok,
            stop_reason=reason,
            error=error,
            seconds=round(ctx.clock() - started, 6),
        )
        ctx.trace.append(entry)
        return entry

    try:
        observation = await ctx.gateway.call(
            step.tool, step.args, idempotency_key=f"{ctx.run_id}:{step.id}"
        )
    except StopRun as stop:
        entry = record(False, reason=stop.reason, error=stop.message or None)
        ctx.events.emit(StepFinished(run_id=ctx.run_id, entry=entry))
        raise
    except asyncio.CancelledError:
        entry = record(False, error="cancelled before it finished")
        ctx.events.emit(StepFinished(run_id=ctx.run_id, entry=entry))
        raise
    entry = record(True)
    ctx.history.append(HistoryEntry(step_no=step_no, plan_step=step, observation=observation))
    ctx.events.emit(StepFinished(run_id=ctx.run_id, entry=entry, observation=observation))
