"""The workflow routes: the registered workflows, and starting a run of one.

A workflow run, once started, is a run like any other: ``GET /runs``, ``GET /runs/{id}``
(whose ``workflow`` field holds its phases and tasks), its event stream, cancel and resume
are the runs' own routes.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Body, FastAPI
from fastapi import Path as PathParam
from pydantic import Field

from taskdecomp.server.openapi import returns
from taskdecomp.server.responses import RunView, WorkflowList
from taskdecomp.server.schemas import BudgetIn, _Body
from taskdecomp.server.service import Service
from taskdecomp.server.workflowruns import Request, WorkflowRuns
from taskdecomp.strategies.workflow.state import MAX_ADDED_TASKS
from taskdecomp.strategies.workflow.tasklist import MAX_TASKS, MIN_TASKS

WorkflowName = Annotated[str, PathParam(max_length=200, description="A registered workflow.")]


class WorkflowOptionsIn(_Body):
    """A workflow's own limits, as ``taskdecomp workflow run`` takes them."""

    max_iterations: int = Field(default=50, ge=1, le=10_000, description="Most phase runs.")
    max_task_retries: int = Field(
        default=3, ge=0, le=100, description="Retries of a task after failed spec checks."
    )
    max_added_tasks: int = Field(
        default=MAX_ADDED_TASKS, ge=0, le=1000, description="Tasks completeness may add."
    )
    min_tasks: int = Field(default=MIN_TASKS, ge=1, le=1000, description="Fewest tasks.")
    max_tasks: int = Field(default=MAX_TASKS, ge=1, le=1000, description="Most tasks.")
    max_parallel: int = Field(
        default=1, ge=1, le=64, description="Ready tasks with disjoint files done at once."
    )
    max_agent_turns: int = Field(
        default=30, ge=1, le=10_000, description="Most model turns in one phase run."
    )
    commit: bool = Field(
        default=True, description="Commit passed tasks when the workspace is a git repository."
    )


class WorkflowRunIn(_Body):
    """``POST /workflows/{name}/runs``: the run's inputs (never a path)."""

    input: str | None = Field(
        default=None,
        min_length=1,
        max_length=500_000,
        description="The document to start from (a design, an issue), as text.",
    )
    tasks: dict[str, Any] | None = Field(
        default=None,
        description="A task list in the tasks.json form, to start the task loop from.",
    )
    toolset: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="A registered toolset the agents get besides the workflow's own tools.",
    )
    model: str | None = Field(
        default=None, max_length=500, description="One of GET /models; default: the first."
    )
    budget: BudgetIn | None = None
    options: WorkflowOptionsIn | None = None


def add_routes(app: FastAPI, service: Service) -> WorkflowRuns:
    """Register the workflow routes on ``app``; the service's workflows, loaded.

    Raises:
        ConfigError: a registered workflow file has problems or a template is not a folder.
    """
    workflows = WorkflowRuns(service.config, service.runs)
    service.runs.workflow_view = workflows.page_view

    @app.get("/workflows", tags=["workflows"], **returns(WorkflowList))
    async def list_workflows() -> dict[str, Any]:
        """The workflows runs may use, by name, with their phases."""
        return {"workflows": [entry.describe() for entry in workflows.registered.values()]}

    @app.post(
        "/workflows/{name}/runs", status_code=202, tags=["workflows"], **returns(RunView, 404, 503)
    )
    async def start_workflow_run(
        name: WorkflowName, run: Annotated[WorkflowRunIn | None, Body()] = None
    ) -> dict[str, Any]:
        """Start a run of a registered workflow in a new workspace; 202 with the stored run."""
        given = run or WorkflowRunIn()
        request = Request(
            input=given.input,
            tasks=given.tasks,
            toolset=given.toolset,
            model=given.model,
            budget=dict(given.budget or {}),
            options=given.options.model_dump(exclude_unset=True) if given.options else {},
        )
        return await service.runs.show(await workflows.start(name, request))

    return workflows


__all__ = ["WorkflowOptionsIn", "WorkflowRunIn", "add_routes"]
