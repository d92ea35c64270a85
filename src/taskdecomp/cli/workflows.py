"""``taskdecomp workflow``: workflow files (seed 003), checked before anything runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from taskdecomp import durable
from taskdecomp.cli import _app, views
from taskdecomp.cli._app import (
    DB_OPTION,
    DEBUG_OPTION,
    DURABILITY_OPTION,
    EXIT_USAGE,
    LOCAL_THREADS_OPTION,
    OUTPUT_MODE_OPTION,
    TRACE_CONTENT_OPTION,
    app,
    build_models,
    echo_json,
    load_settings,
    load_tools,
    names,
    open_run_store,
)
from taskdecomp.cli.display import Column, console, fitted_table, line, literal
from taskdecomp.cli.priceopts import price_options
from taskdecomp.cli.runs import until_done
from taskdecomp.durability import Durability
from taskdecomp.errors import ConfigError
from taskdecomp.models.outputs import OutputMode
from taskdecomp.run import RunId, RunResult
from taskdecomp.settings import BUDGET_FIELDS, choose_model, load_openai_settings
from taskdecomp.store import StoredRun
from taskdecomp.strategies.workflow import check_workflow
from taskdecomp.strategies.workflow.api import DEFAULT_BUDGET, run_workflow, workflow_view
from taskdecomp.strategies.workflow.options import WorkflowOptions


@app.group("workflow")
def workflow() -> None:
    """Workflows: YAML phases with guarded transitions over a task list."""


@workflow.command("validate")
@click.argument("source", metavar="FILE_OR_NAME")
@click.option("--json", "as_json", is_flag=True, help="Print the problems as JSON.")
@DEBUG_OPTION
def validate_command(source: str, as_json: bool) -> int:
    """Check a workflow file (or a built-in: default, tasks) and list every problem.

    Each problem names its phase and field: YAML that does not parse, unknown keys, a start
    or transition target that is no phase, guards that do not parse, phases that cannot be
    reached, no terminal phase, missing prompt files. Exit code: 0 when valid, 2 when not.
    """
    problems = check_workflow(source)
    if as_json:
        echo_json(
            {
                "workflow": source,
                "valid": not problems,
                "problems": [
                    {"phase": p.phase, "field": p.field, "message": p.message} for p in problems
                ],
            }
        )
    else:
        out = console()
        if not problems:
            out.print(literal(f"{source}: valid"))
        for problem in problems:
            out.print(literal(f"{source}: {problem}", limit=2000), soft_wrap=True)
    return EXIT_USAGE if problems else 0


@workflow.command("run")
@click.argument("source", metavar="[WORKFLOW]", default="default")
@click.option(
    "--workspace",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The directory the agents work in (a git repository gets a commit per passed task).",
)
@click.option(
    "--input",
    "input_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The document to start from (a design, an issue).",
)
@click.option(
    "--tasks",
    "tasks_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A tasks.json to start the task loop from (the tasks workflow needs one).",
)
@click.option(
    "--model",
    help="The agents' model: openai:MODEL, local, local:PATH.gguf or scripted:PATH.  "
    "[env: TASKDECOMP_MODEL; else openai:$OPENAI_MODEL when OPENAI_API_KEY is set; else local]",
)
@click.option("--base-url", help="OpenAI-compatible server for openai: models.")
@price_options
@OUTPUT_MODE_OPTION
@click.option(
    "--tools",
    multiple=True,
    help="Your own tools besides the workspace and state tools (.py, module, mcp:...; "
    "repeat for several).",
)
@click.option("--allow", help="Comma-separated tools the agents may call (default: all).")
@click.option(
    "--max-parallel",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Ready tasks with disjoint filesAllowed implemented at once.",
)
@click.option(
    "--max-iterations",
    type=click.IntRange(min=1),
    default=50,
    show_default=True,
    help="Most phase runs.",
)
@click.option(
    "--max-task-retries",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="Retries of a task after failed spec checks.",
)
@click.option(
    "--max-added-tasks",
    type=click.IntRange(min=0),
    default=5,
    show_default=True,
    help="Tasks completeness verification may add.",
)
@click.option(
    "--min-tasks",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Fewest tasks in the decomposition.",
)
@click.option(
    "--max-tasks",
    type=click.IntRange(min=1),
    default=15,
    show_default=True,
    help="Most tasks in the decomposition.",
)
@click.option(
    "--max-agent-turns",
    type=click.IntRange(min=1),
    default=30,
    show_default=True,
    help="Most model turns in one phase run.",
)
@click.option("--no-commit", is_flag=True, help="Do not commit passed tasks in a git workspace.")
@click.option("--max-tool-calls", type=click.IntRange(min=1), help="Most tool calls. [2000]")
@click.option(
    "--max-seconds",
    type=click.FloatRange(min=0, min_open=True),
    help="Deadline for the whole workflow. [14400]",
)
@click.option("--max-llm-calls", type=click.IntRange(min=0), help="Most model calls. [none]")
@click.option("--max-tokens", type=click.IntRange(min=0), help="Most model tokens. [none]")
@click.option(
    "--max-cost-usd",
    "--max-cost",
    "max_cost_usd",
    type=click.FloatRange(min=0),
    help="Most model spend in USD (the model's price must be known). [none]",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@DB_OPTION
@DURABILITY_OPTION
@TRACE_CONTENT_OPTION
@DEBUG_OPTION
@LOCAL_THREADS_OPTION
def run_command(
    source: str,
    workspace: Path,
    input_file: Path | None,
    tasks_file: Path | None,
    model: str | None,
    base_url: str | None,
    output_mode: OutputMode | None,
    tools: tuple[str, ...],
    allow: str | None,
    max_parallel: int,
    max_iterations: int,
    max_task_retries: int,
    max_added_tasks: int,
    min_tasks: int,
    max_tasks: int,
    max_agent_turns: int,
    no_commit: bool,
    as_json: bool,
    db: str | None,
    durability: Durability | None,
    **budget_flags: Any,
) -> int:
    """Run WORKFLOW (a YAML file, or a built-in: default, tasks) over a working directory.

    Each phase is an agent with the phase's prompt and a fresh context; every write is
    checked against the current task's filesAllowed and the phase's allowed_writes before
    it happens. The run is stored like any other: `taskdecomp workflow show RUN_ID`,
    `taskdecomp runs`, `taskdecomp resume RUN_ID`. Exit code: 0 when the workflow reached
    its end, 1 when it stopped, 2 on usage errors, 130 on Ctrl-C.
    """
    try:
        options = WorkflowOptions(
            max_iterations=max_iterations,
            max_task_retries=max_task_retries,
            max_added_tasks=max_added_tasks,
            min_tasks=min_tasks,
            max_tasks=max_tasks,
            max_parallel=max_parallel,
            max_agent_turns=max_agent_turns,
            commit=not no_commit,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    settings = load_settings()
    budget = _budget(settings, max_parallel, budget_flags)
    openai_settings = load_openai_settings()
    agents, _ = build_models(
        choose_model(model, settings, openai_settings, local_available=_app.local_model_available),
        None,
        base_url=base_url,
        output_mode=output_mode,
    )
    from taskdecomp.models import prices

    prices.require_prices([agents], budget.max_cost_usd)  # before a store is created
    durable.lease_seconds(settings.lease_seconds)
    toolset = load_tools(tools) if tools else None
    with open_run_store(settings, db, create=True, quiet=as_json) as store:
        return until_done(
            lambda on_event: run_workflow(
                source,
                workspace=workspace,
                model=agents,
                input=input_file,
                tasks=tasks_file,
                tools=toolset,
                allow=names(allow),
                budget=budget,
                options=options,
                on_event=on_event,
                store=store,
                lease_seconds=settings.lease_seconds,
                durability=durability or settings.durability,
            ),
            as_json=as_json,
            db=db,
            show=lambda result: _print_result(console(), result, store.load_run(result.run_id)),
        )


def _print_result(out: Console, result: RunResult, stored: StoredRun) -> None:
    view = workflow_view(stored)
    if view is not None:
        _print_view(out, view)
    if result.message:
        out.print(literal(result.message, "red" if not result.ok else "dim", limit=4000))
    if result.answer:
        out.print(literal(result.answer, limit=4000), soft_wrap=True)
    out.print(views.usage_line(result))


def _budget(settings: Any, max_parallel: int, flags: dict[str, Any]) -> Any:
    """The workflow's defaults, under the environment's settings, under the flags."""
    values = {name: getattr(settings, name) for name in BUDGET_FIELDS}
    values.update({name: value for name, value in flags.items() if value is not None})
    values["max_parallel"] = max(max_parallel, DEFAULT_BUDGET.max_parallel)
    try:
        return dataclasses.replace(
            DEFAULT_BUDGET, **{k: v for k, v in values.items() if v is not None}
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


@workflow.command("show")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print it as JSON.")
@DB_OPTION
def show_command(run_id: str, as_json: bool, db: str | None) -> int:
    """Print a workflow run: its phase history, its task table and its stop reason."""
    with open_run_store(load_settings(), db) as store:
        stored = store.load_run(RunId(run_id))
    view = workflow_view(stored)
    if view is None:
        raise ConfigError(
            f"run {run_id!r} is not a workflow run; show it with `taskdecomp show {run_id}`"
        )
    if as_json:
        echo_json(view)
    else:
        _print_view(console(), view)
    return 0


def _print_view(out: Console, view: dict[str, Any]) -> None:
    colour = {"ok": "green", "stopped": "red"}.get(view["status"], "yellow")
    out.print(
        line(
            ("workflow run ", "bold"),
            literal(view["run_id"], "bold", limit=200),
            " ",
            (view["status"], f"bold {colour}"),
            " stop_reason=",
            literal(view["stop_reason"] or "-", limit=200),
        )
    )
    out.print(
        literal(
            f"workflow {view['workflow']} · workspace {view['workspace']} · phase {view['phase']}",
            "dim",
            limit=2000,
        ),
        soft_wrap=True,
    )
    columns = [
        Column(header="#", justify="right"),
        Column(header="phase"),
        Column(header="task"),
        Column(header="try", justify="right"),
        Column(header="changed", kind="wrap", breaks="/"),
        Column(header="result", kind="wrap", breaks="/"),
    ]
    rows = []
    for run in view["phases"]:
        changed = ", ".join(run["changed"])
        if run["out_of_scope"]:
            changed += " (out of scope: " + ", ".join(run["out_of_scope"]) + ")"
        rows.append(
            [
                literal(run["no"]),
                literal(run["phase"] or "-", limit=80),
                literal(run["task"] or "-", limit=80),
                literal(run["attempt"] or "-"),
                literal(changed or "-", limit=300),
                literal(_short(run["result"]), limit=200),
            ]
        )
    for run in view["in_flight"]:
        rows.append(
            [
                literal(run["no"]),
                literal(run["phase"] or "-", limit=80),
                literal(run["task"] or "-", limit=80),
                literal("-"),
                literal("-"),
                literal("in flight", "yellow"),
            ]
        )
    out.print(fitted_table(columns, rows, width=out.width, title="phases"))
    if view["tasks"]:
        _print_tasks(out, view["tasks"])


def _print_tasks(out: Console, tasks: list[dict[str, Any]]) -> None:
    columns = [
        Column(header="id"),
        Column(header="title", kind="wrap", breaks="/"),
        Column(header="status"),
        Column(header="attempts", justify="right"),
        Column(header="last feedback", kind="wrap", breaks="/"),
        Column(header="commit"),
    ]
    rows = [
        [
            literal(task["id"], limit=80),
            literal(task["title"], limit=120),
            literal(task["status"], {"passed": "green", "failed": "red"}.get(task["status"], "")),
            literal(task["attempts"]),
            literal(task["feedback"] or "-", limit=300),
            literal((task["commit"] or "-")[:12]),
        ]
        for task in tasks
    ]
    out.print(fitted_table(columns, rows, width=out.width, title="tasks"))


def _short(value: Any) -> str:
    if value is None:
        return "-"
    return value if isinstance(value, str) else str(value)


__all__ = ["run_command", "show_command", "validate_command", "workflow"]
