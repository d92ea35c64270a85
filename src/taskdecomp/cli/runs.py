"""``run``, ``runs``, ``show`` and ``resume``: runs of every strategy and the run store."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click
from click.core import ParameterSource

from taskdecomp import stops
from taskdecomp.cli import _app
from taskdecomp.cli._app import (
    DB_OPTION,
    DEBUG_OPTION,
    DURABILITY_OPTION,
    EXIT_INTERRUPTED,
    EXIT_PAUSED,
    EXIT_STOPPED,
    GOAL_FILE_OPTION,
    LOCAL_THREADS_OPTION,
    OUTPUT_MODE_OPTION,
    TRACE_CONTENT_OPTION,
    app,
    build_models,
    debug_enabled,
    echo_json,
    load_settings,
    load_tools,
    names,
    open_run_store,
    read_goal,
)
from taskdecomp.cli.priceopts import price_options
from taskdecomp.cli.strategies import OPTION_OPTION, strategy_option, strategy_options
from taskdecomp.cli.treeruns import TreeFlags, tree_defaults, tree_options, tree_source
from taskdecomp.durability import Durability

if TYPE_CHECKING:  # the rest loads with the command that needs it, not with its usage error
    from taskdecomp.answertype import AnswerType
    from taskdecomp.events import Event, Subscriber
    from taskdecomp.models import Model
    from taskdecomp.models.outputs import OutputMode
    from taskdecomp.roles import Role
    from taskdecomp.run import RunResult
    from taskdecomp.store import RunSummary, SqlStore, StoredRun


F = TypeVar("F", bound=Callable[..., Any])


def role_model_options(*, default: str, env: bool) -> Callable[[F], F]:
    """``--executor-model``, ``--replanner-model`` and ``--rollup-model``.

    ``default`` says in their help which model a role without one uses; ``env``, that the
    help names each one's environment variable.
    """
    helps = {
        "executor": "the executor agent's turns (replan, tree)",
        "replanner": "the replanner (replan)",
        "rollup": "the roll-ups of a plan tree (tree)",
    }

    def decorate(f: F) -> F:
        for role, does in reversed(helps.items()):
            note = f"  [env: TASKDECOMP_{role.upper()}_MODEL]" if env else ""
            text = f"Model for {does} (default: {default}).{note}"
            f = click.option(f"--{role}-model", help=text)(f)
        return f

    return decorate


@app.command("run")
@click.argument("goal", required=False)
@GOAL_FILE_OPTION
@click.option(
    "--tools",
    required=True,
    multiple=True,
    help="Toolset: a .py file, an importable module, mcp:COMMAND ARGS or mcp+http(s)://URL "
    "(repeat for several).",
)
@click.option(
    "--model",
    "--planner-model",
    help="Planner model, and every role's without its own: openai:MODEL, local, "
    "local:PATH.gguf or scripted:PATH.  "
    "[env: TASKDECOMP_MODEL; else openai:$OPENAI_MODEL when OPENAI_API_KEY is set; else local]",
)
@click.option(
    "--combiner-model",
    help="Model for the combine call (default: the planner's).  [env: TASKDECOMP_COMBINER_MODEL]",
)
@role_model_options(default="the planner's", env=True)
@click.option(
    "--base-url",
    help="OpenAI-compatible server for openai: models.  [env: OPENAI_BASE_URL]",
)
@price_options
@OUTPUT_MODE_OPTION
@click.option("--allow", help="Comma-separated tools the plan may use (default: all).")
@click.option("--max-plan-steps", type=click.IntRange(min=1), help="Most steps in a plan. [6]")
@click.option(
    "--min-plan-steps", type=click.IntRange(min=1), help="Fewest steps in a plan_execute plan. [3]"
)
@click.option(
    "--repairs",
    type=click.IntRange(min=0),
    help="Times a refused plan, revision or action is sent back with the rule it broke. [1]",
)
@click.option("--max-execute-steps", type=click.IntRange(min=1), help="Most steps run. [8]")
@click.option("--max-tool-calls", type=click.IntRange(min=1), help="Most tool calls. [8]")
@click.option("--max-seconds", type=click.FloatRange(min=0, min_open=True), help="Deadline. [60]")
@click.option("--max-parallel", type=click.IntRange(min=1), help="Most DAG steps at once. [8]")
@click.option("--max-llm-calls", type=click.IntRange(min=0), help="Most model calls. [none]")
@click.option("--max-tokens", type=click.IntRange(min=0), help="Most model tokens. [none]")
@click.option(
    "--max-cost-usd", type=click.FloatRange(min=0), help="Most model spend in USD. [none]"
)
@strategy_option(note="With --plan: tree.")
@OPTION_OPTION
@tree_options
@click.option(
    "--max-iterations",
    type=click.IntRange(min=1),
    help="replan: most execute/replan rounds. [10]",
)
@click.option(
    "--max-agent-turns",
    type=click.IntRange(min=1),
    help="replan, tree: most executor agent turns per instruction step, or per attempt at "
    "a task of the tree. [20]",
)
@click.option(
    "--approve-plan",
    is_flag=True,
    help="replan: pause for approval before the plan runs and after a revision changes it.",
)
@click.option(
    "--prompts",
    type=click.Path(file_okay=False, path_type=Path),
    help="replan: a directory whose planner.md, executor.md or replanner.md replace ours.",
)
@click.option(
    "--stream-plan/--no-stream-plan",
    default=None,
    help="Start read-only steps while the planner still writes the plan.  "
    "[env: TASKDECOMP_STREAM_PLAN; default: on when the model streams]",
)
@click.option(
    "--answer-schema",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A JSON schema file the answer must match; --json prints the typed answer as "
    "output (needs the answers extra).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@DB_OPTION
@DURABILITY_OPTION
@TRACE_CONTENT_OPTION
@DEBUG_OPTION
@LOCAL_THREADS_OPTION
def run_command(
    goal: str | None,
    goal_file: Path | None,
    tools: tuple[str, ...],
    model: str | None,
    combiner_model: str | None,
    executor_model: str | None,
    replanner_model: str | None,
    rollup_model: str | None,
    base_url: str | None,
    output_mode: OutputMode | None,
    allow: str | None,
    strategy: str,
    option_pairs: tuple[str, ...],
    max_iterations: int | None,
    max_agent_turns: int | None,
    approve_plan: bool,
    prompts: Path | None,
    answer_schema: Path | None,
    as_json: bool,
    db: str | None,
    durability: Durability | None,
    stream_plan: bool | None,
    tree: TreeFlags,
    **budget_flags: Any,
) -> int:
    """Plan GOAL with the model, validate the plan, execute it with the tools, combine.

    GOAL may be - to read it from standard input (or use --goal-file). With --strategy
    tree, GOAL becomes the root of a new plan tree and the run works through it; --plan
    executes a stored plan tree (--node: one subtree) instead of a GOAL. Every budget flag
    also reads TASKDECOMP_<FLAG> (e.g. TASKDECOMP_MAX_TOOL_CALLS) from the environment or
    .env. Exit code: 0 on success, 1 when the run stopped, 2 on usage errors,
    3 when the run waits for approval (taskdecomp approve / reject), 130 on Ctrl-C (the run
    is stored as cancelled and can be resumed).
    """
    source = click.get_current_context().get_parameter_source("strategy")
    named = source is not ParameterSource.DEFAULT
    strategy = tree_source(goal, goal_file, tree, strategy, named=named)
    text = read_goal(goal, goal_file, required=tree.plan_id is None)
    output_type = read_answer_schema(answer_schema) if answer_schema is not None else None
    if prompts is not None:
        from taskdecomp.prompts import check_directory
        from taskdecomp.strategies.replan import PROMPT_NAMES

        check_directory(prompts, PROMPT_NAMES)
    options = strategy_options(
        strategy,
        {
            ("max_iterations", "--max-iterations"): max_iterations,
            ("max_agent_turns", "--max-agent-turns"): max_agent_turns,
            ("approve_plan", "--approve-plan"): approve_plan or None,
            ("prompts", "--prompts"): prompts,
            **tree.flags(),
        },
        option_pairs,
        hints={"approve_plan": APPROVE_PLAN_HINT},
        defaults=tree_defaults() if strategy == "tree" else None,
    )
    from taskdecomp import durable  # the engine, once the arguments are known to be right
    from taskdecomp.engine import run
    from taskdecomp.settings import choose_model, load_openai_settings

    settings = load_settings()
    openai_settings = load_openai_settings()
    roles = settings.role_models(
        executor=executor_model,
        replanner=replanner_model,
        rollup=rollup_model,
        combiner=combiner_model,
    )
    planner, role_models = build_models(
        choose_model(model, settings, openai_settings, local_available=_app.local_model_available),
        cast("dict[Role, str]", roles),
        base_url=base_url,
        output_mode=output_mode,
    )
    budget = settings.budget(model=planner, **budget_flags)  # after the model: its deadline
    allowed = names(allow)
    from taskdecomp.models import prices

    prices.require_prices([planner, *role_models.values()], budget.max_cost_usd)
    durable.lease_seconds(settings.lease_seconds)  # refused here, before a store is created
    toolset = load_tools(tools)  # before the run: Ctrl-C in a slow import just exits
    new_store = tree.plan_id is None  # a stored plan tree is read from a store that exists
    with open_run_store(settings, db, create=new_store, quiet=as_json) as store:
        env = _app.environment(settings, store, durability)
        return until_done(
            lambda on_event: run(
                text or "",  # none: the stored tree's title, or its node's name
                tools=toolset,
                model=planner,
                roles=role_models,
                allow=allowed,
                budget=budget,
                on_event=on_event,
                strategy=strategy,
                options=options,
                env=env,
                stream_plan=settings.stream_plan if stream_plan is None else stream_plan,
                output_type=output_type,
            ),
            as_json=as_json,
            db=db,
            show=result_view(store) if strategy == "tree" else None,
        )


def read_answer_schema(path: Path) -> AnswerType:
    """The answer type of ``--answer-schema PATH``: a JSON schema object in a file.

    Raises:
        ConfigError: the file cannot be read, is not JSON, or holds no JSON object (exit 2).
    """
    import json

    from taskdecomp.answertype import answer_type
    from taskdecomp.errors import ConfigError

    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(
            f"--answer-schema {str(path)!r} cannot be read ({exc.strerror or exc}); "
            "give a JSON schema file"
        ) from None
    except ValueError as exc:
        raise ConfigError(f"--answer-schema {str(path)!r} is not JSON: {exc}") from None
    if not isinstance(schema, dict):
        raise ConfigError(
            f"--answer-schema {str(path)!r} holds a JSON {type(schema).__name__}, not a "
            'schema object such as {"type": "object", "properties": {...}}'
        )
    return answer_type(schema)


def result_view(store: SqlStore) -> Callable[[RunResult], None]:
    """How a command prints the result of a run that may be a tree run: with its tree."""
    from taskdecomp.cli import treeview, views
    from taskdecomp.cli.display import console

    def show(result: RunResult) -> None:
        stored = store.load_run(result.run_id)
        tree = treeview.tree_of(store, stored)
        views.summary(console(), result, debug=debug_enabled(), tree=tree)

    return show


def until_done(
    start: Callable[[Subscriber], Coroutine[Any, Any, RunResult]],
    *,
    as_json: bool,
    db: str | None = None,
    show: Callable[[RunResult], None] | None = None,
) -> int:
    """Run ``start(on_event)`` and report it; on Ctrl-C, report the cancelled run (130).

    Without ``as_json``, stderr shows what the run does while it works (:class:`Activity`).
    """
    from taskdecomp.cli.display import Activity, console
    from taskdecomp.events import RunStopped
    from taskdecomp.runtime import run_blocking

    ended: list[RunResult] = []
    activity = None if as_json else Activity(console(stderr=True))

    def on_event(event: Event) -> None:
        if isinstance(event, RunStopped):
            ended.append(event.result)
        if activity is not None:
            activity(event)

    try:
        with activity or contextlib.nullcontext():
            result = run_blocking(start(on_event))
    except KeyboardInterrupt:
        if not ended:
            raise
        report(ended[-1], as_json=as_json, show=show)
        _stopped_by_ctrl_c(ended[-1], db)
        return EXIT_INTERRUPTED
    code = report(result, as_json=as_json, show=show)
    _stopped_at_deadline(result, db)
    return code


def _stopped_by_ctrl_c(result: RunResult, db: str | None) -> None:
    if result.stop_reason == stops.CANCELLED:
        _hint(
            f"stopped by Ctrl-C; run {result.run_id} is stored as cancelled. Continue it with: "
            f"taskdecomp resume {result.run_id}{_db_flag(db)}"
        )


APPROVE_PLAN_HINT = (
    "to have the plan approved before it runs (with plan_execute, a tool marked "
    "@tool(needs_approval=True) waits for approval before each call)"
)
"""Said when ``--approve-plan`` is given to a strategy without plan approvals."""


def _stopped_at_deadline(result: RunResult, db: str | None) -> None:
    """Say that a run out of time keeps what it did, and how to give it more."""
    if result.stop_reason == stops.MAX_SECONDS:
        _hint(
            f"run {result.run_id} is stored with the steps it finished. Give it more time "
            f"with: taskdecomp resume {result.run_id} --max-seconds SECONDS{_db_flag(db)}"
        )


def _hint(text: str) -> None:
    """What to do next, on stderr."""
    from taskdecomp.cli.display import console, literal

    console(stderr=True).print(literal(text, "yellow"), soft_wrap=True)


def _db_flag(db: str | None) -> str:
    import shlex

    return f" --db {shlex.quote(db)}" if db else ""


def report(
    result: RunResult, *, as_json: bool, show: Callable[[RunResult], None] | None = None
) -> int:
    """Print ``result``; return the exit code (0 ok, 3 paused, 1 stopped).

    ``show``, when given, prints the result instead of the usual summary.
    """
    from taskdecomp.cli import views
    from taskdecomp.cli.display import console

    if as_json:
        echo_json(result.to_dict())
    elif show is not None:
        show(result)
    else:
        views.summary(console(), result, debug=debug_enabled())
    if result.ok:
        return 0
    return EXIT_PAUSED if result.status == "paused" else EXIT_STOPPED


@app.command("runs")
@click.option(
    "--limit",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="Most runs to list, newest first (0: all).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
@DB_OPTION
def runs_command(limit: int, as_json: bool, db: str | None) -> int:
    """List stored runs: id, status, stop reason, start time, duration and goal."""
    from taskdecomp.cli import views
    from taskdecomp.cli.display import console

    with open_run_store(load_settings(), db) as store:
        summaries = store.list_runs(limit=limit or None)
    if as_json:
        echo_json([_summary_dict(s) for s in summaries])
        return 0
    views.runs_table(console(), summaries, store_name=store.name)
    return 0


@app.command("show")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print the stored run as JSON.")
@DB_OPTION
def show_command(run_id: str, as_json: bool, db: str | None) -> int:
    """Print a stored run: its plan, trace and history.

    A run of the tree strategy is drawn as its plan tree, each node with its status and
    its result; with --json, the tree is under "tree".
    """
    from taskdecomp.cli import treeview, views
    from taskdecomp.cli.display import console
    from taskdecomp.run import RunId

    with open_run_store(load_settings(), db) as store:
        stored = store.load_run(RunId(run_id))
        tree = treeview.tree_of(store, stored)
    if as_json:
        data = stored.to_dict()
        if treeview.is_tree(stored):
            data["tree"] = tree
        echo_json(data)
    else:
        views.show_stored(console(), stored, tree=tree)
    return 0


@app.command("resume")
@click.argument("run_id")
@click.option(
    "--tools",
    multiple=True,
    help="Toolset, repeated for several (default: the ones the run was started with).",
)
@click.option("--model", "--planner-model", help="Planner model (default: the run's).")
@click.option("--combiner-model", help="Model for the combine call (default: the run's).")
@role_model_options(default="the run's", env=False)
@click.option("--base-url", help="OpenAI-compatible server for openai: models.")
@price_options
@OUTPUT_MODE_OPTION
@click.option("--allow", help="Comma-separated tools the plan may use (default: the run's).")
@click.option(
    "--max-seconds",
    type=click.FloatRange(min=0, min_open=True),
    help="Deadline for this resume (default: the run's).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@DB_OPTION
@DURABILITY_OPTION
@TRACE_CONTENT_OPTION
@DEBUG_OPTION
@LOCAL_THREADS_OPTION
def resume_command(
    run_id: str,
    tools: tuple[str, ...],
    model: str | None,
    combiner_model: str | None,
    executor_model: str | None,
    replanner_model: str | None,
    rollup_model: str | None,
    base_url: str | None,
    output_mode: OutputMode | None,
    allow: str | None,
    max_seconds: float | None,
    as_json: bool,
    db: str | None,
    durability: Durability | None,
) -> int:
    """Continue RUN_ID after a crash, a kill or a max_seconds stop, without repeating steps.

    Finished steps are not run again. An unsafe step that started and left no result is not
    called again: the run stops with interrupted_unknown_outcome:<step>. A run in flight in
    another process is refused until its lease expires (TASKDECOMP_LEASE_SECONDS, 30 s after
    that process died). Exit code: 0 on success, 1 when the run stopped, 2 on usage errors
    (an unknown run id, no store, a run owned by another process, a run that waits for
    approval), 130 on Ctrl-C.
    """
    from taskdecomp import runconfig
    from taskdecomp.cli import treeview
    from taskdecomp.cli.display import console, literal
    from taskdecomp.engine import resume
    from taskdecomp.run import RunId

    settings = load_settings()
    with open_run_store(settings, db) as store:
        stored = store.load_run(RunId(run_id))
        shown = result_view(store) if treeview.is_tree(stored) else None
        if not stored.resumable and stored.summary.status != "paused":
            summary = stored.summary
            console(stderr=True).print(
                literal(
                    f"run {run_id} already ended ({summary.status}, {summary.stop_reason}); "
                    "nothing to resume",
                    limit=2000,
                ),
                soft_wrap=True,
            )
            return report(stored.result(), as_json=as_json, show=shown)
        budget = runconfig.stored_config(stored).budget
        if max_seconds is not None:
            budget = dataclasses.replace(budget, max_seconds=max_seconds)
        given = {
            "executor": executor_model,
            "replanner": replanner_model,
            "rollup": rollup_model,
            "combiner": combiner_model,
        }
        planner, role_models = _resume_models(stored, model, given, base_url, output_mode)
        source = tools or stored.tools  # none stored: the strategy's own (a workflow's) or an error
        toolset = load_tools(source) if source else None
        return until_done(
            lambda on_event: resume(
                run_id,
                tools=toolset,
                model=planner,
                roles=role_models,
                allow=names(allow),
                budget=budget,
                on_event=on_event,
                env=_app.environment(settings, store, durability),
            ),
            as_json=as_json,
            db=db,
            show=shown,
        )


def _resume_models(
    stored: StoredRun,
    model: str | None,
    given: Mapping[str, str | None],
    base_url: str | None,
    output_mode: OutputMode | None,
) -> tuple[Model | None, dict[Role, Model] | dict[str, str]]:
    """The run's model and its role models: the flags', else the ones stored with the run."""
    from taskdecomp import runconfig

    roles = {str(role): spec for role, spec in runconfig.stored_config(stored).roles.items()}
    roles.update({role: spec for role, spec in given.items() if spec})
    planner_spec = model or stored.model
    if planner_spec is None:
        return None, roles  # resume() explains what is missing
    return build_models(
        planner_spec, cast("dict[Role, str]", roles), base_url=base_url, output_mode=output_mode
    )


def _summary_dict(summary: RunSummary) -> dict[str, Any]:
    return {
        "run_id": summary.run_id,
        "goal": summary.goal,
        "status": summary.status,
        "stop_reason": summary.stop_reason,
        "started_at": summary.started_at,
        "finished_at": summary.finished_at,
        "seconds": summary.seconds,
    }
