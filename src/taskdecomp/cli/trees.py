"""``taskdecomp decompose`` and ``taskdecomp tree``: grow and show stored plan trees.

Both end a plan drawn for people with the command that executes it (on stderr).
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from taskdecomp.cli import _app
from taskdecomp.cli._app import (
    DB_OPTION,
    EXIT_STOPPED,
    GOAL_FILE_OPTION,
    LOCAL_THREADS_OPTION,
    OUTPUT_MODE_OPTION,
    app,
    build_models,
    echo_json,
    load_settings,
    open_run_store,
    read_goal,
)
from taskdecomp.cli.display import Activity, Column, console, fitted_table, line, literal
from taskdecomp.cli.priceopts import price_options
from taskdecomp.decomposition import DecompositionResult
from taskdecomp.models.outputs import OutputMode
from taskdecomp.settings import choose_model, load_decomp_settings, load_openai_settings
from taskdecomp.store.trees import TreeRepository
from taskdecomp.strategies.decompose import PlanDecomposer
from taskdecomp.tree import NodeId, PlanTree, PlanTreeId


@app.command("decompose")
@LOCAL_THREADS_OPTION
@click.argument("goal", required=False)
@GOAL_FILE_OPTION
@click.option(
    "--plan", "plan_id", type=int, help="Decompose this stored plan instead of a new one."
)
@click.option("--node", "node_id", type=int, help="With --plan: decompose only this node.")
@click.option(
    "--expand-depth", type=click.IntRange(min=1), help="With --node: levels to create. [1]"
)
@click.option(
    "--overwrite/--append",
    default=None,
    help="With --node: replace its children, or add to them (default).",
)
@click.option("--model", help="The decomposer's model.  [env: DECOMP_MODEL; else as for run]")
@click.option(
    "--base-url", help="OpenAI-compatible server for openai: models.  [env: OPENAI_BASE_URL]"
)
@price_options
@OUTPUT_MODE_OPTION
@click.option("--max-depth", type=click.IntRange(min=1), help="Deepest level in plan mode. [3]")
@click.option("--max-children", type=click.IntRange(min=1), help="Most children per node. [6]")
@click.option(
    "--node-budget",
    "total_node_budget",
    type=click.IntRange(min=1),
    help="Most nodes created. [50]",
)
@click.option("--retry-limit", type=click.IntRange(min=0), help="Retries per node. [1]")
@click.option("--concurrency", type=click.IntRange(min=1), help="Model calls at once. [8]")
@click.option(
    "--no-auto", is_flag=True, help="With GOAL: only create the plan, do not decompose it."
)
@click.option("--json", "as_json", is_flag=True, help="Print the DecompositionResult as JSON.")
@DB_OPTION
def decompose_command(
    goal: str | None,
    goal_file: Path | None,
    plan_id: int | None,
    node_id: int | None,
    expand_depth: int | None,
    overwrite: bool | None,
    model: str | None,
    base_url: str | None,
    output_mode: OutputMode | None,
    no_auto: bool,
    as_json: bool,
    db: str | None,
    **budget_flags: Any,
) -> int:
    """Decompose GOAL into a new plan tree, or a stored plan (--plan), or one node (--node).

    GOAL may be - to read it from standard input (or use --goal-file). Budgets also read
    DECOMP_<NAME> from the environment or .env (DECOMP_MAX_DEPTH, ...).
    Exit code: 0 when every node asked was decomposed, 1 when a node failed or the deadline
    passed, 2 on usage errors.
    """
    goal = read_goal(goal, goal_file, required=False)
    _check_mode(goal, plan_id, node_id, expand_depth, overwrite)
    settings, decomp = load_settings(), load_decomp_settings()
    options = decomp.options(
        **budget_flags,
        expand_depth=expand_depth,
        replace=overwrite,
        auto_on_create=False if no_auto else None,
    )
    openai_settings = load_openai_settings()
    spec = model or decomp.model
    if spec is None:
        spec = choose_model(
            None, settings, openai_settings, local_available=_app.local_model_available
        )
    decomposer_model, _ = build_models(spec, None, base_url=base_url, output_mode=output_mode)
    activity = None if as_json else Activity(console(stderr=True))
    with open_run_store(settings, db, create=goal is not None, quiet=as_json) as store:
        repository = TreeRepository(store)
        decomposer = PlanDecomposer(
            repository,
            decomposer_model,
            options=options,
            on_progress=None if activity is None else activity.note,
        )
        with activity or contextlib.nullcontext():
            tree_id, result = asyncio.run(_decompose(decomposer, goal, plan_id, node_id))
        tree = repository.get_plan_tree(tree_id)
    if result is not None:
        code = _report(result, tree, as_json=as_json)
    elif as_json:
        echo_json(tree.to_dict())
        code = 0
    else:
        _draw(console(), tree)
        code = 0
    if not as_json:
        _run_hint(tree.id, db)
    return code


async def _decompose(
    decomposer: PlanDecomposer, goal: str | None, plan_id: int | None, node_id: int | None
) -> tuple[PlanTreeId, DecompositionResult | None]:
    """The plan worked on, and the decomposition (``None``: a new plan, not decomposed)."""
    if goal is not None:
        tree, created = await decomposer.create_plan(goal)
        return tree.id, created
    assert plan_id is not None  # _check_mode made sure
    plan = PlanTreeId(plan_id)
    if node_id is not None:
        return plan, await decomposer.decompose_node(plan, NodeId(node_id))
    return plan, await decomposer.run_plan(plan)


def _check_mode(
    goal: str | None,
    plan_id: int | None,
    node_id: int | None,
    expand_depth: int | None,
    overwrite: bool | None,
) -> None:
    if (goal is None) == (plan_id is None):
        raise click.UsageError("give either GOAL (a new plan) or --plan ID (a stored one)")
    if node_id is not None and plan_id is None:
        raise click.UsageError("--node needs --plan")
    if node_id is None and (expand_depth is not None or overwrite is not None):
        raise click.UsageError("--expand-depth, --overwrite and --append go with --node")


def _report(result: DecompositionResult, tree: PlanTree, *, as_json: bool) -> int:
    if as_json:
        echo_json(result.to_dict())
    else:
        out = console()
        _draw(out, tree, created={node.id for node in result.created_tasks})
        out.print(literal(result.summary()), soft_wrap=True)
    failed = result.failed_nodes or result.stopped_reason in ("max_seconds", "cancelled")
    return EXIT_STOPPED if failed else 0


def _draw(out: Console, tree: PlanTree, *, created: set[NodeId] | None = None) -> None:
    """The plan tree as a tree; new nodes in green, leaves marked."""
    root = Tree(line((f"plan #{tree.id} ", "bold"), literal(tree.title)))
    branches: dict[NodeId | None, Tree] = {None: root}
    for node, _depth in tree.walk():
        label = line((f"[{node.id}] ", "dim"), literal(node.name))
        if created and node.id in created:
            label.stylize("green")
        if node.leaf:
            label.append(" (leaf)", style="dim")
        branches[node.id] = branches[node.parent_id].add(label)
    out.print(root)


def _run_hint(plan_id: int, db: str | None) -> None:
    """How to execute the plan just drawn, on stderr."""
    where = f" --db {shlex.quote(db)}" if db else ""
    console(stderr=True).print(
        literal(f"execute it with: taskdecomp run --plan {plan_id} --tools TOOLS{where}", "dim"),
        soft_wrap=True,
    )


@app.command("tree")
@click.argument("plan_id", type=int, required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the tree as JSON.")
@DB_OPTION
def tree_command(plan_id: int | None, as_json: bool, db: str | None) -> int:
    """Show stored plan tree PLAN_ID, or list the stored plans."""
    with open_run_store(load_settings(), db) as store:
        repository = TreeRepository(store)
        if plan_id is None:
            plans = repository.list_plans()
            tree = None
        else:
            tree = repository.get_plan_tree(PlanTreeId(plan_id))
    if tree is not None:
        if as_json:
            echo_json(tree.to_dict())
        else:
            _draw(console(), tree)
            _run_hint(tree.id, db)
        return 0
    if as_json:
        echo_json([{"id": i, "title": t, "nodes": n} for i, t, n in plans])
        return 0
    out = console()
    columns = [
        Column(header="plan", justify="right"),
        Column(header="title", kind="flex"),
        Column(header="nodes", justify="right"),
    ]
    rows = [[literal(plan), _one_line(title), literal(count)] for plan, title, count in plans]
    out.print(fitted_table(columns, rows, width=out.width))
    return 0


def _one_line(text: str) -> Text:
    return literal(" ".join(text.split()), limit=200)
