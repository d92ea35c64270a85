"""Streamed plans: read-only steps that start while the planner is still writing.

A provider that streams (``ModelRequest.on_text``) hands over the plan piece by piece.
:class:`PlanStream` finds each step once its JSON object is closed (a later step has begun),
and :class:`EarlySteps` starts it at once when the policy checks that can be decided for one
step pass (the step's keys, id, title and allowed tool, as :func:`policy.validate_step
<taskdecomp.policy.validate_step>` checks them; dependencies on steps already seen), its tool
is ``read_only`` and needs no approval, it has no ``$ref`` arguments, and what it waits for
has finished. A step without ``depends_on`` waits for every step before it, as in a plan
that runs in order.

Nothing else changes: the whole answer is still parsed strictly and validated by every rule
when it is complete, and a plan that then fails stops the run with the same
``invalid_plan:<rule>`` as an unstreamed one. Only ``read_only`` steps ever start early, so
a plan that turns out invalid has called nothing that could not safely run again. When the
invalid plan is sent back to be repaired, nothing more starts early; the steps that did
started keep running, and the repaired plan must keep them where they were
(:meth:`EarlySteps.check_kept`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import json
from typing import Any

import jiter

from taskdecomp.plan import Plan, Step, TaskId
from taskdecomp.policy import validate_step
from taskdecomp.refs import has_refs
from taskdecomp.runtime import RunContext
from taskdecomp.scheduler import run_step
from taskdecomp.stops import StopRun, invalid_plan


class PlanStream:
    """Finds the complete steps of a plan JSON text that is still being written."""

    def __init__(self) -> None:
        self._text = ""
        self._given = 0

    def feed(self, piece: str) -> list[Any]:
        """Add ``piece``; return the raw steps completed since the last call, in order."""
        self._text += piece
        if "}" not in piece and "{" not in piece:
            return []  # nothing that could close a step
        closed = self._closed_steps()
        new = closed[self._given :]
        self._given = max(self._given, len(closed))
        return new

    def _closed_steps(self) -> list[Any]:
        """The steps whose objects are closed.

        All of them when the text, or the text with the array and the plan closed, is
        whole JSON; else all but the last, which may still grow.
        """
        text = self._text.rstrip()
        if text.endswith("}"):
            for candidate in (text, text + "]}"):
                whole = _plan_steps(candidate, partial=False)
                if whole is not None:
                    return whole
        steps = _plan_steps(text, partial=True)
        return steps[:-1] if steps else []


def _does(step: Step) -> tuple[object, ...]:
    """What a step does: its id, tool, arguments and dependencies (not its title)."""
    return (step.id, step.tool, json.dumps(dict(step.args), sort_keys=True), step.depends_on)


def _plan_steps(text: str, *, partial: bool) -> list[Any] | None:
    """The ``steps`` of a plan JSON text (a prefix of one, with ``partial``), or ``None``."""
    try:
        value = jiter.from_json(
            text.encode(), partial_mode=partial, allow_inf_nan=False, catch_duplicate_keys=True
        )
    except ValueError:
        return None  # the strict parse of the whole answer says what is wrong
    steps = value.get("steps") if isinstance(value, dict) else None
    if value.get("kind") != "plan" or not isinstance(steps, list):
        return None
    return steps


class EarlySteps:
    """Starts the steps of a streamed plan that may run before the plan is complete.

    Args:
        ctx: the run.
        max_steps: steps past this position never start early (the plan or the run's
            step budget would refuse them).
        max_parallel: most steps running at once.

    A step starts in a copy of the context the object was made in (the run's), not in the
    one of the model call whose text started it: its spans are the run's children.
    """

    def __init__(self, ctx: RunContext, *, max_steps: int, max_parallel: int) -> None:
        self._ctx = ctx
        self._max_steps = max_steps
        self._max_parallel = max_parallel
        self._seen: list[Step] = []
        self._ids: set[str] = set()
        self._tasks: dict[TaskId, asyncio.Task[None]] = {}
        self.finished: set[TaskId] = set()
        """Steps that started early and finished."""
        self._closed = False
        self._context = contextvars.copy_context()

    def offer(self, raw_steps: list[Any]) -> None:
        """Take steps whose JSON is complete, and start those that may start."""
        for raw in raw_steps:
            if self._closed or len(self._seen) >= self._max_steps:
                self._closed = True
                return
            try:
                step = validate_step(raw, len(self._seen) + 1, self._ids, self._ctx.gateway.allow)
            except StopRun:
                self._closed = True  # the whole plan's validation reports it
                return
            self._ids.add(step.id)
            self._seen.append(step)
        self._start_ready()

    def close(self) -> None:
        """Start nothing more."""
        self._closed = True

    def check_kept(self, plan: Plan) -> None:
        """Refuse ``plan`` unless it keeps every step that started early, where it was.

        A refused answer's steps may already have started (they are ``read_only``); a
        repaired plan must keep them unchanged, at the same positions, since their results
        are on record.

        Raises:
            StopRun: ``invalid_plan:started_step_changed``, naming the step and its place.
        """
        for step_no, step in enumerate(self._seen, start=1):
            if step.id not in self._tasks:
                continue
            kept = plan.steps[step_no - 1] if step_no <= len(plan.steps) else None
            if kept is None or _does(kept) != _does(step):
                raise StopRun(
                    invalid_plan("started_step_changed"),
                    message=f"step {step_no} ({step.id!r}, tool {step.tool!r}, args "
                    f"{json.dumps(dict(step.args), sort_keys=True)}) has already started; keep "
                    f"it unchanged as step {step_no}",
                )

    async def handover(self) -> dict[TaskId, asyncio.Task[None]]:
        """Start nothing more; return the steps still running, for the scheduler to await.

        Raises:
            StopRun: a step that started early already stopped the run (the first in plan
                order); the others were cancelled.
        """
        self.close()
        for task in self._tasks.values():
            if task.done() and not task.cancelled() and task.exception() is not None:
                await self.cancel()
                raise task.exception()  # type: ignore[misc]  # checked just above
        for step_id, task in self._tasks.items():
            if task.done() and not task.cancelled():  # its done callback may be still to run
                self.finished.add(step_id)
        return {step_id: task for step_id, task in self._tasks.items() if not task.done()}

    async def cancel(self) -> None:
        """Cancel the steps still running and wait for them (the plan was refused)."""
        self.close()
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError, StopRun):
                await task

    def _start_ready(self) -> None:
        running = sum(1 for task in self._tasks.values() if not task.done())
        for step_no, step in enumerate(self._seen, start=1):
            if self._closed or running >= self._max_parallel:
                return
            if step.id in self._tasks or not self._may_start(step_no, step):
                continue
            task = asyncio.create_task(
                run_step(step_no, step, self._ctx), context=self._context.copy()
            )
            task.add_done_callback(functools.partial(self._done, step_id=step.id))
            self._tasks[step.id] = task
            running += 1

    def _may_start(self, step_no: int, step: Step) -> bool:
        spec = self._ctx.gateway.toolset.get(step.tool_name)
        if spec is None or spec.side_effects != "read_only" or spec.needs_approval:
            return False
        if has_refs(step.args):
            return False
        if step.depends_on is None:  # runs in order: after every step before it
            return all(before.id in self.finished for before in self._seen[: step_no - 1])
        return all(dep in self.finished for dep in step.depends_on)

    def _done(self, task: asyncio.Task[None], step_id: TaskId) -> None:
        if task.cancelled() or task.exception() is not None:
            self._closed = True  # the run stops: settle() reports it
            return
        self.finished.add(step_id)
        self._start_ready()
