"""The executor agent: carries out one instruction step with the tools, one action a turn.

Each turn the model sees the objective, the plan, the executed steps with their results,
the current step and its own earlier actions in this step with what they returned (Eino's
``ExecutorPrompt`` variables), and answers with one action that the policy boundary checks:
call an allowed tool, or finish with the step's result; a refused action is sent back
with the rule it broke, up to ``Budget.repairs`` times. Every call goes through the
gateway (allowlist, budgets, loop detection, argument schema, timeout, approvals) and is
traced and journaled like any tool step; an ``unsafe`` call commits its intent first. At
most ``max_turns`` turns per step (Eino's default: 20), then ``max_agent_turns:<step>``.

An agent made with ``decompose=True`` may also answer ``{"kind": "decompose", "reason":
...}`` (the ``tree`` strategy's leaves): :class:`DecompositionWanted` is raised for the
caller to split the task.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from taskdecomp.events import AgentTurn
from taskdecomp.models import ModelRequest, ModelResponse
from taskdecomp.plan import Step
from taskdecomp.prompts import render
from taskdecomp.repairs import ask_checked
from taskdecomp.runtime import RunContext
from taskdecomp.scheduler import call_tool
from taskdecomp.stops import StopRun, with_detail
from taskdecomp.strategies.replan.boundary import Call, Decompose, Finish, validate_action
from taskdecomp.strategies.replan.schemas import action_schema

Progress = Callable[[], Mapping[str, Any]]
"""The run's progress as the agent sees it: ``objective``, ``plan``, ``executed_steps``."""


class DecompositionWanted(Exception):
    """The agent answered ``decompose``: the step is too big to carry out as it is."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason or "the executor asked to split the task")
        self.reason = reason


class TurnLog(Protocol):
    """Where the agent keeps the turns of unfinished steps, so a resumed run goes on."""

    def turns(self, step_id: str) -> list[dict[str, Any]]:
        """The turns made so far in ``step_id`` (a live list the agent appends to)."""
        ...

    def finished(self, step_id: str) -> None:
        """``step_id`` is done: forget its turns."""
        ...

    def snapshot(self) -> Mapping[str, Any]:
        """The strategy state to store with a turn's checkpoint."""
        ...


class ExecutorAgent:
    """Carries out instruction steps for one run.

    Args:
        ctx: the run.
        progress: the run's progress, read at every turn.
        log: keeps each step's turns; a turn is stored with its call's checkpoint, so a
            resumed or approved run goes on after the last recorded turn.
        max_turns: most model turns per step.
        prompts: a directory whose ``executor.md`` replaces the packaged prompt.
        system: the system prompt itself, instead of ``executor.md`` (a workflow phase's).
        decompose: the agent may answer ``decompose`` (see the module docstring).
    """

    def __init__(
        self,
        ctx: RunContext,
        *,
        progress: Progress,
        log: TurnLog,
        max_turns: int,
        prompts: Path | None,
        system: str | None = None,
        decompose: bool = False,
    ) -> None:
        self._ctx = ctx
        self._progress = progress
        self._log = log
        self._max_turns = max_turns
        self._prompts = prompts
        self._system = system
        self._catalog = ctx.gateway.toolset.catalog(ctx.gateway.allow)
        self._decompose = decompose
        self._schema = action_schema(self._catalog, decompose=decompose)

    async def __call__(self, step_no: int, step: Step) -> Any:
        """Carry out ``step``; return its result.

        Raises:
            StopRun: ``invalid_action:<rule>``, ``max_agent_turns:<step>``, a model stop or
                a tool stop.
            DecompositionWanted: the agent answered ``decompose`` (when it may).
        """
        ctx = self._ctx
        turns = self._log.turns(step.id)
        for turn in range(len(turns) + 1, self._max_turns + 1):
            action = await ask_checked(ctx, self._request(step, turns, turn), self._check)
            if isinstance(action, Decompose):
                ctx.events.emit(_turn(ctx, step_no, step, turn, "decompose", None))
                self._log.finished(step.id)
                raise DecompositionWanted(action.reason)
            if isinstance(action, Finish):
                ctx.events.emit(_turn(ctx, step_no, step, turn, "finish", None))
                self._log.finished(step.id)
                return action.result
            ctx.events.emit(_turn(ctx, step_no, step, turn, "call", action.tool))
            await call_tool(
                step_no,
                step,
                ctx,
                tool=action.tool,
                args=action.args,
                call_id=f"{step.id}#{turn}",
                finishes=False,
                on_success=self._recorder(turns, action.tool, action.args),
            )
        raise StopRun(
            with_detail("max_agent_turns", step.id),
            message=f"the executor agent did not finish step {step.id!r} in "
            f"{self._max_turns} turns",
        )

    def _check(self, response: ModelResponse) -> Call | Finish | Decompose:
        """One action, through the policy boundary (a refused one is sent back to repair)."""
        return validate_action(
            response.text, allowed_tools=self._ctx.gateway.allow, decompose=self._decompose
        )

    def _recorder(
        self, turns: list[dict[str, Any]], tool: str, args: Mapping[str, Any]
    ) -> Callable[[Any], Mapping[str, Any]]:
        def record(result: Any) -> Mapping[str, Any]:
            turns.append({"call": {"tool": tool, "args": dict(args)}, "result": result})
            return self._log.snapshot()

        return record

    def _request(self, step: Step, turns: list[dict[str, Any]], turn: int) -> ModelRequest:
        payload = {
            **self._progress(),
            "step": {"id": step.id, "title": step.title, "instruction": step.instruction},
            "available_tools": self._catalog,
            "turns": turns,
            "turns_left": self._max_turns - turn + 1,
        }
        system = self._system or render("replan/executor", directory=self._prompts)
        return ModelRequest(
            phase="execute",
            messages=(
                {"role": "system", "content": system},
                {"role": "user", "content": json.dumps(payload, ensure_ascii=True)},
            ),
            json_schema=self._schema,
            schema_name="action",
            goal="\n".join(filter(None, (self._ctx.goal, step.title, step.instruction))),
            payload=payload,
        )


def _turn(
    ctx: RunContext, step_no: int, step: Step, turn: int, action: str, tool: str | None
) -> AgentTurn:
    return AgentTurn(
        run_id=ctx.run_id, step_no=step_no, step_id=step.id, turn=turn, action=action, tool=tool
    )
