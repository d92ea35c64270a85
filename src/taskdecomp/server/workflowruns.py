"""Workflow runs the service starts: the operator's workflows, a workspace per run.

The operator registers each workflow by name (``serve --workflow NAME=FILE``, a file or a
built-in), optionally with a folder every run of it starts from (``--workflow-template
NAME=DIR``, copied). A client names a workflow and gives the run's input document and
task list as text; it never gives a path. Each run works in its own new folder under the
service's workspaces folder, named after the run, and goes through the same launch path as
every other run (:meth:`RunService.launch <taskdecomp.server.runs.RunService.launch>`), so
it is listed, streamed, cancelled and resumed like them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from taskdecomp.budget import Budget
from taskdecomp.errors import ConfigError, RunNotFoundError, StoreError, WorkflowError
from taskdecomp.run import RunId, new_run_id
from taskdecomp.server.config import ServerConfig
from taskdecomp.server.problems import Problem
from taskdecomp.server.runs import RunService
from taskdecomp.settings import load_settings
from taskdecomp.store import StoredRun
from taskdecomp.strategies.workflow.api import DEFAULT_BUDGET, run_workflow, workflow_view
from taskdecomp.strategies.workflow.definition import BUILT_IN, Workflow, load_workflow
from taskdecomp.strategies.workflow.options import WorkflowOptions
from taskdecomp.strategies.workflow.runner import TASK_PHASE
from taskdecomp.strategies.workflow.tasklist import TaskListError, parse_tasks


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Registered:
    """One workflow the operator registered."""

    name: str
    """The name clients use."""
    spec: str
    """The workflow as a run stores it: a built-in's name or the file's absolute path."""
    workflow: Workflow
    """The checked definition, loaded at start-up."""
    template: Path | None
    """The folder each run's workspace starts as a copy of; ``None``: an empty folder."""

    def describe(self) -> dict[str, Any]:
        """Strict JSON for ``GET /workflows``."""
        return {
            "name": self.name,
            "workflow": self.workflow.name,
            "start": self.workflow.start,
            "phases": phase_list(self.workflow),
            "needs_tasks": self.workflow.start == TASK_PHASE,
            "template": self.template is not None,
        }


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Request:
    """What a client asked for, checked at the HTTP edge."""

    input: str | None
    """The document the workflow starts from (a design, an issue)."""
    tasks: Mapping[str, Any] | None
    """A task list (the ``tasks.json`` form) to start the task loop from."""
    toolset: str | None
    """A registered toolset whose tools the agents get besides the workflow's own."""
    model: str | None
    budget: Mapping[str, Any]
    """Budget fields the client set (the rest: the workflow's defaults)."""
    options: Mapping[str, Any]
    """:class:`WorkflowOptions` fields the client set."""


def spec_of(source: str) -> str:
    """The workflow ``source`` as a run stores it (see ``run_workflow``)."""
    if source in BUILT_IN:
        return source
    return str(Path(source).expanduser().resolve())


def phase_list(workflow: Workflow) -> list[dict[str, Any]]:
    """The workflow's phases in file order, each with its type and where it may lead."""
    return [
        {
            "name": phase.name,
            "type": phase.type,
            "description": phase.description,
            "next": [transition.to for transition in phase.transitions],
        }
        for phase in workflow.phases.values()
    ]


class WorkflowRuns:
    """The registered workflows of one service, and the runs started from them.

    Args:
        config: the operator's choices (``workflows``, ``workflow_templates``,
            ``workspaces``).
        runs: the service's runs, whose launch path every workflow run takes.

    Raises:
        ConfigError: a workflow file has problems, or a template is not a folder.
    """

    def __init__(self, config: ServerConfig, runs: RunService) -> None:
        self.runs = runs
        self.registered = registered(config)
        self.workspaces = (
            Path(config.workspaces).expanduser()
            if config.workspaces
            else load_settings().data_dir().expanduser() / "workspaces"
        )
        """The folder each run's workspace is made in."""

    def get(self, name: str) -> Registered:
        """The workflow registered as ``name``.

        Raises:
            Problem: 404 when no workflow has this name.
        """
        found = self.registered.get(name)
        if found is None:
            known = ", ".join(self.registered) or "none (serve --workflow NAME=FILE)"
            raise Problem(404, f"no workflow is registered as {name!r}; registered: {known}")
        return found

    async def start(self, name: str, request: Request) -> RunId:
        """Start a run of workflow ``name`` in a new workspace; its id once it is stored.

        Raises:
            Problem: 404 for an unregistered workflow; 422 for an unknown toolset, an
                unlisted model, options or a budget out of range, a task list that breaks
                a rule or is missing where the workflow starts at the task loop, a toolset
                whose tool names clash with the workflow's own tools.
        """
        registered = self.get(name)
        toolset = self.runs._toolset(request.toolset) if request.toolset else None
        model = self.runs._model(request.model)
        options = _options(request.options)
        budget = _budget(request.budget, options)
        tasks = _tasks(registered.workflow, request.tasks, options)
        run_id = new_run_id()
        workspace = await asyncio.to_thread(self._workspace, registered, run_id)  # a copy
        try:
            with tempfile.TemporaryDirectory(prefix="taskdecomp-inputs-") as given:
                await self.runs.launch(
                    run_id,
                    lambda on_event: run_workflow(
                        registered.spec,
                        workspace=workspace,
                        model=self.runs._resolved(model),
                        input=_write(Path(given) / "input.md", request.input),
                        tasks=_write(Path(given) / "tasks.json", tasks),
                        tools=toolset,
                        budget=budget,
                        options=options,
                        on_event=on_event,
                        run_id=run_id,
                        store=self.runs.store,
                        lease_seconds=self.runs.config.lease_seconds,
                        durability=self.runs.config.durability,
                    ),
                )
        except BaseException as exc:
            if not self.runs.is_active(run_id) and not await asyncio.to_thread(
                self._stored, run_id
            ):
                shutil.rmtree(workspace, ignore_errors=True)
            if isinstance(exc, ConfigError) and not isinstance(exc, StoreError):
                raise Problem(422, f"the run cannot start: {exc}") from None  # a tool clash
            raise
        return run_id

    def page_view(self, stored: StoredRun) -> dict[str, Any] | None:
        """A workflow run's phases and tasks shaped for a page; ``None`` for other runs."""
        view = workflow_view(stored)
        if view is None:
            return None
        spec = (stored.config.get("workflow") or {}).get("spec")
        registered = next((r for r in self.registered.values() if r.spec == spec), None)
        return shaped(view, registered)

    def _workspace(self, registered: Registered, run_id: RunId) -> Path:
        """A new folder for run ``run_id``: a copy of the template, or empty."""
        target = self.workspaces / run_id
        try:
            self.workspaces.mkdir(parents=True, exist_ok=True)
            if registered.template is not None:
                shutil.copytree(registered.template, target, symlinks=True)
            else:
                target.mkdir()
        except OSError as exc:
            raise Problem(503, f"cannot make the run's workspace: {exc}") from None
        return target

    def _stored(self, run_id: RunId) -> bool:
        try:
            self.runs.store.load_run(run_id)
        except RunNotFoundError:
            return False
        return True


def shaped(view: Mapping[str, Any], registered: Registered | None) -> dict[str, Any]:
    """``workflow_view``'s JSON with each phase's state, for a page (strict JSON).

    Each phase of the definition (or, for a workflow this server does not register, each
    phase the run went through) gets ``runs`` (how many phase runs it had) and ``state``:
    ``current`` (the run is at it), ``visited`` (it ran before) or ``pending``.
    """
    history = list(view["phases"])
    counts: dict[str, int] = {}
    for entry in history:
        counts[entry["phase"]] = counts.get(entry["phase"], 0) + 1
    if registered is not None:
        phases = phase_list(registered.workflow)
    else:
        seen = [name for name in dict.fromkeys([*counts, view["phase"]]) if name is not None]
        phases = [{"name": name, "type": None, "description": "", "next": []} for name in seen]
    for phase in phases:
        name = phase["name"]
        phase["runs"] = counts.get(name, 0)
        phase["state"] = (
            "current" if name == view["phase"] else "visited" if name in counts else "pending"
        )
    return {
        "name": registered.name if registered is not None else None,
        "workflow": view["workflow"],
        "phase": view["phase"],
        "phases": phases,
        "history": history,
        "in_flight": view["in_flight"],
        "tasks": view["tasks"],
        "status_fields": view["status_fields"],
    }


def registered(config: ServerConfig) -> dict[str, Registered]:
    """Every workflow ``config`` registers, checked and loaded, by name.

    Raises:
        ConfigError: a workflow file has problems, or a template is not a folder.
    """
    return {
        name: _register(name, source, config.workflow_templates.get(name))
        for name, source in sorted(config.workflows.items())
    }


def _register(name: str, source: str, template: str | None) -> Registered:
    try:
        workflow = load_workflow(source)
    except (WorkflowError, ConfigError) as exc:
        raise ConfigError(f"workflow {name!r}: {exc}") from exc
    folder = Path(template).expanduser().resolve() if template is not None else None
    if folder is not None and not folder.is_dir():
        raise ConfigError(f"workflow {name!r}: its template {template!r} is not a folder")
    return Registered(name=name, spec=spec_of(source), workflow=workflow, template=folder)


def _options(given: Mapping[str, Any]) -> WorkflowOptions:
    try:
        return WorkflowOptions(**given)
    except ValueError as exc:
        raise Problem(422, f"options refused: {exc}") from None


def _budget(given: Mapping[str, Any], options: WorkflowOptions) -> Budget:
    """The workflow's default budget, with the client's fields, wide enough for its agents."""
    try:
        changes = {key: value for key, value in given.items() if value is not None}
        budget = dataclasses.replace(DEFAULT_BUDGET, **changes)
        return dataclasses.replace(
            budget, max_parallel=max(budget.max_parallel, options.max_parallel)
        )
    except ValueError as exc:
        raise Problem(422, f"budget refused: {exc}") from None


def _tasks(
    workflow: Workflow, given: Mapping[str, Any] | None, options: WorkflowOptions
) -> str | None:
    """The task list as ``tasks.json`` text, checked by the rules the run applies."""
    if given is None:
        if workflow.start == TASK_PHASE:
            raise Problem(
                422,
                f"workflow {workflow.name!r} starts at {TASK_PHASE}: give the task list as "
                "'tasks' (the tasks.json form)",
            )
        return None
    try:
        parse_tasks(given, min_tasks=1, max_tasks=options.max_tasks)
    except ValueError as exc:  # a TaskListError, or the list's shape
        rule = f" ({exc.rule})" if isinstance(exc, TaskListError) else ""
        raise Problem(422, f"tasks refused{rule}: {exc}") from None
    return json.dumps(given)


def _write(path: Path, text: str | None) -> Path | None:
    if text is None:
        return None
    path.write_text(text, encoding="utf-8")
    return path


__all__ = [
    "Registered",
    "Request",
    "WorkflowRuns",
    "phase_list",
    "registered",
    "shaped",
    "spec_of",
]
