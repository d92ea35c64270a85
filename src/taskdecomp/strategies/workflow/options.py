"""The ``workflow`` strategy's settings, stored with the run so a resume uses the same ones."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from taskdecomp.strategies.workflow.state import MAX_ADDED_TASKS
from taskdecomp.strategies.workflow.tasklist import MAX_TASKS, MIN_TASKS


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkflowOptions:
    """How a workflow runs."""

    max_iterations: int = 50
    """Most phase runs in the whole run (``max_iterations``)."""
    max_task_retries: int = 3
    """Spec-check failures a task may be retried after (then ``task_failed:<id>``)."""
    max_added_tasks: int = MAX_ADDED_TASKS
    """Tasks completeness verification may add in the run."""
    min_tasks: int = MIN_TASKS
    max_tasks: int = MAX_TASKS
    """How many tasks the decomposition's list may hold."""
    max_parallel: int = 1
    """Ready tasks with disjoint ``filesAllowed`` implemented at once, each by its own agent."""
    max_agent_turns: int = 30
    """Most model turns in one phase run (``max_agent_turns:<phase run>``)."""
    commit: bool = True
    """Commit each passed task's files, with its id, when the workspace is a git repository."""

    def __post_init__(self) -> None:
        for name in (
            "max_iterations",
            "max_agent_turns",
            "max_parallel",
            "min_tasks",
            "max_tasks",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)!r}")
        for name in ("max_task_retries", "max_added_tasks"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be at least 0, got {getattr(self, name)!r}")
        if self.min_tasks > self.max_tasks:
            raise ValueError(
                f"min_tasks ({self.min_tasks}) is more than max_tasks ({self.max_tasks})"
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkflowOptions:
        """Undo :meth:`to_dict` (unknown keys are ignored, missing ones take defaults)."""
        names = set(cls.__dataclass_fields__)
        return cls(**{key: value for key, value in data.items() if key in names})
