"""The agents' state tools: the only way a phase changes the workflow's state.

``set_status``, ``put_tasks``, ``update_task`` and ``add_tasks`` are ordinary tools (they go
through the gateway, are traced and checkpointed), bound to one :class:`~.session.Session`.
Each checks what it is given with :mod:`.state` and answers ``{"ok": false, "refused":
MESSAGE}`` when it breaks a rule, for the agent to act on. A call knows which phase run made
it from :data:`CURRENT` (set in the phase run's task; sync tools get it through the worker
thread's copied context): a task phase may only update its own task and never replaces or
adds tasks.

They are ``async`` tools: they run on the event loop, one at a time, so concurrent phase
runs never interleave inside a change.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from taskdecomp.strategies.workflow import state as rules
from taskdecomp.strategies.workflow.session import PhaseRun, Session
from taskdecomp.tools import Toolset, tool

CURRENT: ContextVar[PhaseRun | None] = ContextVar("taskdecomp_workflow_phase_run", default=None)
"""The phase run whose agent is calling."""

STATE_TOOLS = ("set_status", "put_tasks", "update_task", "add_tasks")


def state_tools(session: Session) -> Toolset:
    """The four state tools, bound to ``session``."""

    @tool(side_effects="idempotent")
    async def set_status(fields: dict[str, Any]) -> dict[str, Any]:
        """Set workflow status fields the transitions read, e.g. {"designApproved": true}."""

        def change() -> dict[str, Any]:
            allowed = session.workflow.status_fields()
            run = CURRENT.get()
            by = run.phase if run is not None else None
            session.state = rules.set_status(session.state, fields, allowed=allowed, by=by)
            return {"ok": True, "status": dict(session.state.status)}

        return _checked(change)

    @tool(side_effects="idempotent")
    async def put_tasks(tasks: list[dict[str, Any]], decomposedFrom: str = "") -> dict[str, Any]:
        """Set the whole task list, once; each task has the fields of tasks.json."""

        def change() -> dict[str, Any]:
            _outside_task("put_tasks")
            raw = {
                "schemaVersion": 1,
                "decomposedFrom": decomposedFrom or session.design_path or "",
                "tasks": _pending(tasks),
            }
            session.state = rules.put_tasks(
                session.state,
                raw,
                min_tasks=session.options.min_tasks,
                max_tasks=session.options.max_tasks,
            )
            return {"ok": True, "tasks": len(tasks)}

        return _checked(change)

    @tool(side_effects="idempotent")
    async def update_task(task_id: str, status: str, feedback: str = "") -> dict[str, Any]:
        """Set a task's status (in_progress, passed or failed) with feedback when it failed."""

        def change() -> dict[str, Any]:
            run = CURRENT.get()
            if run is not None and run.task is not None and task_id != run.task:
                raise rules.StateRefused(
                    f"this phase works on task {run.task!r}; it cannot change {task_id!r}"
                )
            if run is not None and session.workflow.phases[run.phase].type == "execute":
                raise rules.StateRefused(
                    "a task's status is set by the phase that checks it, not by this one"
                )
            session.state = rules.update_task(session.state, task_id, status, feedback)
            return {"ok": True, "task": task_id, "status": status}

        return _checked(change)

    @tool(side_effects="idempotent")
    async def add_tasks(tasks: list[dict[str, Any]]) -> dict[str, Any]:
        """Add tasks for work the implementation is missing (same fields as put_tasks)."""

        def change() -> dict[str, Any]:
            _outside_task("add_tasks")
            session.state = rules.add_tasks(
                session.state,
                {"tasks": _pending(tasks)},
                max_added=session.options.max_added_tasks,
            )
            return {"ok": True, "added": len(tasks), "added_in_run": session.state.added}

        return _checked(change)

    functions: list[Callable[..., Any]] = [set_status, put_tasks, update_task, add_tasks]
    return Toolset.from_functions(functions, source="workflow-state")


def _pending(tasks: list[dict[str, Any]]) -> list[Any]:
    """An agent's new tasks start pending, whatever status it gave them."""
    return [{**task, "status": "pending"} if isinstance(task, dict) else task for task in tasks]


def _outside_task(name: str) -> None:
    run = CURRENT.get()
    if run is not None and run.task is not None:
        raise rules.StateRefused(f"{name} is not for a task phase; the task list is not yours")


def _checked(change: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return change()
    except rules.StateRefused as exc:
        return {"ok": False, "refused": str(exc)}
