"""What every run-based strategy shares: building a run, its deadline, and how it ends.

A strategy supplies its *phases* (an async function that plans and executes, filling an
:class:`Outcome`); :func:`execute` runs them under the run's deadline, turns every stop into
an outcome (cancellation included) and :func:`finish` makes the one
:class:`~taskdecomp.run.RunResult`, emits ``RunStopped`` and stores it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taskdecomp import stops
from taskdecomp.budget import Budget, Meter, Usage
from taskdecomp.durable import DEFAULT_DURABILITY, Durability, Journal
from taskdecomp.events import ApprovalRequested, EventBus, RunStarted, RunStopped, Subscriber
from taskdecomp.gateway import ToolGateway
from taskdecomp.models import Model
from taskdecomp.plan import Plan
from taskdecomp.redact import Redactor
from taskdecomp.run import RunId, RunResult, RunStatus
from taskdecomp.runtime import RunContext
from taskdecomp.stops import LlmPhase, StopReason, StopRun
from taskdecomp.store.base import Lease, Store, StoredRun
from taskdecomp.tools import TOOL_OPTIONS_ATTR, Toolset, ToolSpec, load_toolset

ToolsArg = Toolset | str | Path | Iterable[Callable[..., Any] | ToolSpec]
"""A toolset, a path or module name to load one from, or a list of functions."""

Phases = Callable[[RunContext, "Outcome"], Awaitable[None]]
"""A strategy's work: plan, execute, combine; it records how far it got in the outcome."""


def as_toolset(tools: ToolsArg) -> Toolset:
    """Accept any :data:`ToolsArg` and return a :class:`~taskdecomp.tools.Toolset`.

    A list of plain functions and :class:`~taskdecomp.tools.ToolSpec` objects is made into
    a toolset once (:data:`TOOLSETS_KEPT` lists at most): building the argument models and
    schemas took a quarter of a short run's own time when every run did it again.
    """
    if isinstance(tools, Toolset):
        return tools
    if isinstance(tools, str | Path):
        return load_toolset(tools)
    items = tuple(tools)
    key = _toolset_key(items)
    if key is None:
        return Toolset.from_functions(items)
    made = _TOOLSETS.pop(key, None)
    if made is None:
        made = Toolset.from_functions(items)
        if len(_TOOLSETS) >= TOOLSETS_KEPT:
            oldest = next(iter(_TOOLSETS), None)  # the least recently used
            if oldest is not None:  # another thread may have emptied it meanwhile
                _TOOLSETS.pop(oldest, None)
    _TOOLSETS[key] = made
    return made


TOOLSETS_KEPT = 64
"""How many toolsets made from lists of functions :func:`as_toolset` keeps."""

_TOOLSETS: dict[tuple[Any, ...], Toolset] = {}
"""Toolsets made from lists of functions, by :func:`_toolset_key`, least recently used first."""


def _toolset_key(items: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """What a toolset made of ``items`` depends on; ``None`` when it may change between runs.

    A function's :func:`~taskdecomp.tools.tool` options are part of it (a function marked
    again makes a new toolset), and so are the parts of it a toolset reads that can be
    changed in place: its name, docstring, defaults and annotations (their ``repr`` too:
    ``(1, 2)`` equals ``(1.0, 2.0)``). Another framework's tool, an MCP server or a toolset
    object is asked afresh each time.
    """
    key: list[Any] = []
    for item in items:
        if inspect.isfunction(item):
            key.append(_function_key(item))
        elif isinstance(item, ToolSpec) and item.input_schema is None:
            key.append(item)
        else:
            return None
    try:
        hash(made := tuple(key))
    except Exception:  # an unhashable default, a repr that fails
        return None
    return made


def _function_key(fn: Any) -> tuple[Any, ...]:
    """What of function ``fn`` a toolset made of it depends on (see :func:`_toolset_key`)."""
    defaults, kwdefaults = fn.__defaults__, fn.__kwdefaults__
    return (
        fn,
        getattr(fn, TOOL_OPTIONS_ATTR, None),
        fn.__name__,
        fn.__doc__,
        defaults,
        repr(defaults),
        tuple(kwdefaults.items()) if kwdefaults else None,
        repr(kwdefaults),
        repr(fn.__annotations__),
    )


@dataclass(kw_only=True)
class Outcome:
    """How far a run got; turned into the result at the end."""

    reason: StopReason = stops.SUCCESS
    plan: Plan | None = None
    raw_plan: Any = None
    answer: str | None = None
    output: Any = None
    """The typed answer, when the run has an answer type."""
    llm_phase: LlmPhase | None = None
    message: str | None = None

    def stop(self, signal: StopRun) -> None:
        """Record the stop ``signal`` carries."""
        self.reason = signal.reason
        self.llm_phase = signal.llm_phase
        self.message = signal.message or None


def status_of(reason: StopReason) -> RunStatus:
    """``ok`` for success, ``paused`` while waiting for a human, else ``stopped``."""
    if reason == stops.SUCCESS:
        return "ok"
    return "paused" if reason == stops.AWAITING_APPROVAL else "stopped"


def build_context(
    goal: str,
    toolset: Toolset,
    model: Model,
    allow: Iterable[str] | None,
    budget: Budget,
    on_event: Subscriber | None,
    run_id: RunId,
) -> RunContext:
    """A fresh :class:`~taskdecomp.runtime.RunContext` for one run (or one resume).

    The secrets it redacts are read from the environment here, once for the run.
    """
    meter = Meter(budget=budget)
    redactor = Redactor.from_environ()
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
        events=EventBus([on_event] if on_event else [], redactor=redactor),
        redactor=redactor,
    )


def attach_journal(
    ctx: RunContext,
    store: Store,
    lease: Lease,
    *,
    segment: int,
    started: float,
    durability: Durability = DEFAULT_DURABILITY,
) -> Journal:
    """Checkpoint ``ctx``'s run to ``store`` from now on, fenced by ``lease``."""

    def usage() -> Usage:
        return ctx.meter.snapshot(seconds=ctx.clock() - started)

    journal = Journal(
        store, lease, segment=segment, usage=usage, durability=durability, redactor=ctx.redactor
    )
    ctx.events.subscribe(journal)
    ctx.journal = journal
    return journal


def restore(ctx: RunContext, stored: StoredRun) -> None:
    """Put a stored run's trace, history, spending and approvals back into ``ctx``."""
    ctx.trace.extend(stored.trace)
    ctx.history.extend(stored.history)
    meter, usage = ctx.meter, stored.usage
    meter.llm_calls, meter.cost_usd = usage.llm_calls, usage.cost_usd
    meter.tokens_in, meter.tokens_out = usage.tokens_in, usage.tokens_out
    meter.repairs, meter.estimated = usage.repairs, usage.estimated
    calls = [entry for entry in stored.trace if entry.ok and entry.args_hash]
    meter.tool_calls = len(calls)
    for entry in calls:  # run-wide, and in the step's own scope (a tree leaf, a phase run)
        ctx.gateway.remember_call(entry.tool, entry.args_hash)
        ctx.gateway.remember_call(entry.tool, entry.args_hash, scope=entry.step_id)
    ctx.approvals.approved.update(stored.approvals.get("approved", ()))


async def execute(
    ctx: RunContext, outcome: Outcome, budget: Budget, phases: Phases, *, started: float
) -> RunResult:
    """Run ``phases`` under the deadline and end the run with exactly one result.

    A new stored run's row is committed first (:meth:`Journal.stored`).
    """
    try:
        if ctx.journal is not None:
            await ctx.journal.stored()
        ctx.events.emit(RunStarted(run_id=ctx.run_id, goal=ctx.goal))
        await _under_deadline(ctx, outcome, budget, phases)
    except asyncio.CancelledError:
        outcome.reason = stops.CANCELLED
        finish(ctx, outcome, started)
        raise
    finally:
        ctx.gateway.close()
    result, journal = _ending(ctx, outcome, started)
    if journal is None:
        return result
    return await journal.ended(result, approvals=ctx.approvals.to_dict())


async def _under_deadline(
    ctx: RunContext, outcome: Outcome, budget: Budget, phases: Phases
) -> None:
    deadline = asyncio.timeout(budget.max_seconds)
    try:
        async with deadline:
            await phases(ctx, outcome)
    except StopRun as signal:
        outcome.stop(signal)
        outcome.message = _skipped_note(ctx.gateway.toolset, outcome)
    except TimeoutError:
        if not deadline.expired():
            raise
        outcome.reason = stops.MAX_SECONDS
        outcome.message = f"the run passed its {budget.max_seconds}s deadline"


def _skipped_note(toolset: Toolset, outcome: Outcome) -> str | None:
    """The stop's message, plus why, when it names a function the toolset skipped."""
    family, _, name = outcome.reason.rpartition(":")
    why = toolset.skipped.get(name)
    if why is None or "tool" not in family:
        return outcome.message
    note = f"{name!r} is a function in the toolset but not a tool: {why}"
    return f"{outcome.message}; {note}" if outcome.message else note


def finish(ctx: RunContext, outcome: Outcome, started: float) -> RunResult:
    """The run's result: emitted as ``RunStopped`` and stored when the run has a journal.

    Its secrets are replaced (:mod:`taskdecomp.redact`): the caller gets what was stored.
    """
    result, journal = _ending(ctx, outcome, started)
    if journal is None:
        return result
    return journal.finished(result, approvals=ctx.approvals.to_dict())


def _ending(ctx: RunContext, outcome: Outcome, started: float) -> tuple[RunResult, Journal | None]:
    """The run's result, emitted as ``RunStopped``, and the journal that must store it."""
    pending = ctx.approvals.pending if outcome.reason == stops.AWAITING_APPROVAL else None
    result = RunResult(
        run_id=ctx.run_id,
        status=status_of(outcome.reason),
        stop_reason=outcome.reason,
        answer=outcome.answer if outcome.reason == stops.SUCCESS else None,
        output=outcome.output if outcome.reason == stops.SUCCESS else None,
        plan=outcome.plan,
        raw_plan=outcome.raw_plan,
        llm_phase=outcome.llm_phase,
        message=outcome.message,
        trace=tuple(ctx.trace),
        history=tuple(sorted(ctx.history, key=lambda entry: entry.step_no)),
        usage=ctx.meter.snapshot(seconds=ctx.clock() - started),
        approval=pending.to_dict() if pending is not None else None,
    )
    result = ctx.redactor.value(result)
    if pending is not None:
        ctx.events.emit(ApprovalRequested(run_id=ctx.run_id, request=pending))
    ctx.events.emit(RunStopped(run_id=ctx.run_id, result=result))
    return result, ctx.journal  # lease_lost if another process took the run meanwhile
