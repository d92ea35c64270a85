"""Runs the service stores before it executes them, and how it starts them later.

A new run is stored as ``queued`` in the server's own queue (:data:`LOCAL_QUEUE`: a
``runs`` row with no lease and a ``queued_runs`` row, as a run submitted to the workers'
queue is), so it is on disk from its first moment. When it has a slot, :func:`execute`
takes its lease and notes when it started in one transaction, then continues it with the
engine's :func:`~taskdecomp.engine.continue_run`, as a resume does: its deadline counts
from there. A run the server never started (it was stopped first) stays ``queued``: a
restarted server starts it again, and ``taskdecomp resume`` continues it from anywhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from taskdecomp import durable, owners, runconfig, stops
from taskdecomp.budget import Budget
from taskdecomp.engine import Environment, continue_run
from taskdecomp.events import Subscriber
from taskdecomp.models import Model
from taskdecomp.run import RunId, RunResult
from taskdecomp.store import SqlStore, StoredRun
from taskdecomp.store.base import NewRun
from taskdecomp.strategies import registry
from taskdecomp.tools import Toolset

LOCAL_QUEUE = "serve:process"
"""The queue name of runs waiting in a server's own process (not on the workers' queue)."""

MAX_RECOVERIES = 3
"""Times a run's process may die running it before it is parked as ``poisoned``."""


def new_run(
    run_id: RunId,
    goal: str,
    *,
    toolset: Toolset,
    model: str,
    allow: Iterable[str] | None,
    budget: Budget,
    strategy: str,
    options: Any,
) -> NewRun:
    """What to store of a run that waits for a slot: what :func:`taskdecomp.run` stores."""
    chosen = registry.strategy(strategy)
    settings = registry.options_for(chosen, options)
    return runconfig.new_run(
        run_id,
        goal,
        tools=toolset,
        model=model,
        combiner_model=None,
        allow=toolset.keys() if allow is None else allow,
        budget=budget,
        strategy=chosen.name,
        options=chosen.encode(settings),
    )


async def execute(
    run_id: RunId,
    *,
    store: SqlStore,
    tools: Toolset,
    model: Model,
    on_event: Subscriber,
    env: Environment,
) -> RunResult:
    """Start queued run ``run_id`` now: its result, or the stored one if it had ended.

    Nothing between taking the lease and the run's first event waits, so a cancel either
    finds the run still ``queued`` (the task never began) or stores it ``cancelled``.

    Raises:
        RunLeasedError: another process took the run first (``taskdecomp resume``).
    """
    admission = store.admit_run(
        run_id,
        owner=owners.new_owner_id(),
        ttl=durable.lease_seconds(env.lease_seconds),
        max_recoveries=MAX_RECOVERIES,
    )
    lease = admission.lease
    if lease is None:  # it ended meanwhile
        return store.load_run(run_id).result()
    if admission.start in ("cancelled", "poisoned"):
        reason, message = (stops.CANCELLED, "cancelled before it started")
        if admission.start == "poisoned":
            reason, message = (stops.POISONED, f"its process died {admission.recoveries} times")
        from taskdecomp.scale.runs import end

        await end(store, lease, reason, message)
        return store.load_run(run_id).result()
    return await continue_run(
        run_id, prepare=_as_is, tools=tools, model=model, on_event=on_event, lease=lease, env=env
    )


def _as_is(stored: StoredRun) -> StoredRun:
    return stored
