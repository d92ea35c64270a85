"""Running a queued run in a worker, and ending one that must not run.

:func:`execute` is what a delivery does: take the run's lease, count a recovery, reopen
the run and read it in one transaction (:meth:`~taskdecomp.store.sql.SqlStore.admit_run`),
then continue it like a resume does, without reading or reopening it again: with the
toolset and model the registry has under the names it gives, its deadline counted from
its first start, and a watcher that cancels it within a second of a cancel request. A
run that is taken already (a duplicate delivery), or has ended, is left alone. Runs that
must not run (cancelled before they started, poisoned, naming something the worker
lacks, past their deadline) are ended with their stop reason, like any run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Mapping

from taskdecomp import durable, owners, runconfig, stops
from taskdecomp.durable import Durability
from taskdecomp.engine import Environment, continue_run
from taskdecomp.errors import ConfigError, RunLeasedError, RunNotFoundError, StoreError
from taskdecomp.models import ScriptedModel, prices
from taskdecomp.run import RunId
from taskdecomp.runtime import RunContext
from taskdecomp.scale import cancels
from taskdecomp.scale.ratelimit import Limit, Window, limited
from taskdecomp.scale.registry import Registry, Unavailable
from taskdecomp.stops import StopReason, StopRun
from taskdecomp.store.base import DEFAULT_LEASE_SECONDS, Lease, StoredRun
from taskdecomp.store.sql import SqlStore
from taskdecomp.strategies.base import Outcome, Phases
from taskdecomp.tools import Toolset

logger = logging.getLogger(__name__)

CANCEL_POLL_SECONDS = 0.5
"""How often a running run looks for a cancel request."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Execution:
    """How a worker executes runs."""

    store: SqlStore
    registry: Registry
    max_recoveries: int = 3
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    durability: Durability = durable.DEFAULT_DURABILITY
    limits: Mapping[str, Limit] = dataclasses.field(default_factory=dict)
    """Rate limits by model provider, held across every worker of the database."""

    @functools.cached_property
    def windows(self) -> Mapping[str, Window]:
        """This process's view of each limited provider's window."""
        return {name: Window(self.store, limit) for name, limit in self.limits.items()}

    @property
    def env(self) -> Environment:
        """The engine's environment of this worker's runs."""
        return Environment(
            store=self.store, lease_seconds=self.lease_seconds, durability=self.durability
        )


async def execute(run_id: RunId, how: Execution, *, delivery: str | None = None) -> str:
    """Execute delivered run ``run_id``; return what became of it (for the engine's log).

    ``delivery`` is the DBOS workflow that delivered it: cancelling that workflow with
    DBOS (``dbos workflow cancel``) cancels the run too.

    Never raises for the run's own failures: they are its stop reason. A store that cannot
    be reached leaves the run to be delivered again (its lease is given up or runs out).
    """
    store = how.store
    try:  # off the loop: the take waits for the database, the process's other runs go on
        admission = await asyncio.to_thread(
            store.admit_run,
            run_id,
            owner=owners.new_owner_id(),
            ttl=durable.lease_seconds(how.lease_seconds),
            max_recoveries=how.max_recoveries,
            reopen=True,
        )
    except RunLeasedError:
        return "taken"  # another delivery of the same run is running it
    except RunNotFoundError:
        return "missing"
    except StoreError as exc:
        logger.warning("could not take run %s: %s", run_id, exc)
        return "store_error"
    lease, stored = admission.lease, admission.run
    if admission.start == "ended" or lease is None or stored is None:
        return "ended"
    if admission.start == "cancelled":
        message = "cancelled before it started"
        return await end(store, lease, stops.CANCELLED, message, stored=stored)
    if admission.start == "poisoned":
        message = (
            f"its workers died running it {admission.recoveries} times; parked after "
            f"{how.max_recoveries} recoveries"
        )
        return await end(store, lease, stops.POISONED, message, stored=stored)
    try:
        return await _run(stored, lease, admission.first_started_at, how, delivery)
    except StoreError as exc:
        logger.warning("run %s gave up on the store: %s", run_id, exc)
        return "store_error"


async def _run(
    stored: StoredRun,
    lease: Lease,
    first_started_at: float | None,
    how: Execution,
    delivery: str | None,
) -> str:
    store, run_id = how.store, stored.run_id
    try:
        config = runconfig.stored_config(stored)
        toolset = how.registry.toolset(stored.tools)
        model = limited(how.registry.model(stored.model), how.windows)
        roles = {
            role: limited(how.registry.model(name), how.windows)
            for role, name in config.roles.items()
        }
    except Unavailable as exc:
        reason = stops.with_detail("unavailable", exc.name)
        return await end(store, lease, reason, str(exc), stored=stored)
    except BaseException:
        store.release_lease(lease)
        raise
    budget = config.budget
    try:  # a cost budget this worker cannot keep: refused before any call
        prices.require_prices([model, *roles.values()], budget.max_cost_usd)
    except ConfigError as exc:
        reason = stops.with_detail("unavailable", stored.model or model.name)
        return await end(store, lease, reason, str(exc), stored=stored)
    spent = store.now() - (first_started_at or store.now())
    left = budget.max_seconds - spent
    if left <= 0:
        message = f"the run passed its {budget.max_seconds}s deadline across its workers"
        return await end(store, lease, stops.MAX_SECONDS, message, stored=stored)
    work = asyncio.create_task(
        continue_run(
            run_id,
            prepare=_as_is,
            tools=toolset,
            model=model,
            roles=roles,
            budget=dataclasses.replace(budget, max_seconds=left),
            lease=lease,
            taken=stored,
            env=how.env,
        )
    )
    watcher = asyncio.create_task(_watch_cancel(store, run_id, delivery, work))
    try:
        result = await work
    except asyncio.CancelledError:
        if watcher.done() and not watcher.cancelled():
            return "cancelled"  # the run is stored as cancelled
        raise
    finally:
        watcher.cancel()
    return result.stop_reason


async def _watch_cancel(
    store: SqlStore, run_id: RunId, delivery: str | None, work: asyncio.Task[object]
) -> None:
    while not work.done():
        await asyncio.sleep(CANCEL_POLL_SECONDS)
        try:
            asked = await asyncio.to_thread(cancels.asked, store, run_id, delivery)
        except StoreError:
            continue  # the store is away; the run finds out by itself
        if asked:
            work.cancel()
            return


async def end(
    store: SqlStore,
    lease: Lease,
    reason: StopReason,
    message: str,
    *,
    stored: StoredRun | None = None,
) -> str:
    """End the run ``lease`` holds with ``reason`` without running anything of it.

    ``stored`` is the run as :meth:`~taskdecomp.store.sql.SqlStore.admit_run` took and
    reopened it; without it, the run is read and reopened under ``lease`` here.
    """

    def phases() -> Phases:
        async def stop(ctx: RunContext, outcome: Outcome) -> None:
            raise StopRun(reason, message=message)

        return stop

    result = await continue_run(
        lease.run_id,
        store=store,
        prepare=_as_is,
        tools=Toolset.from_functions([]),
        model=ScriptedModel(responses=[], name="none"),
        lease=lease,
        taken=stored,
        phases=phases(),
    )
    return result.stop_reason


def _as_is(stored: StoredRun) -> StoredRun:
    return stored
