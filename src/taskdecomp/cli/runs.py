"""``run``, ``runs``, ``show`` and ``resume``: plan-and-execute runs and the run store."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from taskdecomp import durable
from taskdecomp.cli import _app
from taskdecomp.cli._app import (
    DB_OPTION,
    EXIT_INTERRUPTED,
    EXIT_PAUSED,
    EXIT_STOPPED,
    app,
    build_models,
    echo_json,
    names,
    open_run_store,
    short,
    when,
)
from taskdecomp.events import (
    AgentTurn,
    ApprovalRequested,
    Event,
    ModelCalled,
    PlanCreated,
    PlanRevised,
    ReplanDecided,
    RunStopped,
    StepFinished,
    StepStarted,
    Subscriber,
)
from taskdecomp.models import Model
from taskdecomp.plan import Step
from taskdecomp.prompts import check_directory
from taskdecomp.run import RunId, RunResult
from taskdecomp.runtime import run_blocking
from taskdecomp.settings import choose_model, load_openai_settings, load_settings
from taskdecomp.store import RunSummary, StoredRun
from taskdecomp.strategies.plan_execute import STRATEGIES, Strategy, resume, run
from taskdecomp.strategies.replan import PROMPT_NAMES, ReplanOptions
from taskdecomp.tools import load_toolset


@app.command("run")
@click.argument("goal")
@click.option("--tools", required=True, help="Toolset: a .py file or an importable module.")
@click.option(
    "--model",
    help="Planner model: openai:MODEL, local, local:PATH.gguf or scripted:PATH.  "
    "[env: TASKDECOMP_MODEL; else openai:$OPENAI_MODEL when OPENAI_API_KEY is set; else local]",
)
@click.option(
    "--combiner-model",
    help="Model for the combine call (default: the planner's).  [env: TASKDECOMP_COMBINER_MODEL]",
)
@click.option(
    "--base-url",
    help="OpenAI-compatible server for openai: models.  [env: OPENAI_BASE_URL]",
)
@click.option("--allow", help="Comma-separated tools the plan may use (default: all).")
@click.option("--max-plan-steps", type=click.IntRange(min=1), help="Most steps in a plan. [6]")
@click.option("--max-execute-steps", type=click.IntRange(min=1), help="Most steps run. [8]")
@click.option("--max-tool-calls", type=click.IntRange(min=1), help="Most tool calls. [8]")
@click.option("--max-seconds", type=click.FloatRange(min=0, min_open=True), help="Deadline. [60]")
@click.option("--max-parallel", type=click.IntRange(min=1), help="Most DAG steps at once. [8]")
@click.option("--max-llm-calls", type=click.IntRange(min=0), help="Most model calls. [none]")
@click.option("--max-tokens", type=click.IntRange(min=0), help="Most model tokens. [none]")
@click.option(
    "--max-cost-usd", type=click.FloatRange(min=0), help="Most model spend in USD. [none]"
)
@click.option(
    "--strategy",
    type=click.Choice(STRATEGIES),
    default="plan_execute",
    show_default=True,
    help="plan_execute: plan once, run, combine. replan: plan, run the ready steps, replan.",
)
@click.option(
    "--max-iterations",
    type=click.IntRange(min=1),
    help="replan: most execute/replan rounds. [10]",
)
@click.option(
    "--max-agent-turns",
    type=click.IntRange(min=1),
    help="replan: most executor agent turns per instruction step. [20]",
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
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@DB_OPTION
def run_command(
    goal: str,
    tools: str,
    model: str | None,
    combiner_model: str | None,
    base_url: str | None,
    allow: str | None,
    strategy: Strategy,
    max_iterations: int | None,
    max_agent_turns: int | None,
    approve_plan: bool,
    prompts: Path | None,
    as_json: bool,
    db: str | None,
    **budget_flags: Any,
) -> int:
    """Plan GOAL with the model, validate the plan, execute it with the tools, combine.

    Every budget flag also reads TASKDECOMP_<FLAG> (e.g. TASKDECOMP_MAX_TOOL_CALLS) from the
    environment or .env. Exit code: 0 on success, 1 when the run stopped, 2 on usage errors,
    3 when the run waits for approval (taskdecomp approve / reject), 130 on Ctrl-C (the run
    is stored as cancelled and can be resumed).
    """
    replan = _replan_options(strategy, max_iterations, max_agent_turns, approve_plan, prompts)
    settings = load_settings()
    budget = settings.budget(**budget_flags)
    openai_settings = load_openai_settings()
    planner, combiner = build_models(
        choose_model(model, settings, openai_settings, local_available=_app.local_model_available),
        combiner_model or settings.combiner_model,
        base_url=base_url,
        openai_settings=openai_settings,
    )
    allowed = names(allow)
    toolset = load_toolset(tools)  # before the run: Ctrl-C in a slow import just exits
    with open_run_store(settings, db) as store:
        return until_done(
            lambda on_event: run(
                goal,
                tools=toolset,
                model=planner,
                combiner_model=combiner,
                allow=allowed,
                budget=budget,
                on_event=on_event,
                store=store,
                strategy=strategy,
                replan=replan,
                lease_seconds=settings.lease_seconds,
            ),
            as_json=as_json,
        )


def until_done(
    start: Callable[[Subscriber], Coroutine[Any, Any, RunResult]], *, as_json: bool
) -> int:
    """Run ``start(on_event)`` and report it; on Ctrl-C, report the cancelled run (130)."""
    ended: list[RunResult] = []
    show = None if as_json else progress(Console(stderr=True, highlight=False))

    def on_event(event: Event) -> None:
        if isinstance(event, RunStopped):
            ended.append(event.result)
        if show is not None:
            show(event)

    try:
        result = run_blocking(start(on_event))
    except KeyboardInterrupt:
        if not ended:
            raise
        report(ended[-1], as_json=as_json)
        return EXIT_INTERRUPTED
    return report(result, as_json=as_json)


def _replan_options(
    strategy: Strategy,
    max_iterations: int | None,
    max_agent_turns: int | None,
    approve_plan: bool,
    prompts: Path | None,
) -> ReplanOptions | None:
    given = {
        "--max-iterations": max_iterations is not None,
        "--max-agent-turns": max_agent_turns is not None,
        "--approve-plan": approve_plan,
        "--prompts": prompts is not None,
    }
    if strategy != "replan":
        used = [flag for flag, on in given.items() if on]
        if used:
            raise click.UsageError(f"{', '.join(used)} apply to --strategy replan only")
        return None
    if prompts is not None:
        check_directory(prompts, PROMPT_NAMES)
    return ReplanOptions(
        max_iterations=max_iterations or 10,
        max_agent_turns=max_agent_turns or 20,
        approve_plan=approve_plan,
        prompts=prompts,
    )


def report(result: RunResult, *, as_json: bool) -> int:
    """Print ``result``; return the exit code (0 ok, 3 paused, 1 stopped)."""
    if as_json:
        echo_json(result.to_dict())
    else:
        _summary(Console(highlight=False), result)
    if result.ok:
        return 0
    return EXIT_PAUSED if result.status == "paused" else EXIT_STOPPED


def progress(console: Console) -> Callable[[Event], None]:
    """Print one line per event worth a person's attention."""

    def show(event: Event) -> None:
        if isinstance(event, ModelCalled):
            mark = "[green]ok[/]" if event.ok else "[red]failed[/]"
            console.print(f"[dim]model[/] {event.phase} {mark} ({event.seconds:.2f}s)")
        elif isinstance(event, PlanCreated):
            console.print(f"[dim]plan[/] {len(event.plan.steps)} steps")
        elif isinstance(event, StepStarted):
            console.print(
                f"[dim]step[/] {event.step_no} {escape(event.step.id)} -> {event.step.tool_name}"
            )
        elif isinstance(event, StepFinished) and not event.entry.ok:
            reason = event.entry.stop_reason or event.entry.error
            console.print(f"[red]step {event.entry.step_no} stopped:[/] {escape(str(reason))}")
        else:
            _replanprogress(console, event)

    return show


def _what(step: Step) -> str:
    """A step's arguments, or its instruction."""
    if step.instruction is not None:
        return escape(short(step.instruction, 200))
    return escape(short(json.dumps(dict(step.args), ensure_ascii=False), 200))


def _approval(console: Console, run_id: str, approval: dict[str, Any]) -> None:
    subject = short(json.dumps(approval.get("subject"), ensure_ascii=False), 2000)
    console.print(Panel(escape(subject), title=f"waiting for approval: {approval.get('kind')}"))
    console.print(
        f"approve: taskdecomp approve {run_id}   reject: taskdecomp reject {run_id} --reason TEXT"
    )


def _replanprogress(console: Console, event: Event) -> None:
    if isinstance(event, ReplanDecided):
        console.print(f"[dim]replan[/] round {event.iteration}: {event.kind}")
    elif isinstance(event, PlanRevised):
        change = "revised" if event.changed else "unchanged"
        console.print(f"[dim]plan[/] {change}: {len(event.plan.steps)} steps left")
    elif isinstance(event, AgentTurn):
        what = f"call {event.tool}" if event.action == "call" else "finish"
        console.print(f"[dim]agent[/] step {event.step_no} turn {event.turn}: {escape(what)}")
    elif isinstance(event, ApprovalRequested):
        console.print(f"[yellow]waiting for approval:[/] {escape(event.request.describe())}")


def _summary(console: Console, result: RunResult) -> None:
    colour = "green" if result.ok else "red"
    console.print(f"[bold {colour}]{result.status}[/] stop_reason={escape(result.stop_reason)}")
    if result.llm_phase:
        console.print(f"llm_phase: {result.llm_phase}")
    if result.message:
        console.print(f"[dim]{escape(result.message)}[/]")
    if result.approval is not None:
        _approval(console, result.run_id, result.approval)
    if result.plan is not None:
        table = Table(title="plan", title_justify="left")
        for column in ("#", "id", "title", "tool", "args", "result"):
            table.add_column(column)
        outcomes = {entry.step_id: entry for entry in result.trace}
        for no, step in enumerate(result.plan.steps, start=1):
            entry = outcomes.get(step.id)
            status = (
                "-" if entry is None else "ok" if entry.ok else (entry.stop_reason or "cancelled")
            )
            table.add_row(
                str(no), escape(step.id), escape(step.title), step.tool_name, _what(step), status
            )
        console.print(table)
    elif result.raw_plan is not None:
        console.print(Panel(escape(json.dumps(result.raw_plan)[:2000]), title="raw_plan"))
    if result.answer:
        console.print(Panel(escape(result.answer), title="answer"))
    usage = result.usage
    console.print(
        f"[dim]run {result.run_id} · {usage.llm_calls} model calls · {usage.tool_calls} tool "
        f"calls · {usage.tokens_in}+{usage.tokens_out} tokens · ${usage.cost_usd:.4f} · "
        f"{usage.seconds:.2f}s[/]"
    )


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
    """List stored runs: id, goal, status, stop reason, start time and duration."""
    with open_run_store(load_settings(), db) as store:
        summaries = store.list_runs(limit=limit or None)
    if as_json:
        echo_json([_summary_dict(s) for s in summaries])
        return 0
    table = Table(title=escape(f"runs in {store.name}"), title_justify="left")
    for column in ("id", "status", "stop reason", "started", "duration"):
        table.add_column(column, no_wrap=True)
    table.add_column("goal", overflow="ellipsis", no_wrap=True, min_width=8)
    for summary in summaries:
        table.add_row(
            escape(short(summary.run_id, 64)),
            summary.status,
            escape(short(summary.stop_reason or "-", 60)),
            when(summary.started_at),
            "-" if summary.seconds is None else f"{summary.seconds:.2f}s",
            escape(short(summary.goal, 60)),
        )
    Console(highlight=False).print(table)
    return 0


@app.command("show")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print the stored run as JSON.")
@DB_OPTION
def show_command(run_id: str, as_json: bool, db: str | None) -> int:
    """Print a stored run: its plan, trace and history."""
    with open_run_store(load_settings(), db) as store:
        stored = store.load_run(RunId(run_id))
    if as_json:
        echo_json(stored.to_dict())
    else:
        show_stored(Console(highlight=False), stored)
    return 0


@app.command("resume")
@click.argument("run_id")
@click.option("--tools", help="Toolset (default: the one the run was started with).")
@click.option("--model", help="Planner model (default: the run's).")
@click.option("--combiner-model", help="Model for the combine call (default: the run's).")
@click.option("--base-url", help="OpenAI-compatible server for openai: models.")
@click.option("--allow", help="Comma-separated tools the plan may use (default: the run's).")
@click.option(
    "--max-seconds",
    type=click.FloatRange(min=0, min_open=True),
    help="Deadline for this resume (default: the run's).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@DB_OPTION
def resume_command(
    run_id: str,
    tools: str | None,
    model: str | None,
    combiner_model: str | None,
    base_url: str | None,
    allow: str | None,
    max_seconds: float | None,
    as_json: bool,
    db: str | None,
) -> int:
    """Continue RUN_ID after a crash, a kill or a max_seconds stop, without repeating steps.

    Finished steps are not run again. An unsafe step that started and left no result is not
    called again: the run stops with interrupted_unknown_outcome:<step>. A run in flight in
    another process is refused until its lease expires (TASKDECOMP_LEASE_SECONDS, 30 s after
    that process died). Exit code: 0 on success, 1 when the run stopped, 2 on usage errors
    (an unknown run id, no store, a run owned by another process, a run that waits for
    approval), 130 on Ctrl-C.
    """
    settings = load_settings()
    with open_run_store(settings, db) as store:
        stored = store.load_run(RunId(run_id))
        if not stored.resumable and stored.summary.status != "paused":
            summary = stored.summary
            click.echo(
                short(
                    f"run {run_id} already ended ({summary.status}, {summary.stop_reason}); "
                    "nothing to resume",
                    2000,
                ),
                err=True,
            )
            return report(stored.result(), as_json=as_json)
        budget = durable.stored_config(stored).budget
        if max_seconds is not None:
            budget = dataclasses.replace(budget, max_seconds=max_seconds)
        planner, combiner = _resume_models(stored, model, combiner_model, base_url)
        toolset = load_toolset(tools or durable.require(stored.tools, "tools", stored.run_id))
        return until_done(
            lambda on_event: resume(
                run_id,
                store=store,
                tools=toolset,
                model=planner,
                combiner_model=combiner,
                allow=names(allow),
                budget=budget,
                on_event=on_event,
                lease_seconds=settings.lease_seconds,
            ),
            as_json=as_json,
        )


def _resume_models(
    stored: StoredRun, model: str | None, combiner_model: str | None, base_url: str | None
) -> tuple[Model | str | None, Model | str | None]:
    planner_spec = model or stored.model
    if planner_spec is None:
        return None, combiner_model  # resume() explains what is missing
    combiner_spec = combiner_model or durable.stored_config(stored).combiner_model
    return build_models(
        planner_spec, combiner_spec, base_url=base_url, openai_settings=load_openai_settings()
    )


def show_stored(console: Console, stored: StoredRun) -> None:
    """Print a stored run for people: header, plan, trace, history and answer."""
    summary = stored.summary
    colour = {"ok": "green", "stopped": "red"}.get(summary.status, "yellow")
    console.print(
        f"[bold]run {escape(short(summary.run_id, 200))}[/] [bold {colour}]{summary.status}[/] "
        f"stop_reason={escape(short(str(summary.stop_reason or '-'), 200))}"
    )
    console.print(f"goal: {escape(short(summary.goal, 2000))}")
    console.print(
        f"[dim]model {escape(str(stored.model))} · tools {escape(str(stored.tools))} · started "
        f"{when(summary.started_at)} · segments {stored.segments}[/]"
    )
    if stored.message:
        console.print(f"[dim]{escape(short(stored.message, 2000))}[/]")
    pending = stored.pending_approval()
    if pending is not None:
        _approval(console, stored.run_id, pending)
    if stored.lease is not None:
        lease = stored.lease
        console.print(
            f"[dim]owner {escape(short(lease.owner, 200))} · epoch {lease.epoch} · lease "
            f"expires {when(lease.expires_at)}[/]"
        )
    if stored.plan is not None:
        _plan_table(console, stored)
    elif stored.raw_plan is not None:
        raw = short(json.dumps(stored.raw_plan, ensure_ascii=False), 2000)
        console.print(Panel(escape(raw), title="raw_plan"))
    _trace_table(console, stored)
    for entry in stored.history:
        text = short(json.dumps(entry.observation, ensure_ascii=False), 2000)
        title = f"step {entry.step_no} {escape(short(entry.plan_step.id, 80))}"
        console.print(Panel(escape(text), title=title))
    if stored.answer:
        console.print(Panel(escape(short(stored.answer, 100_000)), title="answer"))


def _plan_table(console: Console, stored: StoredRun) -> None:
    assert stored.plan is not None
    done = stored.finished_steps()
    table = Table(title="plan", title_justify="left")
    for column in ("#", "id", "title", "tool", "args", "done"):
        table.add_column(column)
    for no, step in enumerate(stored.plan.steps, start=1):
        mark = "yes" if step.id in done else "-"
        cells = (step.id, step.title, step.tool_name)
        table.add_row(str(no), *(escape(short(cell, 80)) for cell in cells), _what(step), mark)
    console.print(table)


def _trace_table(console: Console, stored: StoredRun) -> None:
    table = Table(title="trace", title_justify="left")
    for column in ("#", "step", "tool", "segment", "state", "seconds", "stop / error"):
        table.add_column(column)
    for attempt in stored.attempts:
        trace = attempt.trace
        note = "" if trace is None else str(trace.stop_reason or trace.error or "")
        table.add_row(
            str(attempt.start.step_no),
            escape(short(attempt.start.step_id, 80)),
            escape(short(trace.tool, 80)) if trace is not None else "-",
            str(attempt.start.segment),
            attempt.state,
            "-" if trace is None else f"{trace.seconds:.3f}",
            escape(short(note, 80)),
        )
    console.print(table)


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
