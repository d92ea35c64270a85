"""The scheduler: runs a plan's steps through the gateway.

A plan without ``depends_on`` runs in order, one step at a time, inline. A plan with it is a DAG:
every step whose prerequisites have finished is ready, and ready steps run concurrently, at
most ``max_parallel`` at once, started in plan order. The first step that stops the run
cancels the others. The run's deadline is the caller's ``asyncio.timeout``; cancellation
reaches in-flight steps wherever they are.

:func:`execute_wave` runs only the steps that are ready now (the ``replan`` strategy asks
its replanner after each wave).

Before a tool is called, ``$ref`` arguments are resolved from the results of earlier steps
(:mod:`taskdecomp.refs`) and a ``needs_approval`` tool waits for a human
(:mod:`taskdecomp.approvals`). An instruction step is handed to the run's agent.

When the run has a journal, every step is checkpointed as it ends, before the next step can
start; an ``unsafe`` tool's intent is committed before it is called.
"""

from __future__ import annotations

import asyncio
import heapq
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping
from typing import Any

from taskdecomp import stops
from taskdecomp.approvals import ApprovalRequest
from taskdecomp.attempts import Attempt
from taskdecomp.events import StepFinished, StepStarted
from taskdecomp.gateway import args_hash
from taskdecomp.plan import Plan, Step, TaskId
from taskdecomp.refs import has_refs, resolve_refs
from taskdecomp.run import HistoryEntry, TraceEntry
from taskdecomp.runtime import RunContext
from taskdecomp.stops import StopRun
from taskdecomp.telemetry import spans


async def execute_plan(
    plan: Plan,
    ctx: RunContext,
    *,
    max_parallel: int,
    done: Collection[TaskId] = frozenset(),
    started: Mapping[TaskId, asyncio.Task[None]] | None = None,
) -> None:
    """Run every step of ``plan`` not in ``done``, recording trace and history in ``ctx``.

    ``done`` holds the steps a resumed run finished before (or that finished while the plan
    streamed); their history is already in ``ctx`` and they count as finished
    prerequisites. ``started`` holds steps already running (started while the plan
    streamed): they are waited for like the steps this call starts.

    Raises:
        StopRun: ``max_execute_steps`` before anything runs when the plan is too long, or the
            first step failure's reason.
    """
    running = dict(started or {})
    try:
        if len(plan.steps) > ctx.meter.budget.max_execute_steps:
            raise StopRun(
                stops.MAX_EXECUTE_STEPS,
                message=f"the plan has {len(plan.steps)} steps; the budget allows "
                f"{ctx.meter.budget.max_execute_steps}",
            )
        if not plan.is_dag:
            for step_no, step in enumerate(plan.steps, start=1):
                if step.id in running:
                    await running.pop(step.id)
                elif step.id not in done:
                    await run_step(step_no, step, ctx)
            return
        await _execute_dag(
            plan, ctx, max_parallel=max_parallel, skip=frozenset(done), started=running
        )
    finally:
        await _cancel({task: step_id for step_id, task in running.items()})


async def _execute_dag(
    plan: Plan,
    ctx: RunContext,
    *,
    max_parallel: int,
    skip: frozenset[TaskId],
    started: dict[TaskId, asyncio.Task[None]],
) -> None:
    """Run each step once its prerequisites finished, concurrently, in plan order.

    ``started`` steps are running already; each is taken out of it once it is waited for.
    """
    numbers = {step.id: no for no, step in enumerate(plan.steps, start=1)}
    todo = [step for step in plan.steps if step.id not in skip and step.id not in started]
    blocked = {step.id: len(set(step.depends_on or ()) - skip) for step in todo}
    dependents: dict[TaskId, list[TaskId]] = defaultdict(list)
    for step in todo:
        for dep in set(step.depends_on or ()) - skip:
            dependents[dep].append(step.id)

    def unlocked(step_id: TaskId) -> list[int]:
        for dependent in dependents[step_id]:
            blocked[dependent] -= 1
        return [numbers[d] for d in dependents[step_id] if blocked[d] == 0]

    running = {task: (numbers[step_id], step_id) for step_id, task in started.items()}
    started.clear()  # from here on, the runner owns them
    before = len(plan.steps) - len(blocked) - len(running)
    ready = [numbers[step_id] for step_id, count in blocked.items() if count == 0]
    steps = dict(enumerate(plan.steps, start=1))
    finished = await _run_bounded(ctx, steps, ready, max_parallel, running, unlocked)
    if before + finished < len(plan.steps):  # unreachable for a validated plan
        raise StopRun(stops.invalid_plan("cycle"), message="some steps can never start")


Running = dict[asyncio.Task[None], tuple[int, TaskId]]
"""Steps in flight: each task with its step's number and id."""


async def _run_bounded(
    ctx: RunContext,
    steps: Mapping[int, Step],
    ready: list[int],
    max_parallel: int,
    running: Running,
    unlocked: Callable[[TaskId], list[int]] = lambda _: [],
) -> int:
    """Run ready steps concurrently, at most ``max_parallel`` at once; how many finished.

    Steps start in the order of their numbers (``ready`` is a heap of them); a step that
    finishes may make others ready (``unlocked``). The first step that stops the run cancels
    the others. A step that waits for approval starts nothing more; the running ones end
    first, then it is raised, so nothing is cut short.

    Raises:
        StopRun: the first step failure's reason, or the pause for approval.
    """
    heapq.heapify(ready)
    pause: StopRun | None = None
    finished = 0
    try:
        while (ready and pause is None) or running:
            while ready and pause is None and len(running) < max_parallel:
                step_no = heapq.heappop(ready)
                step = steps[step_no]
                pause = waits_for_approval(step, ctx)
                if pause is None:
                    running[asyncio.create_task(run_step(step_no, step, ctx))] = (step_no, step.id)
            if not running:
                break
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=lambda t: running[t][0]):
                _, step_id = running.pop(task)
                task.result()  # re-raises the step's StopRun
                finished += 1
                for step_no in unlocked(step_id):
                    heapq.heappush(ready, step_no)
    finally:
        await _cancel(running)
    if pause is not None:
        raise pause  # the steps that were running have finished; nothing was cut short
    return finished


async def _cancel(running: Mapping[asyncio.Task[None], object]) -> None:
    for task in running:
        task.cancel()
    if running:
        await asyncio.gather(*running, return_exceptions=True)


async def execute_wave(
    plan: Plan,
    ctx: RunContext,
    *,
    done: Collection[TaskId],
    numbers: Mapping[TaskId, int],
    max_parallel: int,
) -> list[Step]:
    """Run the steps of ``plan`` that are ready now (prerequisites in ``done``); return them.

    ``numbers`` gives each step its number in the run. The steps run concurrently, at most
    ``max_parallel`` at once, started in plan order; the first failure cancels the others.

    Raises:
        StopRun: the first step failure's reason.
    """
    wave = plan.ready(done)
    for step in wave:  # a pause must not cut short steps that already started
        pause = waits_for_approval(step, ctx)
        if pause is not None:
            raise pause
    if len(wave) == 1:
        await run_step(numbers[wave[0].id], wave[0], ctx)
        return wave
    steps = {numbers[step.id]: step for step in wave}
    await _run_bounded(ctx, steps, list(steps), max_parallel, {})
    return wave


async def run_step(step_no: int, step: Step, ctx: RunContext) -> None:
    """Carry out one step and record the outcome in ``ctx``.

    Raises:
        StopRun: when the gateway refuses, the tool fails, or the agent stops.
    """
    if step.instruction is not None:
        await _run_instruction(step_no, step, ctx)
        return
    assert step.tool is not None  # a validated step has a tool or an instruction
    observation = await call_tool(
        step_no, step, ctx, tool=step.tool, args=step.args, call_id=step.id, finishes=True
    )
    del observation  # recorded as the step's history by call_tool


async def _run_instruction(step_no: int, step: Step, ctx: RunContext) -> None:
    if ctx.agent is None:
        raise StopRun(
            stops.invalid_plan("instruction_step"),
            message=f"step {step.id!r} has an instruction; only the replan strategy runs those",
        )
    ctx.events.emit(StepStarted(run_id=ctx.run_id, step_no=step_no, step=step))
    started = ctx.clock()
    with spans.step(ctx, step_no, step):
        result = await ctx.agent(step_no, step)
    ctx.step_finished(step_no, step, result, started=started)


async def call_tool(
    step_no: int,
    step: Step,
    ctx: RunContext,
    *,
    tool: str,
    args: Mapping[str, Any],
    call_id: str,
    finishes: bool,
    on_success: Callable[[Any], Mapping[str, Any] | None] | None = None,
) -> Any:
    """Call ``tool`` for ``step`` through the gateway; record the trace (and the journal).

    ``call_id`` names the call (the step id, or ``<step>#<turn>`` for an agent's call): it
    keys the idempotency key. When ``finishes`` is true the call's result
    is the step's result and goes into the history. ``on_success`` sees the result and
    may return strategy state to store in the same checkpoint (an agent's turn).

    Raises:
        StopRun: a refused or failed call, a bad ``$ref``, or a call waiting for approval.
    """
    digest = args_hash(args)
    if finishes:
        ctx.events.emit(StepStarted(run_id=ctx.run_id, step_no=step_no, step=step))
    call = _Call(ctx, step_no, step, tool, key=f"{ctx.run_id}:{call_id}", digest=digest)
    try:
        if finishes and has_refs(args):
            args = resolve_refs(step, {h.plan_step.id: h.observation for h in ctx.history})
            digest = call.digest = args_hash(args)
        _approve(ctx, step.id, tool, args)
        call.attempt = await _begin(ctx, step_no, step, tool, call.key)
        with spans.tool_call(ctx, step_no, step, tool, args, key=call.key) as traced:
            observation = traced.observed(
                await ctx.gateway.call(
                    tool, args, idempotency_key=call.key, digest=digest, on_retry=call.retried
                )
            )
        if call.attempt is not None:
            call.attempt.check(tool, observation)
    except StopRun as stop:
        if stop.reason == stops.AWAITING_APPROVAL:
            raise  # nothing was called; the run pauses
        entry = call.record(False, reason=stop.reason, error=stop.message or None)
        ctx.events.emit(StepFinished(run_id=ctx.run_id, entry=entry))
        if call.attempt is not None:
            await call.attempt.failed(entry)
        raise
    except asyncio.CancelledError:
        entry = call.record(False, error="cancelled before it finished")
        ctx.events.emit(StepFinished(run_id=ctx.run_id, entry=entry))
        if call.attempt is not None:
            call.attempt.cancelled(entry)
        raise
    entry = call.record(True)
    history = None
    if finishes:
        history = HistoryEntry(step_no=step_no, plan_step=step, observation=observation)
        ctx.history.append(history)
        ctx.events.emit(StepFinished(run_id=ctx.run_id, entry=entry, observation=observation))
    state = on_success(observation) if on_success is not None else None
    if call.attempt is not None:
        await call.attempt.succeeded(entry, history, state=state)
    return observation


class _Call:
    """One tool call's trace entries and journal attempts: one of each per attempt.

    A tool with retries may be called several times (the gateway's ``on_retry``); each
    failed attempt that is tried again gets its trace entry and its journal end here.
    """

    def __init__(
        self, ctx: RunContext, step_no: int, step: Step, tool: str, *, key: str, digest: str
    ) -> None:
        self.ctx, self.step_no, self.step, self.tool, self.key = ctx, step_no, step, tool, key
        self.digest = digest
        self.started = ctx.clock()
        self.tries = 1
        self.attempt: Attempt | None = None
        """The journal's attempt in flight, when the run has a journal."""

    def record(
        self, ok: bool, *, reason: stops.StopReason | None = None, error: str | None = None
    ) -> TraceEntry:
        """Add the current attempt's trace entry to the run."""
        entry = TraceEntry(
            step_no=self.step_no,
            step_id=self.step.id,
            tool=self.tool,
            args_hash=self.digest,
            ok=ok,
            stop_reason=reason,
            error=error,
            seconds=round(self.ctx.clock() - self.started, 6),
            attempt=self.tries,
        )
        self.ctx.trace.append(entry)
        return entry

    async def retried(self, failed: int, stop: StopRun, delay: float) -> None:
        """End attempt ``failed`` (trace and journal), which the gateway tries again."""
        entry = self.record(
            False, reason=stop.reason, error=f"{stop.message}; retry in {round(delay, 3):g}s"
        )
        ended, self.attempt = self.attempt, None  # ended, whether or not the next one begins
        if ended is not None:
            await ended.failed(entry)
            self.attempt = await _begin(self.ctx, self.step_no, self.step, self.tool, self.key)
        self.tries, self.started = failed + 1, self.ctx.clock()


def _approve(ctx: RunContext, step_id: str, tool: str, args: Mapping[str, Any]) -> None:
    """Pause for a human before a ``needs_approval`` tool, unless this call was approved.

    A call is identified by its step, tool and arguments (not by an agent's turn number),
    so an approved call is not asked again when an agent replays its step.
    """
    spec = ctx.gateway.toolset.get(tool)
    if spec is not None and spec.needs_approval:
        ctx.approvals.require(ApprovalRequest.for_call(step_id, tool, args, redactor=ctx.redactor))


def waits_for_approval(step: Step, ctx: RunContext) -> StopRun | None:
    """The pause a tool step would make before its call, or ``None`` (checked up front)."""
    if step.tool is None:
        return None
    args: Mapping[str, Any] = step.args
    try:
        if has_refs(args):
            args = resolve_refs(step, {h.plan_step.id: h.observation for h in ctx.history})
        _approve(ctx, step.id, step.tool, args)
    except StopRun as stop:
        return stop if stop.reason == stops.AWAITING_APPROVAL else None  # the step reports it
    return None


async def _begin(ctx: RunContext, step_no: int, step: Step, tool: str, key: str) -> Attempt | None:
    """Start the call's attempt in the journal (committing an ``unsafe`` intent), if any."""
    if ctx.journal is None:
        return None
    spec = ctx.gateway.toolset.get(tool)
    side_effects = spec.side_effects if spec is not None else "read_only"
    return await ctx.journal.begin(step_no, step, side_effects=side_effects, key=key)
