"""The task list a workflow works through, validated like a plan.

The JSON form is seed 003's ``tasks.json``::

    {"schemaVersion": 1, "decomposedFrom": "docs/design.md",
     "tasks": [{"id": "T1", "title": "...", "summary": "...",
                "acceptanceCriteria": ["..."], "filesAllowed": ["src/pkg/**"],
                "dependsOn": [], "status": "pending"}]}

An agent's list is untrusted input: :func:`parse_tasks` checks the schema (unknown keys are
errors), the number of tasks (5 to 15 by default), unique ids, dependencies on tasks that
exist, no cycles, at least one acceptance criterion per task and ``filesAllowed`` globs that
stay inside the workspace (relative, no ``..``, no ``.git``). A refusal is a
:class:`TaskListError` with a rule and a message the agent can act on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from taskdecomp.plan import TaskId, find_cycle

TaskStatus = Literal["pending", "in_progress", "passed", "failed"]
"""Where a task is."""

MIN_TASKS = 5
MAX_TASKS = 15
"""The seed's range of tasks for one design."""

_DRIVE = re.compile(r"^[A-Za-z]:")


class TaskListError(ValueError):
    """A task list an agent sent is refused.

    Attributes:
        rule: what it breaks, e.g. ``unknown_dependency:T9``.
    """

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule


class _TaskModel(BaseModel):  # field names are the seed's JSON keys
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=64)
    title: str = Field(min_length=1, max_length=200)
    summary: str = Field(default="", max_length=4000)
    acceptanceCriteria: list[str]
    filesAllowed: list[str] = Field(default_factory=list)
    dependsOn: list[str] = Field(default_factory=list)
    status: TaskStatus = "pending"


class _ListModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schemaVersion: Literal[1] = 1
    decomposedFrom: str = ""
    tasks: list[_TaskModel]


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkTask:
    """One task of a workflow."""

    id: TaskId
    title: str
    summary: str
    acceptance_criteria: tuple[str, ...]
    files_allowed: tuple[str, ...]
    """Globs of the workspace files the task may change."""
    depends_on: tuple[TaskId, ...]
    status: TaskStatus = "pending"

    def to_json(self) -> dict[str, Any]:
        """The seed's JSON form."""
        return {
            "id": self.id,
            "title": self.title,
            "summary": self.summary,
            "acceptanceCriteria": list(self.acceptance_criteria),
            "filesAllowed": list(self.files_allowed),
            "dependsOn": list(self.depends_on),
            "status": self.status,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskList:
    """The tasks of a workflow, in order."""

    decomposed_from: str
    """The design document they come from."""
    tasks: tuple[WorkTask, ...]

    def to_json(self) -> dict[str, Any]:
        """The seed's ``tasks.json`` form."""
        return {
            "schemaVersion": 1,
            "decomposedFrom": self.decomposed_from,
            "tasks": [task.to_json() for task in self.tasks],
        }

    def get(self, task_id: str) -> WorkTask | None:
        """The task with ``task_id``, if any."""
        return next((task for task in self.tasks if task.id == task_id), None)

    def ready(self) -> list[WorkTask]:
        """Tasks not passed whose dependencies all passed, in order."""
        passed = {task.id for task in self.tasks if task.status == "passed"}
        return [
            task
            for task in self.tasks
            if task.status != "passed" and set(task.depends_on) <= passed
        ]

    def with_status(self, task_id: str, status: TaskStatus) -> TaskList:
        """A new list with ``task_id`` in ``status``.

        Raises:
            TaskListError: ``unknown_task:<id>``.
        """
        if self.get(task_id) is None:
            raise TaskListError(f"unknown_task:{task_id}", f"there is no task {task_id!r}")
        tasks = tuple(
            replace(task, status=status) if task.id == task_id else task for task in self.tasks
        )
        return replace(self, tasks=tasks)


def parse_tasks(raw: Any, *, min_tasks: int = MIN_TASKS, max_tasks: int = MAX_TASKS) -> TaskList:
    """Validate an agent's task list (the seed's JSON form) and return it.

    Raises:
        TaskListError: the first rule it breaks, with a message saying how to fix it.
    """
    model = _validated(raw)
    if not min_tasks <= len(model.tasks) <= max_tasks:
        raise TaskListError(
            "task_count",
            f"{len(model.tasks)} tasks; give between {min_tasks} and {max_tasks}, each small "
            "enough to do on its own",
        )
    tasks = tuple(_task(item) for item in model.tasks)
    check_tasks(tasks)
    return TaskList(decomposed_from=model.decomposedFrom, tasks=tasks)


def parse_new_tasks(raw: Any, existing: TaskList) -> tuple[WorkTask, ...]:
    """Validate tasks to append to ``existing``, the rules checked on the whole list.

    A new task may depend on an existing one.

    Raises:
        TaskListError: the first rule broken.
    """
    model = _validated({"decomposedFrom": existing.decomposed_from, "tasks": raw})
    tasks = tuple(_task(item) for item in model.tasks)
    check_tasks(existing.tasks + tasks)
    return tasks


def _validated(raw: Any) -> _ListModel:
    try:
        return _ListModel.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "the list"
        raise TaskListError("schema", f"{where}: {first['msg']}") from None


def check_tasks(tasks: Iterable[WorkTask]) -> None:
    """The rules a list must keep whenever it changes (ids, dependencies, criteria, globs).

    Raises:
        TaskListError: the first rule broken.
    """
    tasks = tuple(tasks)
    seen: set[str] = set()
    for task in tasks:
        if task.id in seen:
            raise TaskListError(f"duplicate_id:{task.id}", f"two tasks have the id {task.id!r}")
        seen.add(task.id)
        if not any(criterion.strip() for criterion in task.acceptance_criteria):
            raise TaskListError(
                f"no_criteria:{task.id}",
                f"task {task.id!r} has no acceptance criteria; give checkable ones",
            )
        for glob in task.files_allowed:
            problem = glob_problem(glob)
            if problem is not None:
                raise TaskListError(f"bad_glob:{task.id}", f"task {task.id!r}: {problem}")
    for task in tasks:
        for dep in task.depends_on:
            if dep not in seen:
                raise TaskListError(
                    f"unknown_dependency:{dep}", f"task {task.id!r} depends on {dep!r}, no task"
                )
    cycle = find_cycle({task.id: task.depends_on for task in tasks})
    if cycle is not None:
        raise TaskListError("cycle", "tasks depend on each other in a cycle: " + " -> ".join(cycle))


def glob_problem(glob: str) -> str | None:
    """Why ``glob`` cannot name files inside a workspace, or ``None`` when it can."""
    if not glob.strip():
        return "an empty glob in filesAllowed"
    if "\x00" in glob:
        return f"glob {glob!r} contains a NUL character"
    normal = glob.replace("\\", "/")
    if normal.startswith("/") or _DRIVE.match(normal):
        return f"glob {glob!r} is absolute; give paths relative to the workspace"
    parts = normal.split("/")
    if ".." in parts:
        return f"glob {glob!r} climbs out of the workspace with '..'"
    if any(part.lower() == ".git" for part in parts):
        return f"glob {glob!r} names .git, which is never writable"
    return None


def status_map(tasks: TaskList) -> Mapping[str, TaskStatus]:
    """Each task's status by id."""
    return {task.id: task.status for task in tasks.tasks}


def _task(item: _TaskModel) -> WorkTask:
    return WorkTask(
        id=TaskId(item.id.strip()),
        title=item.title.strip(),
        summary=item.summary.strip(),
        acceptance_criteria=tuple(item.acceptanceCriteria),
        files_allowed=tuple(item.filesAllowed),
        depends_on=tuple(dict.fromkeys(TaskId(dep.strip()) for dep in item.dependsOn)),
        status=item.status,
    )
