"""The ``taskdecomp`` command line.

Exit codes: 0 when the run succeeded, 1 when it stopped for any other reason, 2 for a usage
or configuration error (one line on stderr, no traceback).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from taskdecomp.errors import ConfigError
from taskdecomp.events import Event, ModelCalled, PlanCreated, StepFinished, StepStarted
from taskdecomp.run import RunResult
from taskdecomp.settings import load_settings
from taskdecomp.strategies.plan_execute import run_sync

EXIT_STOPPED = 1
EXIT_USAGE = 2


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="taskdecomp")
def app() -> None:
    """Controllable task-decomposition agents: plan, validate, execute, combine."""


@app.command("run")
@click.argument("goal")
@click.option("--tools", required=True, help="Toolset: a .py file or an importable module.")
@click.option("--model", help="Model string, e.g. scripted:PATH.  [env: TASKDECOMP_MODEL]")
@click.option("--allow", help="Comma-separated tools the plan may use (default: all).")
@click.option("--max-plan-steps", type=click.IntRange(min=1), help="Most steps in a plan. [6]")
@click.option("--max-execute-steps", type=click.IntRange(min=1), help="Most steps run. [8]")
@click.option("--max-tool-calls", type=click.IntRange(min=1), help="Most tool calls. [8]")
@click.option("--max-seconds", type=click.FloatRange(min=0, min_open=True), help="Deadline. [60]")
@click.option("--max-parallel", type=click.IntRange(min=1), help="Most DAG steps at once. [8]")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def run_command(
    goal: str,
    tools: str,
    model: str | None,
    allow: str | None,
    as_json: bool,
    **budget_flags: Any,
) -> int:
    """Plan GOAL with the model, validate the plan, execute it with the tools, combine.

    Every budget flag also reads TASKDECOMP_<FLAG> (e.g. TASKDECOMP_MAX_TOOL_CALLS) from the
    environment or .env. Exit code: 0 on success, 1 when the run stopped, 2 on usage errors.
    """
    settings = load_settings()
    budget = settings.budget(**budget_flags)
    chosen = model or settings.model
    if not chosen:
        raise ConfigError(
            "no model chosen: pass --model (e.g. scripted:PATH) or set TASKDECOMP_MODEL"
        )
    allowed = [name.strip() for name in allow.split(",") if name.strip()] if allow else None
    err = Console(stderr=True, highlight=False)
    result = run_sync(
        goal,
        tools=tools,
        model=chosen,
        allow=allowed,
        budget=budget,
        on_event=None if as_json else _progress(err),
    )
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        _summary(Console(highlight=False), result)
    return 0 if result.ok else EXIT_STOPPED


def _progress(console: Console) -> Callable[[Event], None]:
    def show(event: Event) -> None:
        if isinstance(event, ModelCalled):
            mark = "[green]ok[/]" if event.ok else "[red]failed[/]"
            console.print(f"[dim]model[/] {event.phase} {mark} ({event.seconds:.2f}s)")
        elif isinstance(event, PlanCreated):
            console.print(f"[dim]plan[/] {len(event.plan.steps)} steps")
        elif isinstance(event, StepStarted):
            console.print(
                f"[dim]step[/] {event.step_no} {escape(event.step.id)} -> {event.step.tool}"
            )
        elif isinstance(event, StepFinished) and not event.entry.ok:
            reason = event.entry.stop_reason or event.entry.error
            console.print(f"[red]step {event.entry.step_no} stopped:[/] {escape(str(reason))}")

    return show


def _summary(console: Console, result: RunResult) -> None:
    colour = "green" if result.ok else "red"
    console.print(f"[bold {colour}]{result.status}[/] stop_reason={escape(result.stop_reason)}")
    if result.llm_phase:
        console.print(f"llm_phase: {result.llm_phase}")
    if result.message:
        console.print(f"[dim]{escape(result.message)}[/]")
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
                str(no), step.id, step.title, step.tool, json.dumps(dict(step.args)), status
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


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI and exit with its code."""
    try:
        code = app.main(args=argv, prog_name="taskdecomp", standalone_mode=False)
    except click.UsageError as exc:
        _fail(exc.format_message())
    except click.ClickException as exc:
        _fail(exc.format_message())
    except click.Abort:
        _fail("aborted")
    except ConfigError as exc:
        _fail(str(exc))
    sys.exit(code if isinstance(code, int) else 0)


def _fail(message: str) -> None:
    first = " ".join(message.split())
    print(f"taskdecomp: error: {first}", file=sys.stderr)
    sys.exit(EXIT_USAGE)
