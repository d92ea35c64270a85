"""The ``replan`` strategy (seed 004, Eino's ``planexecute``): plan, execute, replan.

- :mod:`~taskdecomp.strategies.replan.loop`: the planner -> wave -> replanner loop.
- :mod:`~taskdecomp.strategies.replan.agent`: the executor agent for instruction steps.
- :mod:`~taskdecomp.strategies.replan.boundary`: the policy boundary for decisions and actions.
- :mod:`~taskdecomp.strategies.replan.schemas`: their JSON schemas (grammars on local models).

Run it with ``run(goal, ..., strategy="replan")`` or ``taskdecomp run --strategy replan``.
"""

from taskdecomp.strategies.replan.loop import (
    PROMPT_NAMES,
    ReplanOptions,
    ReplanState,
    check_step_budget,
    replan_phases,
)

__all__ = ["PROMPT_NAMES", "ReplanOptions", "ReplanState", "check_step_budget", "replan_phases"]
