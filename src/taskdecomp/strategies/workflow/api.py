"""Running a workflow: :func:`run_workflow`, and what a resume needs to rebuild one.

A workflow run is a run like any other (stored, leased, checkpointed, listed by ``runs``,
continued by :func:`~taskdecomp.engine.resume`) whose strategy is
``workflow``: its settings (the workflow file, the workspace, the options) are stored with
it, and its state (phase, status, tasks, agents' turns) with every checkpoint.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from taskdecomp import durable, owners, runconfig
from taskdecomp.budget import Budget, Usage
from taskdecomp.durable import DEFAULT_DURABILITY, Durability
from taskdecomp.errors import ConfigError, CorruptRecordError
from taskdecomp.events import Subscriber
from taskdecomp.models import Model, prices, resolve_model
from taskdecomp.plan import Plan
from taskdecomp.run import RunId, RunResult, new_run_id
from taskdecomp.runtime import Clock, RunContext, run_blocking
from taskdecomp.stops import StopRun
from taskdecomp.store.base import DEFAULT_LEASE_SECONDS, Store, StoredRun
from taskdecomp.strategies.base import (
    Outcome,
    Phases,
    ToolsArg,
    as_toolset,
    attach_journal,
    build_context,
    execute,
)
from taskdecomp.strategies.workflow import gitops
from taskdecomp.strategies.workflow.definition import BUILT_IN, Workflow, load_workflow
from taskdecomp.strategies.workflow.files import workspace_tools
from taskdecomp.strategies.workflow.options import WorkflowOptions
from taskdecomp.strategies.workflow.runner import TASK_PHASE, Runner, scope_now
from taskdecomp.strategies.workflow.session import (
    DESIGN_PATH,
    INPUT_PATH,
    STATE_DIR,
    Session,
    own_folder,
)
from taskdecomp.strategies.workflow.state import WorkflowState
from taskdecomp.strategies.workflow.statetools import state_tools
from taskdecomp.strategies.workflow.strategy import STRATEGY
from taskdecomp.strategies.workflow.tasklist import TaskList, TaskListError, parse_tasks
from taskdecomp.strategies.workflow.workspace import PathRefused, Workspace, write_new
from taskdecomp.telemetry.runspan import RunSpan
from taskdecomp.tools import Toolset

DEFAULT_BUDGET = Budget(max_tool_calls=2_000, max_seconds=4 * 3600)
"""A workflow's engine budget unless one is given: many agent calls over hours, bounded by
``max_iterations`` phase runs of ``max_agent_turns`` turns each."""


async def run_workflow(
    workflow: str | Path = "default",
    *,
    workspace: str | Path,
    model: Model | str,
    input: str | Path | None = None,
    tasks: str | Path | None = None,
    tools: ToolsArg | None = None,
    allow: Iterable[str] | None = None,
    budget: Budget | None = None,
    options: WorkflowOptions | None = None,
    on_event: Subscriber | None = None,
    run_id: RunId | None = None,
    clock: Clock | None = None,
    store: Store | None = None,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    durability: Durability = DEFAULT_DURABILITY,
) -> RunResult:
    """Run a workflow over a working directory; always returns a result.

    Args:
        workflow: a workflow file, or a built-in name (``default``, ``tasks``).
        workspace: the directory the agents work in (it must exist).
        model: the agents' model, or a model string.
        input: the document the workflow starts from (a design or an issue); a copy is
            kept in ``.taskdecomp/input.md``.
        tasks: a ``tasks.json`` to start the task loop from (required by workflows that
            start at ``implement_task``, such as ``tasks``).
        tools: the user's tools, beside the workspace and state tools.
        allow: tool names the agents may call; default: all of them.
        budget: engine limits; default: :data:`DEFAULT_BUDGET`.
        options: the workflow's own limits; default: :class:`WorkflowOptions`.
        on_event: receives every event.
        run_id: use this id instead of a fresh one.
        clock: monotonic clock, for tests.
        store: keep the run there, so :func:`~taskdecomp.resume` can continue it.
        lease_seconds: the run's lease (see :func:`~taskdecomp.run`).
        durability: how checkpoints reach the disk (see :func:`~taskdecomp.run`).

    Raises:
        WorkflowError: the workflow file has problems (every one is named).
        ConfigError: the workspace, input or task list cannot be used; a tool name clashes;
            ``budget.max_cost_usd`` is set and the model's price is unknown.
    """
    durable.durability(durability)
    options = options or WorkflowOptions()
    budget = budget or DEFAULT_BUDGET
    chosen = resolve_model(model)
    prices.require_prices([chosen], budget.max_cost_usd)  # before the workspace is touched
    loaded = load_workflow(workflow)
    ws = _workspace(workspace)
    spec = _spec(workflow)
    given = _initial_tasks(tasks, loaded, options)
    input_path = _copy_input(ws, input) if input is not None else None
    session = Session(
        workflow=loaded,
        spec=spec,
        workspace=ws,
        options=options,
        state=WorkflowState(phase=loaded.start, tasks=given),
        design_path=DESIGN_PATH if "design_draft" in loaded.phases else input_path,
        input_path=input_path,
    )
    if gitops.is_repository(ws.root):
        session.base_commit = gitops.head(ws.root)
    user = as_toolset(tools) if tools is not None else None
    toolset = _toolset(session, user)
    goal = f"workflow {loaded.name} in {ws.root}" + (f" from {Path(input).name}" if input else "")
    ctx = build_context(goal, toolset, chosen, allow, budget, on_event, run_id or new_run_id())
    if clock is not None:
        ctx.clock = clock
    started = ctx.clock()
    traced = RunSpan(ctx, STRATEGY.name)
    if store is not None:
        new = runconfig.new_run(
            ctx.run_id,
            goal,
            tools=tools,
            model=ctx.model,
            allow=ctx.gateway.allow,
            budget=budget,
            strategy=STRATEGY.name,
            options={"spec": spec, "workspace": str(ws.root), "options": options.to_dict()},
        )
        new = traced.stamped(new)  # a resume links to this run's first trace
        ttl = durable.lease_seconds(lease_seconds)
        with store.batch(durable=durability == "sync"):  # the run with its starting state
            lease = store.create_run(new, owner=owners.new_owner_id(), ttl=ttl)
            store.save_state(
                ctx.run_id,
                Plan(steps=()),
                {"workflow": session.to_dict()},
                approvals={},
                usage=Usage(),
                events=(),
                lease=lease,
            )
        attach_journal(ctx, store, lease, segment=1, started=started, durability=durability)
    async with durable.leased(ctx.journal), traced:
        return await execute(ctx, Outcome(), budget, _phases(session), started=started)


def run_workflow_sync(workflow: str | Path = "default", **kwargs: Any) -> RunResult:
    """Blocking :func:`run_workflow`, for code without an event loop (see ``run_sync``).

    Raises:
        RuntimeError: when called from inside a running event loop.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run_blocking(run_workflow(workflow, **kwargs))
    raise RuntimeError("run_workflow_sync() cannot run inside an event loop; await run_workflow")


def rebuild(
    stored: StoredRun, settings: Mapping[str, Any], tools: ToolsArg | None
) -> tuple[Toolset, Phases]:
    """The toolset and phases that continue stored workflow run ``stored``.

    ``settings`` are the ones :func:`run_workflow` stored: the workflow file, the workspace
    and the options.

    Raises:
        CorruptRecordError: its settings or state do not decode.
        WorkflowError: its workflow file has changed and has problems now.
        ConfigError: its workspace is gone.
    """
    try:
        spec, root = str(settings["spec"]), str(settings["workspace"])
        options = WorkflowOptions.from_dict(settings.get("options") or {})
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptRecordError(
            f"stored run {stored.run_id!r}: its workflow settings do not decode ({exc})"
        ) from exc
    loaded = load_workflow(spec)
    ws = _workspace(root)
    data = stored.state.get("workflow")
    session = Session(
        workflow=loaded,
        spec=spec,
        workspace=ws,
        options=options,
        state=WorkflowState(phase=loaded.start),
        design_path=None,
        input_path=None,
    )
    if isinstance(data, Mapping):
        session.restore(data)
        session.design_path = data.get("design_path")
        session.input_path = data.get("input_path")
    user_tools = tools if tools is not None else stored.tools
    user = as_toolset(user_tools) if user_tools is not None else None
    return _toolset(session, user), _phases(session)


def workflow_view(stored: StoredRun) -> dict[str, Any] | None:
    """A stored workflow run's phase history, task table and stop reason (strict JSON).

    ``None`` when the run is not a workflow run.
    """
    if stored.config.get("strategy") != STRATEGY.name:
        return None
    data = stored.state.get("workflow")
    data = data if isinstance(data, Mapping) else {}
    tasks = (data.get("tasks") or {}).get("tasks") or []
    attempts, feedback = data.get("attempts") or {}, data.get("feedback") or {}
    commits = data.get("commits") or {}
    history = []
    for entry in sorted(stored.history, key=lambda item: item.step_no):
        seen = entry.observation if isinstance(entry.observation, Mapping) else {}
        history.append(
            {
                "no": entry.step_no,
                "phase": seen.get("phase"),
                "task": seen.get("task"),
                "attempt": seen.get("attempt"),
                "changed": seen.get("changed", []),
                "out_of_scope": seen.get("out_of_scope", []),
                "result": seen.get("result"),
            }
        )
    summary = stored.summary
    return {
        "run_id": stored.run_id,
        "workflow": data.get("name"),
        "workspace": (stored.config.get("workflow") or {}).get("workspace"),
        "status": summary.status,
        "stop_reason": summary.stop_reason,
        "phase": data.get("phase"),
        "status_fields": data.get("status") or {},
        "phases": history,
        "in_flight": [
            {"no": run.get("no"), "phase": run.get("phase"), "task": run.get("task")}
            for run in data.get("inflight") or []
        ],
        "tasks": [
            {
                "id": task.get("id"),
                "title": task.get("title"),
                "status": task.get("status"),
                "attempts": attempts.get(task.get("id"), 0),
                "feedback": feedback.get(task.get("id")),
                "commit": commits.get(task.get("id")),
            }
            for task in tasks
        ],
    }


def _phases(session: Session) -> Phases:
    async def phases(ctx: RunContext, outcome: Outcome) -> None:
        await Runner(ctx, outcome, session).run()

    return phases


def _toolset(session: Session, user: Toolset | None) -> Toolset:
    files = workspace_tools(
        session.workspace, lambda: scope_now(session), on_change=lambda: session.on_change()
    )
    own = list(files.values())
    own += list(state_tools(session).values())
    if user is None:
        return Toolset.from_functions(own, source=None)
    clash = sorted(set(user) & {spec.name for spec in own})
    if clash:
        raise ConfigError(
            f"the toolset's {', '.join(clash)} clash with the workflow's own tools; rename them"
        )
    return Toolset.from_functions([*user.values(), *own], source=user.source)


def _workspace(path: str | Path) -> Workspace:
    try:
        ws = Workspace(Path(path).expanduser())
    except PathRefused as exc:
        raise ConfigError(str(exc)) from None
    state_dir = ws.root / STATE_DIR
    if state_dir.is_symlink() or (state_dir.exists() and not state_dir.is_dir()):
        raise ConfigError(f"{str(state_dir)!r} must be a folder of the workspace, not a link")
    return ws


def _spec(workflow: str | Path) -> str:
    if isinstance(workflow, str) and workflow in BUILT_IN:
        return workflow
    return str(Path(workflow).expanduser().resolve())


def _initial_tasks(
    tasks: str | Path | None, workflow: Workflow, options: WorkflowOptions
) -> TaskList | None:
    if tasks is None:
        if workflow.start == TASK_PHASE:
            raise ConfigError(
                f"workflow {workflow.name!r} starts at {TASK_PHASE}: give the task list "
                "with --tasks FILE (a tasks.json)"
            )
        return None
    path = Path(tasks).expanduser()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return parse_tasks(raw, min_tasks=1, max_tasks=options.max_tasks)
    except OSError as exc:
        raise ConfigError(f"cannot read the task list {str(tasks)!r}: {exc}") from None
    except ValueError as exc:  # JSON, or a TaskListError
        rule = f" ({exc.rule})" if isinstance(exc, TaskListError) else ""
        raise ConfigError(f"the task list {str(tasks)!r} is refused{rule}: {exc}") from None


def _copy_input(ws: Workspace, source: str | Path) -> str:
    path = Path(source).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the input document {str(source)!r}: {exc}") from None
    target = ws.root / INPUT_PATH
    try:
        own_folder(ws.root, target.parent)
    except StopRun as stop:
        raise ConfigError(stop.message) from None
    write_new(target, text)
    return INPUT_PATH
