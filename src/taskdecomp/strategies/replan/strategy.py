"""The ``replan`` strategy as registered: its options, its phases, how a stored run goes on."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from taskdecomp.durable import StoredConfig
from taskdecomp.errors import ConfigError
from taskdecomp.plan import Plan
from taskdecomp.policy import validate_plan_action
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
        unknown = sorted(set(data or {}) - _KNOWN)
        if unknown:
            raise ConfigError(
                f"unknown option {unknown[0]!r} for strategy 'replan'; "
                f"known: {', '.join(sorted(_KNOWN))}"
            )
        try:
            return ReplanOptions.from_dict(data or {})
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"strategy 'replan': {exc}") from None

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
        action = {"kind": "plan", "steps": plan} if isinstance(plan, list) else plan
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
