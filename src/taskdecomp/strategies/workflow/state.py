"""A workflow run's state, and the state tools' checks: agents never edit state files.

The state is the current phase, the status fields the guards read, the task list, each
task's attempts and last feedback, and how many tasks were added after the decomposition.
An agent changes it only through four state tools, each checked here like any other model
output and refused with a message it can act on (:class:`StateRefused`):

- ``set_status``: only fields the workflow's guards read, with JSON scalar values;
- ``put_tasks``: the whole list, once, validated like a plan (:func:`.parse_tasks`);
- ``update_task``: a task's status (``in_progress``, ``passed``, ``failed``) and feedback
  (the runner counts the failed checks, one per check);
- ``add_tasks``: new tasks after the decomposition, at most ``max_added_tasks`` in a run,
  with new ids and dependencies on tasks that exist.

Every change returns a new :class:`WorkflowState`; the runner checkpoints it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from taskdecomp.strategies.workflow.tasklist import (
    MAX_TASKS,
    MIN_TASKS,
    TaskList,
    TaskListError,
    TaskStatus,
    parse_new_tasks,
    parse_tasks,
)

MAX_ADDED_TASKS = 5
"""Tasks completeness verification may add in one run (the default)."""
MAX_FEEDBACK_CHARS = 8_000

_SETTABLE: frozenset[TaskStatus] = frozenset({"in_progress", "passed", "failed"})


class StateRefused(ValueError):
    """A state tool call is refused; the message is for the agent."""


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkflowState:
    """Where a workflow run is."""

    phase: str
    status: Mapping[str, Any] = field(default_factory=dict)
    """The fields the guards read (``status.<name>``)."""
    status_by: Mapping[str, str] = field(default_factory=dict)
    """The phase that last set each status field (absent: the runner, or not known)."""
    tasks: TaskList | None = None
    attempts: Mapping[str, int] = field(default_factory=dict)
    """Spec checks failed so far, by task id."""
    feedback: Mapping[str, str] = field(default_factory=dict)
    """The last spec check's feedback, by task id."""
    added: int = 0
    """Tasks added after the decomposition."""

    def guard_state(self) -> dict[str, Any]:
        """What guards evaluate against."""
        return {"status": dict(self.status)}


def set_status(
    state: WorkflowState,
    fields: Mapping[str, Any],
    *,
    allowed: Collection[str],
    by: str | None = None,
) -> WorkflowState:
    """Set status fields, as phase ``by`` (``None``: outside a phase run).

    Raises:
        StateRefused: a field no guard reads, or a value that is not a JSON scalar.
    """
    if not fields:
        raise StateRefused("give at least one field to set")
    for name, value in fields.items():
        if name not in allowed:
            known = ", ".join(sorted(allowed)) or "(none)"
            raise StateRefused(f"status field {name!r} is not one the workflow reads; use: {known}")
        if value is not None and not isinstance(value, bool | int | float | str):
            raise StateRefused(f"status field {name!r} takes true/false, a number or a text")
    return with_status(state, fields, by=by)


def with_status(
    state: WorkflowState, fields: Mapping[str, Any], *, by: str | None
) -> WorkflowState:
    """``state`` with ``fields`` set by phase ``by`` (``None``: by the runner)."""
    status_by = {name: phase for name, phase in state.status_by.items() if name not in fields}
    if by is not None:
        status_by.update(dict.fromkeys(fields, by))
    return replace(state, status={**state.status, **fields}, status_by=status_by)


def without_verdicts(state: WorkflowState, phase: str, reads: Collection[str]) -> WorkflowState:
    """``state`` as phase ``phase`` starts a run: its own earlier verdicts are gone.

    A field ``phase`` set in an earlier run is dropped, so a stale verdict never picks its
    next phase; a field another phase set stays, whoever reads it. A field whose setter is
    not known (set by the runner, or stored before setters were kept) is dropped when
    ``phase``'s own transitions read it (``reads``).
    """

    def stale(name: str) -> bool:
        setter = state.status_by.get(name)
        return setter == phase if setter is not None else name in reads

    return replace(
        state,
        status={k: v for k, v in state.status.items() if not stale(k)},
        status_by={k: v for k, v in state.status_by.items() if v != phase},
    )


def put_tasks(
    state: WorkflowState,
    raw: Any,
    *,
    min_tasks: int = MIN_TASKS,
    max_tasks: int = MAX_TASKS,
) -> WorkflowState:
    """Set the task list, once.

    Raises:
        StateRefused: the run has a list already, or this one breaks a rule (which, why).
    """
    if state.tasks is not None:
        raise StateRefused("the task list is set already; change it with update_task or add_tasks")
    try:
        tasks = parse_tasks(raw, min_tasks=min_tasks, max_tasks=max_tasks)
    except TaskListError as exc:
        raise StateRefused(f"task list refused ({exc.rule}): {exc}") from None
    return replace(state, tasks=tasks)


def update_task(
    state: WorkflowState, task_id: str, status: str, feedback: str = ""
) -> WorkflowState:
    """Set a task's status, with the spec check's feedback when it failed.

    Raises:
        StateRefused: no task list, an unknown task, or a status that cannot be set.
    """
    tasks = _tasks(state)
    if status not in _SETTABLE:
        raise StateRefused(
            f"status {status!r} cannot be set; use one of: in_progress, passed, failed"
        )
    try:
        changed = tasks.with_status(task_id, status)
    except TaskListError as exc:
        raise StateRefused(str(exc)) from None
    notes = dict(state.feedback)
    if status == "failed":
        notes[task_id] = feedback[:MAX_FEEDBACK_CHARS]
    return replace(state, tasks=changed, feedback=notes)


def count_failure(state: WorkflowState, task_id: str) -> WorkflowState:
    """One more failed check of ``task_id``.

    The runner counts one per check, however many times its agent said so.
    """
    return replace(state, attempts={**state.attempts, task_id: state.attempts.get(task_id, 0) + 1})


def add_tasks(state: WorkflowState, raw: Any, *, max_added: int = MAX_ADDED_TASKS) -> WorkflowState:
    """Append tasks for missing work.

    Raises:
        StateRefused: no list yet, more than ``max_added`` in the run, or a rule broken.
    """
    tasks = _tasks(state)
    items = raw.get("tasks") if isinstance(raw, Mapping) else raw
    if not isinstance(items, list) or not items:
        raise StateRefused("give a non-empty list of tasks")
    if state.added + len(items) > max_added:
        left = max_added - state.added
        raise StateRefused(f"{len(items)} new tasks, but only {left} more may be added in this run")
    try:
        combined = tasks.tasks + parse_new_tasks(items, tasks)
    except TaskListError as exc:
        raise StateRefused(f"tasks refused ({exc.rule}): {exc}") from None
    return replace(state, tasks=replace(tasks, tasks=combined), added=state.added + len(items))


def _tasks(state: WorkflowState) -> TaskList:
    if state.tasks is None:
        raise StateRefused("there is no task list yet; the decomposition sets it with put_tasks")
    return state.tasks
