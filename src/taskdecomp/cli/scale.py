"""``worker``, ``submit`` and ``cancel``: runs queued and executed by worker processes."""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

import click

from taskdecomp.cli._app import (
    BASE_URL_OPTION,
    DB_OPTION,
    DEBUG_OPTION,
    DURABILITY_OPTION,
    LOCAL_THREADS_OPTION,
    OUTPUT_MODE_OPTION,
    TRACE_CONTENT_OPTION,
    app,
    echo_json,
    load_settings,
    names,
    needs_extra,
    open_run_store,
)
from taskdecomp.cli.display import console, literal
from taskdecomp.cli.priceopts import price_options
from taskdecomp.cli.strategies import OPTION_OPTION, STRATEGY_OPTION, strategy_options
from taskdecomp.durability import Durability
from taskdecomp.models.outputs import OutputMode

QUEUE_OPTION = click.option(
    "--queue", default="default", show_default=True, help="The queue to use."
)


@app.command("worker")
@DB_OPTION
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Runs each worker process executes at once, whatever other workers say.",
)
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    help="Worker processes to start on this machine (one uses about one core). Each holds "
    "its own PostgreSQL connections, 8 to 20 of them.  [default: one per core, as many as "
    "the server has free connections for]",
)
@click.option(
    "--global-concurrency",
    type=click.IntRange(min=1),
    help="Runs all workers of the queue execute at once (stored with the queue; "
    "a worker without the option leaves it as it is).",
)
@click.option(
    "--rate-limit",
    "rate_limits",
    multiple=True,
    metavar="PROVIDER=N/min[,N tokens/min]",
    help="Model calls (and tokens) a minute for a provider's models, across all workers, "
    "e.g. openai=500/min,200000 tokens/min (repeat for more providers).",
)
@click.option(
    "--poll-seconds",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="How often to look at the queue when no submit said there is a run.",
)
@QUEUE_OPTION
@click.option(
    "--tools",
    "tools",
    multiple=True,
    metavar="NAME=PATH",
    help="A toolset runs may name (repeat the option for more).",
)
@click.option(
    "--model",
    "models",
    multiple=True,
    metavar="NAME=SPEC",
    help="A model runs may name, e.g. fast=openai:gpt-4o-mini (repeat for more).",
)
@click.option(
    "--max-recoveries",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="Worker deaths a run survives before it is parked as poisoned.",
)
@click.option("--executor-id", help="This worker's name in the queue (default: host-pid).")
@BASE_URL_OPTION
@price_options
@OUTPUT_MODE_OPTION
@DURABILITY_OPTION
@TRACE_CONTENT_OPTION
@DEBUG_OPTION
@LOCAL_THREADS_OPTION
def worker_command(
    db: str | None,
    concurrency: int,
    processes: int | None,
    global_concurrency: int | None,
    rate_limits: tuple[str, ...],
    poll_seconds: float,
    queue: str,
    tools: tuple[str, ...],
    models: tuple[str, ...],
    max_recoveries: int,
    executor_id: str | None,
    base_url: str | None,
    output_mode: OutputMode | None,
    durability: Durability | None,
) -> int:
    """Take runs off a queue and execute them, until Ctrl-C or SIGTERM.

    Start as many workers as needed, on several machines, all with the same --db (a
    PostgreSQL URL) and the same --tools / --model names. A worker also delivers again the
    runs of a worker that died, once their lease (TASKDECOMP_LEASE_SECONDS) has run out.
    """
    with needs_extra("worker", "scale", "dbos"):
        import dbos  # noqa: F401  # the queue: without it, say so before anything is opened

    from taskdecomp.models import Connection
    from taskdecomp.scale import processes as forks
    from taskdecomp.scale.ratelimit import parse_limits
    from taskdecomp.scale.registry import Registry

    limits = parse_limits(rate_limits)
    settings = load_settings()
    mode = output_mode or settings.output_mode
    registry = Registry.parse(tools, models, Connection(base_url=base_url, output_mode=mode))
    count, why = processes, ""
    if count is None:
        count, why = forks.default_count(settings.store_url(db))
    registry.load(servers=count == 1)  # a bad --tools: one error here, not one per process
    each = ""
    if count > 1 or why:
        each = f"{count} process{'es' if count > 1 else ''}{f' ({why})' if why else ''}, "
    console(stderr=True).print(
        literal(
            f"worker on queue {queue!r} ({each}{concurrency} at once"
            f"{' each' if count > 1 else ''}); Ctrl-C stops it",
            "dim",
        )
    )

    def serve(index: int) -> int:
        name = executor_id if executor_id is None or count == 1 else f"{executor_id}-p{index}"
        return _serve_worker(
            db, queue=queue, concurrency=concurrency, global_concurrency=global_concurrency,
            limits=limits, poll_seconds=poll_seconds, registry=registry,
            max_recoveries=max_recoveries, executor_id=name, durability=durability,
        )  # fmt: skip

    return serve(0) if count == 1 else forks.supervise(count, serve)


def _serve_worker(
    db: str | None,
    *,
    queue: str,
    concurrency: int,
    global_concurrency: int | None,
    limits: Any,
    poll_seconds: float,
    registry: Any,
    max_recoveries: int,
    executor_id: str | None,
    durability: Durability | None,
) -> int:
    """One worker process, until SIGTERM or Ctrl-C."""
    from taskdecomp import durable
    from taskdecomp.scale.runs import Execution
    from taskdecomp.scale.worker import Worker

    settings = load_settings()
    registry.load()  # what the parent left out: the toolsets that start servers
    url = settings.store_url(db)
    with open_run_store(settings, db) as store:
        how = Execution(
            store=store,
            registry=registry,
            max_recoveries=max_recoveries,
            lease_seconds=durable.lease_seconds(settings.lease_seconds),
            durability=durability or settings.durability,
            limits=limits,
        )
        worker = Worker(
            url,
            how,
            queue=queue,
            concurrency=concurrency,
            global_concurrency=global_concurrency,
            poll_seconds=poll_seconds,
            executor_id=executor_id,
            log_level=settings.dbos_log_level,
        )

        def stop(signum: int, frame: FrameType | None) -> None:
            worker.stop()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        worker.serve()
    return 0


@app.command("submit")
@click.argument("goal")
@click.option("--tools", required=True, help="The name of a toolset the workers registered.")
@click.option("--model", required=True, help="A model name the workers registered.")
@QUEUE_OPTION
@click.option("--idempotency-key", help="Submitting the same key again gives the same run.")
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
@click.option(
    "--max-seconds",
    type=click.FloatRange(min=0, min_open=True),
    help="Deadline from the run's first start, across worker deaths. [60]",
)
@STRATEGY_OPTION
@OPTION_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print {run_id, new} as JSON.")
@DB_OPTION
@DEBUG_OPTION
def submit_command(
    goal: str,
    tools: str,
    model: str,
    queue: str,
    idempotency_key: str | None,
    allow: str | None,
    strategy: str,
    option_pairs: tuple[str, ...],
    as_json: bool,
    db: str | None,
    **budget_flags: Any,
) -> int:
    """Queue a run of GOAL and print its id at once; a worker executes it.

    `runs`, `show`, `resume` and `cancel` work on queued runs as on any other.
    """
    with needs_extra("submit", "scale", "dbos"):
        import dbos  # noqa: F401  # the queue: without it the run would be stored, never queued

    from taskdecomp.scale.submit import submit

    options = strategy_options(strategy, {}, option_pairs)
    settings = load_settings()
    budget = settings.budget(**budget_flags)
    url = settings.store_url(db)
    with open_run_store(settings, db) as store:
        run_id, new = submit(
            goal,
            store=store,
            db=url,
            tools=tools,
            model=model,
            queue=queue,
            idempotency_key=idempotency_key,
            allow=names(allow),
            budget=budget,
            strategy=strategy,
            options=options,
        )
    if as_json:
        echo_json({"run_id": run_id, "new": new})
    else:
        click.echo(run_id)
        if not new:
            console(stderr=True).print(
                literal("submitted before with this idempotency key: the same run", "dim")
            )
    return 0


@app.command("cancel")
@click.argument("run_id")
@DB_OPTION
def cancel_command(run_id: str, db: str | None) -> int:
    """Cancel a queued run before it starts, or a running one within a second."""
    from taskdecomp.scale.submit import cancel

    with open_run_store(load_settings(), db) as store:
        done = cancel(run_id, store=store)
    said = {
        "cancelled": f"run {run_id} cancelled before it started",
        "requested": f"run {run_id} is asked to stop; it stops within a second",
        "ended": f"run {run_id} had ended; nothing to cancel",
    }[done]
    console(stderr=True).print(literal(said), soft_wrap=True)
    return 0


__all__ = ["cancel_command", "submit_command", "worker_command"]
