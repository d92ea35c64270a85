"""Submitting runs to a queue, and cancelling them, from any process.

A submitted run is stored first (``queued``), then handed to DBOS under its run id; a
submitter that dies between the two leaves a run the workers' sweep delivers. The same
idempotency key submitted twice gives one run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any, Literal

from taskdecomp import durable, owners, runconfig
from taskdecomp.budget import Budget
from taskdecomp.errors import ConfigError, RunLeasedError, RunNotFoundError
from taskdecomp.run import RunId, new_run_id
from taskdecomp.scale import engine, wakeup
from taskdecomp.scale.runs import end
from taskdecomp.stops import CANCELLED
from taskdecomp.store.sql import SqlStore
from taskdecomp.strategies import registry
from taskdecomp.strategies.replan import ReplanOptions
from taskdecomp.telemetry import propagation, spans

logger = logging.getLogger(__name__)

Cancelled = Literal["cancelled", "requested", "ended"]
"""What a cancel did: ended a run that had not started, asked a running one to stop (it
does within a second), or nothing (the run had ended)."""


def submit(
    goal: str,
    *,
    store: SqlStore,
    db: str,
    tools: str,
    model: str,
    queue: str = engine.DEFAULT_QUEUE,
    idempotency_key: str | None = None,
    allow: Iterable[str] | None = None,
    budget: Budget | None = None,
    strategy: str = "plan_execute",
    options: Any = None,
    replan: ReplanOptions | None = None,
    client: Any = None,
    answer_schema: dict[str, Any] | None = None,
) -> tuple[RunId, bool]:
    """Queue a run of ``goal``; return its id at once, and whether it is a new run.

    Args:
        goal: what to achieve, in words.
        store: the run store (on ``db``).
        db: its PostgreSQL URL (DBOS's queue tables live there too).
        tools: the name of a toolset the workers have registered.
        model: a model name the workers have registered, or a provider string.
        queue: the queue.
        idempotency_key: submitting it again returns the first run.
        allow: the tools the plan may use (default: all of the toolset's).
        budget: limits (``max_seconds`` holds across worker deaths).
        strategy: a registered strategy that starts from a goal (``plan_execute``,
            ``replan``, a plugin's); the workers must have it installed too.
        options: the strategy's options (their object, or their JSON form).
        replan: the same as ``options``, for the ``replan`` strategy.
        client: a ``DBOSClient`` on ``db`` to enqueue with; default: the process's own
            (:func:`~taskdecomp.scale.engine.shared_client`).
        answer_schema: a JSON schema the run's answer is typed by (``RunResult.output``).

    Raises:
        ConfigError: an empty goal, a path where a toolset name belongs, a database that
            is not PostgreSQL.
        StoreError: the store cannot be written.
    """
    if not goal.strip():
        raise ConfigError("the goal is empty; say in words what the run should achieve")
    if "/" in tools or tools.endswith(".py"):
        raise ConfigError(
            f"--tools takes the name of a toolset the workers registered, not a path: {tools!r}"
        )
    system = engine.system_url(db)
    budget = budget or Budget()
    chosen = registry.strategy(strategy)
    if not chosen.starts_from_goal:
        raise ConfigError(f"strategy {strategy!r} does not start from a goal")
    settings = registry.options_for(chosen, options if options is not None else replan)
    new = runconfig.new_run(
        new_run_id(),
        goal,
        tools=None,
        model=model,
        allow=allow or (),
        budget=budget,
        strategy=chosen.name,
        options=chosen.encode(settings),
        answer_schema=answer_schema,
    )
    with propagation.submitting(chosen.name) as span:
        config: dict[str, Any] = {**new.config, "queue": {"allow_all": allow is None}}
        config.update(propagation.carried(span))  # the worker's run continues it
        new = type(new)(run_id=new.run_id, goal=goal, model=model, tools=tools, config=config)
        run_id, fresh = store.submit_run(new, queue=queue, idempotency_key=idempotency_key)
        span.set_attribute(spans.RUN_ID, run_id)  # the first run's, for a key submitted again
        try:
            engine.enqueue(
                client or engine.shared_client(system), run_id, queue=queue, delivery=run_id
            )
        except Exception as exc:
            logger.warning(
                "run %s is stored but not yet queued (%s); a worker's sweep delivers it",
                run_id,
                " ".join(str(exc).split())[:300],
            )
            return run_id, fresh
        if fresh:  # a run submitted before keeps the delivery it has
            wakeup.announce(store, run_id, queue=queue, delivery=run_id)  # a worker takes it now
    return run_id, fresh


def cancel(run_id: str, *, store: SqlStore) -> Cancelled:
    """Cancel a queued or running run, on whatever worker it is.

    Raises:
        RunNotFoundError: no run has this id.
    """
    status = store.request_cancel(RunId(run_id))
    if status is None:
        raise RunNotFoundError(
            f"no run {run_id!r} in the store; `taskdecomp runs` lists them", run_id=run_id
        )
    if status == "unqueued":
        raise ConfigError(
            f"run {run_id!r} was not submitted to a queue: it runs in the process that "
            "started it (stop it there with Ctrl-C)"
        )
    if status == "queued":
        try:
            lease = store.acquire_lease(
                RunId(run_id), owner=owners.new_owner_id(), ttl=durable.lease_seconds(30)
            )
        except RunLeasedError:
            return "requested"  # a worker took it this moment: it sees the request
        asyncio.run(end(store, lease, CANCELLED, "cancelled before it started"))
        return "cancelled"
    return "requested" if status == "running" else "ended"
