"""The plan -> execute -> replan loop (Eino's ``planexecute``), on the shared engine.

1. The planner writes a plan of tool steps and instruction steps (validated like any plan;
   Eino's plain ``{"steps": ["do x", ...]}`` is taken as instruction steps).
2. The steps that are ready run together: a **wave** (for a plan without ``depends_on``, one
   step: exactly Eino's loop). Tool steps go straight to the gateway, with no model call;
   instruction steps go to the executor agent.
3. The replanner sees the objective, the plan and every executed step with its result, and
   answers ``respond`` (the run's answer) or a revised plan of the remaining steps, which
   passes the policy boundary like a first plan. Repeat from 2, at most
   ``max_iterations`` rounds.

So a run that needs no revision costs two model calls in all, whatever its width. With
``approve_plan`` the run pauses (``awaiting_approval``) before a plan runs, and before a
revision that changes the remaining steps; an approval is never asked twice for the same
plan. A plan, a revision or an action that the policy boundary refuses is sent back with
the rule it broke, up to ``Budget.repairs`` times (:mod:`taskdecomp.repairs`). The loop's
state is checkpointed after every replanner decision, so a resumed run
continues where it was.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from taskdecomp import stops
from taskdecomp.approvals import ApprovalRequest
from taskdecomp.budget import Budget
from taskdecomp.errors import CorruptRecordError
from taskdecomp.events import PlanCreated, PlanRevised, ReplanDecided
from taskdecomp.models import ModelRequest, ModelResponse
from taskdecomp.models.schemas import plan_schema
from taskdecomp.plan import Plan, Step, TaskId
from taskdecomp.policy import parse_model_json, plain_plan, validate_plan_action
from taskdecomp.prompts import render
from taskdecomp.repairs import ask_checked
from taskdecomp.runtime import RunContext
from taskdecomp.scheduler import execute_wave
from taskdecomp.stops import StopRun
from taskdecomp.store.base import StoredRun
from taskdecomp.strategies.base import Outcome, Phases
from taskdecomp.strategies.replan.agent import ExecutorAgent
from taskdecomp.strategies.replan.boundary import Respond, validate_decision
from taskdecomp.strategies.replan.schemas import decision_schema

PROMPT_NAMES = ("planner", "executor", "replanner")
"""The prompts a ``--prompts`` directory may replace."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplanOptions:
    """The ``replan`` strategy's settings."""

    max_iterations: int = 10
    """Most execute/replan rounds (Eino's ``MaxIterations``)."""
    max_agent_turns: int = 20
    """Most executor agent turns per instruction step (Eino's executor default)."""
    approve_plan: bool = False
    """Pause for a human before a plan runs, and before a revision that changes it."""
    prompts: Path | None = None
    """A directory whose ``planner.md``, ``executor.md``, ``replanner.md`` replace ours."""

    def __post_init__(self) -> None:
        for name in ("max_iterations", "max_agent_turns"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)!r}")

    def to_dict(self) -> dict[str, Any]:
        """JSON form, stored with the run."""
        return {
            "max_iterations": self.max_iterations,
            "max_agent_turns": self.max_agent_turns,
            "approve_plan": self.approve_plan,
            "prompts": str(self.prompts.resolve()) if self.prompts is not None else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReplanOptions:
        """Undo :meth:`to_dict`."""
        prompts = data.get("prompts")
        return cls(
            max_iterations=int(data.get("max_iterations", 10)),
            max_agent_turns=int(data.get("max_agent_turns", 20)),
            approve_plan=bool(data.get("approve_plan", False)),
            prompts=Path(prompts) if prompts else None,
        )


@dataclass(kw_only=True)
class ReplanState:
    """Where the loop is: the current plan, every step's number, the round."""

    remaining: Plan | None = None
    """The current plan (its finished steps included until a revision drops them)."""
    steps: dict[TaskId, Step] = field(default_factory=dict)
    """Every step ever accepted, by id, in the order they were numbered."""
    iteration: int = 0
    """Execute/replan rounds started."""
    gate: bool = False
    """The current plan waits for a human before it runs."""
    agent_turns: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """The executor agent's turns in unfinished instruction steps, by step id."""

    def turns(self, step_id: str) -> list[dict[str, Any]]:
        """The agent's turns so far in ``step_id``."""
        return self.agent_turns.setdefault(step_id, [])

    def finished(self, step_id: str) -> None:
        """The agent finished ``step_id``."""
        self.agent_turns.pop(step_id, None)

    def snapshot(self) -> Mapping[str, Any]:
        """What a checkpoint stores as the strategy state."""
        return {"replan": self.to_dict()}

    def accept(self, plan: Plan) -> None:
        """Make ``plan`` the current plan, numbering its new steps after the others."""
        for step in plan.steps:
            self.steps[step.id] = step
        self.remaining = plan

    def numbers(self) -> dict[TaskId, int]:
        """Each step's number in the run, from 1."""
        return {step_id: no for no, step_id in enumerate(self.steps, start=1)}

    def effective(self, done: set[TaskId]) -> Plan:
        """The run's plan: the finished steps, then the current plan's others, by number."""
        current = {step.id for step in self.remaining.steps} if self.remaining else set()
        return Plan(steps=tuple(s for i, s in self.steps.items() if i in done or i in current))

    def to_dict(self) -> dict[str, Any]:
        """JSON form, stored with every decision."""
        return {
            "remaining": self.remaining.to_list() if self.remaining is not None else None,
            "steps": [step.to_dict() for step in self.steps.values()],
            "iteration": self.iteration,
            "gate": self.gate,
            "agent_turns": self.agent_turns,
        }

    @classmethod
    def from_stored(cls, stored: StoredRun) -> ReplanState:
        """The state a stored run was checkpointed with (empty before its first plan)."""
        data = stored.state.get("replan")
        if not isinstance(data, dict):
            return cls()
        steps = [_step(raw) for raw in data.get("steps", [])]
        remaining = data.get("remaining")
        return cls(
            remaining=Plan(steps=tuple(_step(raw) for raw in remaining))
            if isinstance(remaining, list)
            else None,
            steps={step.id: step for step in steps},
            iteration=int(data.get("iteration", 0)),
            gate=bool(data.get("gate", False)),
            agent_turns=_turns(data.get("agent_turns")),
        )


_STEP = TypeAdapter(Step)
_TURNS = TypeAdapter(dict[str, list[dict[str, Any]]])


def _turns(raw: Any) -> dict[str, list[dict[str, Any]]]:
    try:
        return _TURNS.validate_python(raw or {})
    except ValidationError as exc:
        raise CorruptRecordError(
            "the stored replan state's agent turns do not decode; refusing to use them"
        ) from exc


def _step(raw: Any) -> Step:
    try:
        return _STEP.validate_python(raw)
    except ValidationError as exc:
        problem = str(exc).strip().splitlines()[0]
        raise CorruptRecordError(
            f"the stored replan state has a step that does not decode ({problem}); "
            "refusing to use it"
        ) from exc


def check_step_budget(done: int, plan: Plan, budget: Budget) -> None:
    """Refuse a plan that would take the run past ``max_execute_steps``.

    Raises:
        StopRun: ``max_execute_steps``; nothing of the plan runs.
    """
    limit = budget.max_execute_steps
    if done + len(plan.steps) > limit:
        raise StopRun(
            stops.MAX_EXECUTE_STEPS,
            message=f"{done} steps ran and the plan adds {len(plan.steps)}; the budget allows "
            f"{limit}",
        )


def signature(plan: Plan) -> list[tuple[Any, ...]]:
    """What a plan does, step by step, without the names it gives things.

    Ids and titles are left out and dependencies are made positional, so a replanner that
    keeps the remaining steps under new ids (a grammar that numbers ids makes it do so) does
    not count as changing the plan.
    """
    position = {step.id: n for n, step in enumerate(plan.steps)}
    return [
        (
            step.tool,
            json.dumps(dict(step.args), sort_keys=True),
            step.instruction,
            step.depends_on is None,
            tuple(sorted(str(position.get(dep, dep)) for dep in step.depends_on or ())),
        )
        for step in plan.steps
    ]


def replan_phases(budget: Budget, options: ReplanOptions, stored: StoredRun | None) -> Phases:
    """The ``replan`` strategy's phases, for a new run or a stored one."""

    async def phases(ctx: RunContext, outcome: Outcome) -> None:
        state = ReplanState.from_stored(stored) if stored is not None else ReplanState()
        await _Loop(ctx, outcome, budget, options, state).run()

    return phases


class _Loop:
    def __init__(
        self,
        ctx: RunContext,
        outcome: Outcome,
        budget: Budget,
        options: ReplanOptions,
        state: ReplanState,
    ) -> None:
        self.ctx, self.outcome, self.budget = ctx, outcome, budget
        self.options, self.state = options, state
        self.catalog = ctx.gateway.toolset.catalog(ctx.gateway.allow)
        ctx.agent = ExecutorAgent(
            ctx,
            progress=self._progress,
            log=state,
            max_turns=options.max_agent_turns,
            prompts=options.prompts,
        )

    async def run(self) -> None:
        state = self.state
        if state.remaining is None:
            self._accept(await self._first_plan(), iteration=0, changed=True)
        while True:
            self._gate()
            if self._pending():
                if state.iteration >= self.options.max_iterations:
                    raise StopRun(
                        stops.MAX_ITERATIONS,
                        message=f"{self.options.max_iterations} execute/replan rounds "
                        "ran without an answer",
                    )
                state.iteration += 1
                await self._wave()
            decision = await self._decide()
            if isinstance(decision, Respond):
                self.outcome.answer = decision.response
                self._save()
                return
            assert state.remaining is not None
            changed = signature(decision) != signature(self._pending_plan())
            self._accept(decision, iteration=state.iteration, changed=changed)

    def _done(self) -> set[TaskId]:
        return {entry.plan_step.id for entry in self.ctx.history}

    def _pending(self) -> list[Step]:
        done = self._done()
        remaining = self.state.remaining
        return [s for s in remaining.steps if s.id not in done] if remaining else []

    def _pending_plan(self) -> Plan:
        return Plan(steps=tuple(self._pending()))

    def _accept(self, plan: Plan, *, iteration: int, changed: bool) -> None:
        """Make ``plan`` current: check the step budget, number it, store it, maybe gate it."""
        check_step_budget(len(self._done()), plan, self.budget)
        self.state.accept(plan)
        self.state.gate = self.options.approve_plan and changed
        ctx = self.ctx
        if iteration == 0:
            ctx.events.emit(PlanCreated(run_id=ctx.run_id, plan=plan))
        else:
            ctx.events.emit(
                PlanRevised(run_id=ctx.run_id, iteration=iteration, plan=plan, changed=changed)
            )
        self._save()

    def _gate(self) -> None:
        if not self.state.gate:
            return
        pending = self._pending_plan()
        self.ctx.approvals.require(ApprovalRequest.for_plan(pending, redactor=self.ctx.redactor))
        self.state.gate = False
        self._save()

    def _save(self) -> None:
        self.outcome.plan = self.state.effective(self._done())
        if self.ctx.journal is not None:
            self.ctx.journal.state_saved(
                self.outcome.plan,
                self.state.snapshot(),
                approvals=self.ctx.approvals.to_dict(),
            )

    async def _wave(self) -> None:
        assert self.state.remaining is not None
        await execute_wave(
            self.state.remaining,
            self.ctx,
            done=self._done(),
            numbers=self.state.numbers(),
            max_parallel=self.budget.max_parallel,
        )

    async def _first_plan(self) -> Plan:
        ctx, budget = self.ctx, self.budget
        payload = {  # the catalog first: a local model evaluates it once per toolset
            "available_tools": self.catalog,
            "max_plan_steps": budget.max_plan_steps,
            "objective": ctx.goal,
        }
        system = render(
            "replan/planner", directory=self.options.prompts, max_steps=budget.max_plan_steps
        )
        schema = plan_schema(
            self.catalog, min_steps=1, max_steps=budget.max_plan_steps, instructions=True
        )
        request = _request("plan", system, payload, schema, goal=ctx.goal)
        plan = await ask_checked(ctx, request, self._check_plan)
        self.outcome.raw_plan = None
        return plan

    def _check_plan(self, response: ModelResponse) -> Plan:
        """The first plan, through the policy boundary (plain step strings accepted)."""
        self.outcome.raw_plan = response.text
        action = parse_model_json(response.text)
        self.outcome.raw_plan = action
        return validate_plan_action(
            plain_plan(action),
            max_plan_steps=self.budget.max_plan_steps,
            allowed_tools=self.ctx.gateway.allow,
            min_plan_steps=1,
            allow_instructions=True,
        )

    async def _decide(self) -> Respond | Plan:
        ctx = self.ctx
        done = self._done()
        payload = {**self._progress(), "remaining_steps": self._pending_plan().to_list()}
        payload["available_tools"] = self.catalog
        system = render("replan/replanner", directory=self.options.prompts)
        numbers = self.state.numbers()
        finished = sorted(done, key=numbers.__getitem__)
        first = len(self.state.steps) + 1
        schema = decision_schema(
            self.catalog,
            max_steps=self.budget.max_plan_steps,
            first=first,
            finished=finished,
        )

        def check(response: ModelResponse) -> Respond | Plan:
            self.outcome.raw_plan = response.text
            return validate_decision(
                response.text,
                allowed_tools=ctx.gateway.allow,
                max_plan_steps=self.budget.max_plan_steps,
                finished=done,
                first=first,
                taken=self.state.steps,
            )

        request = _request("replan", system, payload, schema, goal=ctx.goal)
        decision = await ask_checked(ctx, request, check)
        self.outcome.raw_plan = None
        ctx.events.emit(
            ReplanDecided(
                run_id=ctx.run_id,
                iteration=self.state.iteration,
                kind="respond" if isinstance(decision, Respond) else "plan",
            )
        )
        return decision

    def _progress(self) -> dict[str, Any]:
        history = sorted(self.ctx.history, key=lambda entry: entry.step_no)
        executed = [{**entry.plan_step.to_dict(), "result": entry.observation} for entry in history]
        return {
            "objective": self.ctx.goal,
            "plan": self.state.effective(self._done()).to_list(),
            "executed_steps": executed,
        }


def _request(
    phase: Any, system: str, payload: Mapping[str, Any], schema: dict[str, Any], *, goal: str
) -> ModelRequest:
    return ModelRequest(
        phase=phase,
        messages=(
            {"role": "system", "content": system},
            {"role": "user", "content": json.dumps(payload, ensure_ascii=True)},
        ),
        json_schema=schema,
        schema_name="plan" if phase == "plan" else "decision",
        goal=goal,
        payload=payload,
    )
