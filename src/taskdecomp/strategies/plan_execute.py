"""The ``plan_execute`` strategy (seed 000/001): plan once, validate, execute, combine.

1. The planner model gets the goal and the catalog of allowed tools and returns a JSON plan.
2. The policy boundary parses and validates it; an invalid plan never reaches a tool. It
   is sent back with the rule it broke, up to ``Budget.repairs`` times
   (:mod:`taskdecomp.repairs`), before the run stops with that rule.
3. The scheduler runs the steps through the gateway (in order, or as a DAG).
4. One combine call, without tools, writes the answer from the history.

The engine (:mod:`taskdecomp.engine`) runs it as it runs any registered strategy.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, replace
from typing import Any

from taskdecomp import answers
from taskdecomp.answertype import AnswerType
from taskdecomp.budget import Budget
from taskdecomp.models import Model, ModelRequest, ModelResponse
from taskdecomp.models.base import streams
from taskdecomp.models.schemas import plan_schema
from taskdecomp.plan import Plan, TaskId
from taskdecomp.policy import parse_model_json, validate_plan_action
from taskdecomp.prompts import render
from taskdecomp.repairs import ask_checked
from taskdecomp.runtime import RunContext
from taskdecomp.scheduler import execute_plan
from taskdecomp.stops import StopRun
from taskdecomp.store.base import StoredRun
from taskdecomp.strategies.base import (
    Outcome,
    Phases,
    ToolsArg,
)
from taskdecomp.strategies.registry import DataclassOptions, Setup
from taskdecomp.streaming import EarlySteps, PlanStream
from taskdecomp.tools import Toolset


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanExecuteOptions:
    """The ``plan_execute`` strategy has no options of its own: its budget says it all."""


class PlanExecute(DataclassOptions):
    """Plan once, validate, execute the steps (in order or as a DAG), combine once."""

    name = "plan_execute"
    summary = "plan once, execute the steps through the gateway, combine the answer"
    starts_from_goal = True
    types_answer = True
    options_type = PlanExecuteOptions

    def encode(self, options: Any) -> dict[str, Any] | None:
        """Nothing to store."""
        return None

    def start(self, setup: Setup, options: Any) -> Phases:
        """Plan, execute, combine."""
        return _phases(setup.budget, setup.combiner, None, setup.stream_plan, setup.answer)

    def resume(
        self, setup: Setup, options: Any, stored: StoredRun, tools: ToolsArg | None
    ) -> tuple[Toolset | None, Phases]:
        """Execute what the stored plan has left (planning first if it has none), combine."""
        return None, _phases(setup.budget, setup.combiner, stored, answer=setup.answer)


STRATEGY = PlanExecute()
"""The ``plan_execute`` strategy, as registered."""


def _phases(
    budget: Budget,
    combiner: Model | None,
    stored: StoredRun | None,
    stream_plan: bool | None = None,
    answer: AnswerType | None = None,
) -> Phases:
    async def plan_execute(ctx: RunContext, outcome: Outcome) -> None:
        done = stored.finished_steps() if stored is not None else frozenset()
        if stored is not None:
            outcome.plan = stored.plan
        running: dict[TaskId, asyncio.Task[None]] = {}
        if outcome.plan is None:
            outcome.plan, early, running = await _planned(ctx, outcome, budget, stream_plan)
            done = done | early
        await execute_plan(
            outcome.plan, ctx, max_parallel=budget.max_parallel, done=done, started=running
        )
        combined = await answers.combine(ctx, combiner, answer)
        outcome.answer, outcome.output = combined.text, combined.output

    return plan_execute


async def _planned(
    ctx: RunContext, outcome: Outcome, budget: Budget, stream_plan: bool | None
) -> tuple[Plan, frozenset[TaskId], dict[TaskId, asyncio.Task[None]]]:
    """Plan and store the plan; say which steps finished and which still run (streamed)."""
    stream = streams(ctx.model_for("plan")) if stream_plan is None else stream_plan
    early = EarlySteps(
        ctx,
        max_steps=min(budget.max_plan_steps, budget.max_execute_steps),
        max_parallel=budget.max_parallel,
    )
    if stream and ctx.journal is not None:
        ctx.journal.hold()  # the plan is stored before the steps that started early
    try:
        plan = outcome.plan = await _plan(ctx, outcome, budget, early if stream else None)
        ctx.plan_created(plan)
    finally:
        if ctx.journal is not None:
            ctx.journal.unhold()
    running = await early.handover()
    return plan, frozenset(early.finished), running


async def _plan(
    ctx: RunContext, outcome: Outcome, budget: Budget, early: EarlySteps | None
) -> Plan:
    allowed = ctx.gateway.allow
    catalog = ctx.gateway.toolset.catalog(allowed)
    payload = {  # the catalog first: a local model evaluates it once per toolset
        "available_tools": catalog,
        "max_plan_steps": budget.max_plan_steps,
        "goal": ctx.goal,
    }
    least, most = budget.min_plan_steps, budget.max_plan_steps
    request = ModelRequest(
        phase="plan",
        messages=(
            {"role": "system", "content": render("planner", min_steps=least, max_steps=most)},
            {"role": "user", "content": json.dumps(payload, ensure_ascii=True)},
        ),
        json_schema=plan_schema(catalog, min_steps=least, max_steps=most),
        schema_name="plan",
        goal=ctx.goal,
        payload=payload,
    )

    def check(response: ModelResponse) -> Plan:
        try:
            outcome.raw_plan = response.text
            outcome.raw_plan = action = parse_model_json(response.text)
            plan = validate_plan_action(
                action,
                max_plan_steps=budget.max_plan_steps,
                min_plan_steps=budget.min_plan_steps,
                allowed_tools=allowed,
            )
            if early is not None:
                early.check_kept(plan)
        except StopRun:
            if early is not None:
                early.close()  # a repaired plan starts nothing early
            raise
        return plan

    try:
        plan = await ask_checked(
            ctx, _streamed(request, early) if early is not None else request, check
        )
    except BaseException:
        if early is not None:
            await early.cancel()
        raise
    outcome.raw_plan = None
    return plan


def _streamed(request: ModelRequest, early: EarlySteps) -> ModelRequest:
    """``request``, with its answer's steps offered to ``early`` as they complete."""
    loop = asyncio.get_running_loop()
    stream = PlanStream()

    def on_text(piece: str) -> None:  # the provider may call it from another thread
        with contextlib.suppress(RuntimeError):  # the run is over and its loop closed
            loop.call_soon_threadsafe(lambda: early.offer(stream.feed(piece)))

    return replace(request, on_text=on_text)
