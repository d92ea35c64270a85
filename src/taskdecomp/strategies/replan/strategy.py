"""The ``replan`` strategy as registered: its options, its phases, how a stored run goes on."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from taskdecomp.errors import ConfigError
from taskdecomp.plan import Plan
from taskdecomp.policy import plain_plan, validate_plan_action
from taskdecomp.runconfig import StoredConfig
from taskdecomp.stops import StopRun
from taskdecomp.store.base import StoredRun
from taskdecomp.strategies.base import Phases, ToolsArg
from taskdecomp.strategies.registry import Setup
from taskdecomp.strategies.replan.loop import (
    ReplanOptions,
    ReplanState,
    check_step_budget,
    replan_phases,
)
from taskdecomp.tools import Toolset

_KNOWN = frozenset(ReplanOptions.__dataclass_fields__)
_MOST = 1000
"""The most iterations or agent turns an option may ask for."""


class Replan:
    """Plan, run the ready steps, and ask a replanner after each wave until it answers."""

    name = "replan"
    summary = "plan, execute a wave, replan until the replanner answers (Eino planexecute)"
    starts_from_goal = True
    options_type = ReplanOptions
    local_only_options = frozenset({"prompts"})
    """A prompts directory is read from this machine's disk: never set by a remote client."""

    def options(self, data: Mapping[str, Any] | None) -> ReplanOptions:
        """The options from their JSON form (:meth:`ReplanOptions.to_dict`).

        Raises:
            ConfigError: a key is unknown or a value is out of range.
        """
        given = dict(data or {})
        unknown = sorted(set(given) - _KNOWN)
        if unknown:
            raise ConfigError(
                f"unknown option {unknown[0]!r} for strategy 'replan'; "
                f"known: {', '.join(sorted(_KNOWN))}"
            )
        for name in ("max_iterations", "max_agent_turns"):
            value = given.get(name, 1)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MOST:
                raise ConfigError(
                    f"strategy 'replan' option {name!r} takes a whole number from 1 to {_MOST}, "
                    f"not {value!r}"
                )
        if not isinstance(given.get("approve_plan", False), bool):
            raise ConfigError("strategy 'replan' option 'approve_plan' takes true or false")
        if not isinstance(given.get("prompts") or "", str | os.PathLike):
            raise ConfigError("strategy 'replan' option 'prompts' takes a directory")
        return ReplanOptions.from_dict(given)

    def encode(self, options: ReplanOptions) -> dict[str, Any]:
        """The JSON form stored with the run."""
        return options.to_dict()

    def start(self, setup: Setup, options: ReplanOptions) -> Phases:
        """Plan, then execute and replan."""
        return replan_phases(setup.budget, options, None)

    def resume(
        self, setup: Setup, options: ReplanOptions, stored: StoredRun, tools: ToolsArg | None
    ) -> tuple[Toolset | None, Phases]:
        """Go on in the middle of the loop, with its iteration count, turns and approvals."""
        return None, replan_phases(setup.budget, options, stored)

    def edit_plan(
        self, stored: StoredRun, config: StoredConfig, plan: Any
    ) -> tuple[StoredRun, Plan]:
        """``stored`` with ``plan`` (approved) as its pending plan, once it passes the boundary.

        Raises:
            ConfigError: the edited plan breaks a rule (named); nothing changes.
        """
        action = plain_plan(plan, taken=stored.finished_steps())
        action = {"kind": "plan", "steps": action} if isinstance(action, list) else action
        try:
            edited = validate_plan_action(
                action,
                max_plan_steps=config.budget.max_plan_steps,
                allowed_tools=config.allow,
                min_plan_steps=1,
                allow_instructions=True,
                finished=stored.finished_steps(),
            )
            check_step_budget(len(stored.finished_steps()), edited, config.budget)
        except StopRun as stop:
            detail = f": {stop.message}" if stop.message else ""
            raise ConfigError(
                f"the edited plan is refused ({stop.reason}{detail}); the run still waits for "
                "approval"
            ) from None
        state = ReplanState.from_stored(stored)
        state.accept(edited)
        state.gate = False
        continued = dataclasses.replace(
            stored,
            state={**stored.state, "replan": state.to_dict()},
            plan=state.effective(set(stored.finished_steps())),
        )
        return continued, edited


STRATEGY = Replan()
"""The ``replan`` strategy, as registered."""
