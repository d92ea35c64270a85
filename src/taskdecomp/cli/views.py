"""Runs for people: a result, a stored run, the list of runs.

Every table is fitted to the console's width (:func:`~taskdecomp.cli.display.fitted_table`):
ids and states stay whole and free text wraps or shrinks. A plan that declares
``depends_on`` shows it in an ``after`` column, so a DAG is visible. A ``tree`` run is
drawn as its plan tree (:mod:`taskdecomp.cli.treeview`) instead of its plan table.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from taskdecomp.cli import treeview
from taskdecomp.cli.display import Column, fitted_table, line, literal
from taskdecomp.plan import Plan, Step
from taskdecomp.run import RunResult

if TYPE_CHECKING:
    from taskdecomp.store import RunSummary, StoredRun

WIDE = 120
"""From this width on, ``runs`` prints whole start times (else month, day, hours, minutes)."""
TEXT_LIMIT = 200
"""Most characters of a step's title, arguments or instruction in a plan table."""
GOAL_WIDTH = 16
"""The narrowest goal column of ``runs``: three lines of it show at least 30 characters."""


def summary(
    console: Console,
    result: RunResult,
    *,
    debug: bool = False,
    tree: Mapping[str, Any] | None = None,
) -> None:
    """Print a run's result: how it ended, its plan, its answer and what it spent.

    ``tree``, a ``tree`` run's tree (:func:`~taskdecomp.cli.treeview.tree_of`), is drawn
    instead of the plan table.
    """
    colour = "green" if result.ok else "red"
    console.print(
        line((result.status, f"bold {colour}"), " stop_reason=", literal(result.stop_reason))
    )
    if result.llm_phase:
        console.print(line("llm_phase: ", result.llm_phase))
    if result.message and result.approval is None:  # an approval says it with the run's id
        console.print(literal(result.message, "dim"))
    if result.stop_reason.startswith("tool_error:") and not debug:
        console.print(literal("add --debug to see where the tool raised (file and line)", "dim"))
    if tree is not None:
        _tree(console, result.run_id, result.approval, tree)
    else:
        _result_plan(console, result)
    if result.answer:
        console.print(Panel(literal(result.answer), title="answer", title_align="left"))
    console.print(usage_line(result))


def _result_plan(console: Console, result: RunResult) -> None:
    """The plan table with each step's outcome (or the raw plan), and what waits for approval."""
    if result.approval is not None and not _in_table(result.approval, result.plan):
        _approval(console, result.run_id, result.approval)
    if result.plan is not None:
        outcomes = {entry.step_id: entry for entry in result.trace}

        def outcome(step: Step) -> str:
            entry = outcomes.get(step.id)
            if entry is None:
                return "-"
            return "ok" if entry.ok else (entry.stop_reason or "cancelled")

        console.print(_plan_table(result.plan, "result", outcome, width=console.width))
        if result.approval is not None and _in_table(result.approval, result.plan):
            _plan_approval(console, result.run_id, result.approval)
    elif result.raw_plan is not None:
        raw = _json(result.raw_plan, 2000)
        console.print(Panel(literal(raw), title="raw_plan", title_align="left"))


def _tree(
    console: Console, run_id: str, approval: Mapping[str, Any] | None, tree: Mapping[str, Any]
) -> None:
    """A tree run's tree, and what it waits for: a split by its node, anything else as is."""
    treeview.draw(console, tree)
    if approval is None:
        return
    split = treeview.pending_split(approval, tree)
    if split is None:
        _approval(console, run_id, approval)
        return
    console.print(line(("waiting for approval: ", "yellow"), split), soft_wrap=True)
    _decide(console, run_id)


def usage_line(result: RunResult) -> Text:
    """The run's id and what it spent, on one dim line."""
    usage = result.usage
    return literal(
        f"run {result.run_id} · {usage.llm_calls} model calls · {usage.tool_calls} tool "
        f"calls · {usage.tokens_in}+{usage.tokens_out} tokens · {cost_text(usage.cost_usd)} · "
        f"{usage.seconds:.2f}s" + (f" · {usage.repairs} repaired" if usage.repairs else ""),
        "dim",
    )


def cost_text(cost_usd: float | None) -> str:
    """A run's spend as the CLI shows it: ``$0.0123``, or ``cost unknown``."""
    return "cost unknown" if cost_usd is None else f"${cost_usd:.4f}"


def show_stored(
    console: Console, stored: StoredRun, *, tree: Mapping[str, Any] | None = None
) -> None:
    """Print a stored run: header, plan, trace, history and answer.

    ``tree``, a ``tree`` run's tree, is drawn instead of the plan and the history (each
    node's result is in it, shortened; ``show --json`` has them whole).
    """
    head = stored.summary
    colour = {"ok": "green", "stopped": "red"}.get(head.status, "yellow")
    console.print(
        line(
            ("run ", "bold"),
            literal(head.run_id, "bold", limit=200),
            " ",
            (head.status, f"bold {colour}"),
            " stop_reason=",
            literal(head.stop_reason or "-", limit=200),
        )
    )
    console.print(line("goal: ", literal(head.goal, limit=2000)))
    console.print(
        literal(
            f"model {stored.model or '-'} · tools {stored.tools or '-'} · "
            f"started {when(head.started_at)} · "
            f"segments {stored.segments}",
            "dim",
        )
    )
    pending = stored.pending_approval()
    if stored.message and pending is None:
        console.print(literal(stored.message, "dim", limit=2000))
    if tree is None and pending is not None and not _in_table(pending, stored.plan):
        _approval(console, stored.run_id, pending)
    if stored.lease is not None:
        lease = stored.lease
        console.print(
            literal(
                f"owner {lease.owner} · epoch {lease.epoch} · lease expires "
                f"{when(lease.expires_at)}",
                "dim",
                limit=300,
            )
        )
    if tree is not None:
        _tree(console, stored.run_id, pending, tree)
    else:
        _stored_plan(console, stored, pending)
    _trace_table(console, stored)
    if tree is None:
        for entry in stored.history:
            title = line(f"step {entry.step_no} ", literal(entry.plan_step.id, limit=80))
            body = literal(_json(entry.observation, 2000))
            console.print(Panel(body, title=title, title_align="left"))
    if stored.answer:
        console.print(Panel(literal(stored.answer, limit=100_000), title="answer"))


def _stored_plan(console: Console, stored: StoredRun, pending: Mapping[str, Any] | None) -> None:
    """The plan table with the steps done (or the raw plan), and what waits for approval."""
    if stored.plan is not None:
        done = stored.finished_steps()
        console.print(
            _plan_table(
                stored.plan, "done", lambda s: "yes" if s.id in done else "-", width=console.width
            )
        )
        if pending is not None and _in_table(pending, stored.plan):
            _plan_approval(console, stored.run_id, pending)
    elif stored.raw_plan is not None:
        console.print(Panel(literal(_json(stored.raw_plan, 2000)), title="raw_plan"))


def runs_table(console: Console, summaries: list[RunSummary], *, store_name: str) -> None:
    """Print the list of runs: the id and status always whole, the goal cut to fit.

    Below :data:`WIDE` columns the goal takes up to three lines, and the start time goes
    before the goal gets narrower than :data:`GOAL_WIDTH`.
    """
    short = console.width < WIDE
    columns = [
        Column(header="id"),
        Column(header="status"),
        Column(header="stop reason", kind="wrap", breaks=":_"),
        Column(header="started", drop=1),
        Column(header="took", drop=2, justify="right"),
        Column(header="goal", kind="flex", min_width=GOAL_WIDTH, lines=3 if short else 1),
    ]
    rows = [
        [
            literal(s.run_id),
            literal(s.status),
            literal(s.stop_reason or "-", limit=200),
            literal(when(s.started_at, short=short)),
            literal("-" if s.seconds is None else f"{s.seconds:.2f}s"),
            literal(" ".join(s.goal.split()), limit=200),
        ]
        for s in summaries
    ]
    console.print(literal(f"runs in {store_name}", "bold"), overflow="fold")
    console.print(fitted_table(columns, rows, width=console.width))


def when(timestamp: float, *, short: bool = False) -> str:
    """A local time: ``2026-04-12 10:31:05``, or ``04-12 10:31`` when ``short``."""
    moment = datetime.fromtimestamp(timestamp).astimezone()
    return moment.strftime("%m-%d %H:%M" if short else "%Y-%m-%d %H:%M:%S")


def _plan_table(plan: Plan, last: str, mark: Callable[[Step], str], *, width: int) -> Table:
    columns = [
        Column(header="#", justify="right"),
        Column(header="id"),
        Column(header="title", kind="wrap", min_width=12),
        Column(header="tool"),
        Column(header="args", kind="wrap", min_width=12),
    ]
    if plan.is_dag:
        columns.append(Column(header="after", kind="wrap", min_width=8))
    columns.append(Column(header=last, kind="wrap", breaks=":_"))  # a stop reason
    rows = []
    for no, step in enumerate(plan.steps, start=1):
        row = [
            literal(no),
            literal(step.id, limit=80),
            literal(" ".join(step.title.split()), limit=TEXT_LIMIT),
            literal(step.tool_name, limit=80),
            literal(_what(step)),
        ]
        if plan.is_dag:
            row.append(literal(", ".join(step.depends_on or ()) or "-", limit=200))
        row.append(literal(mark(step), limit=200))
        rows.append(row)
    return fitted_table(columns, rows, width=width, title="plan")


def _trace_table(console: Console, stored: StoredRun) -> None:
    columns = [
        Column(header="#", justify="right"),
        Column(header="step"),
        Column(header="tool"),
        Column(header="segment", justify="right", drop=1),
        Column(header="state"),
        Column(header="seconds", justify="right", drop=2),
        Column(header="stop / error", kind="flex", min_width=10),
    ]
    rows = []
    for attempt in stored.attempts:
        trace = attempt.trace
        note = "" if trace is None else str(trace.stop_reason or trace.error or "")
        rows.append(
            [
                literal(attempt.start.step_no),
                literal(attempt.start.step_id, limit=80),
                literal(trace.tool if trace is not None else "-", limit=80),
                literal(attempt.start.segment),
                literal(attempt.state),
                literal("-" if trace is None else f"{trace.seconds:.3f}"),
                literal(" ".join(note.split()), limit=200),
            ]
        )
    console.print(fitted_table(columns, rows, width=console.width, title="trace"))


def _approval(console: Console, run_id: str, approval: Mapping[str, Any]) -> None:
    subject = _json(approval.get("subject"), 2000)
    title = f"waiting for approval: {approval.get('kind')}"
    console.print(Panel(literal(subject), title=literal(title), title_align="left"))
    _decide(console, run_id)


def _plan_approval(console: Console, run_id: str, approval: Mapping[str, Any]) -> None:
    """Say which steps of the plan table above wait for approval."""
    steps = [str(step.get("id")) for step in approval["subject"]["plan"]]
    console.print(
        line(("waiting for approval: ", "yellow"), f"steps {', '.join(steps)} of the plan above"),
        soft_wrap=True,
    )
    _decide(console, run_id)


def _decide(console: Console, run_id: str) -> None:
    console.print(
        literal(
            f"approve: taskdecomp approve {run_id}   reject: taskdecomp reject {run_id} "
            "--reason TEXT"
        ),
        soft_wrap=True,
    )


def _in_table(approval: Mapping[str, Any], plan: Plan | None) -> bool:
    """Whether the plan table shows every step ``approval`` asks about, whole."""
    subject = approval.get("subject")
    asked = subject.get("plan") if isinstance(subject, Mapping) else None
    if approval.get("kind") != "plan" or plan is None or not isinstance(asked, list):
        return False
    steps: dict[Any, Step] = {step.id: step for step in plan.steps}
    return all(
        isinstance(wanted, Mapping)
        and (step := steps.get(wanted.get("id"))) is not None
        and step.to_dict() == dict(wanted)
        and len(step.title) <= TEXT_LIMIT
        and len(step.instruction or json.dumps(dict(step.args), ensure_ascii=False)) <= TEXT_LIMIT
        for wanted in asked
    )


def _what(step: Step) -> str:
    """A step's arguments, or its instruction."""
    if step.instruction is not None:
        return step.instruction[:TEXT_LIMIT]
    return _json(dict(step.args), TEXT_LIMIT)


def _json(value: Any, limit: int) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


__all__ = ["runs_table", "show_stored", "summary", "when"]
