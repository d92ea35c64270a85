"""Deciding a paused run: :func:`approve` continues it, :func:`reject` ends it.

A run pauses with ``awaiting_approval`` (status ``paused``) when a plan under
``approve_plan`` or a ``needs_approval`` tool call waits for a human. The decision may come
much later, from another process: everything needed is in the store. An edited plan passes
the policy boundary (its strategy's ``edit_plan``) before it replaces the pending one; when
it does not, nothing changes and the run stays paused. A rejection first lets the run's
strategy undo what the approval would have let go on (its ``on_reject``: the ``tree``
strategy removes the children of a rejected split from the stored tree).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from typing import Any

from taskdecomp import durable, runconfig, stops
from taskdecomp.approvals import ApprovalRequest
from taskdecomp.durable import Durability
from taskdecomp.engine.environment import Environment
from taskdecomp.engine.runs import continue_run, no_loop
from taskdecomp.errors import ConfigError
from taskdecomp.events import ApprovalDecided, RunStopped, Subscriber
from taskdecomp.models import Model
from taskdecomp.plan import Plan
from taskdecomp.prompting import PromptFunction
from taskdecomp.roles import RoleMapping, Roles
from taskdecomp.run import RunId, RunResult
from taskdecomp.runtime import Clock, RunContext, run_blocking
from taskdecomp.store.base import Store, StoredRun
from taskdecomp.strategies import registry
from taskdecomp.strategies.base import ToolsArg


async def approve(
    run_id: str,
    *,
    store: Store | None = None,
    plan: Any = None,
    tools: ToolsArg | None = None,
    model: Model | str | None = None,
    combiner_model: Model | str | None = None,
    roles: Roles | RoleMapping | None = None,
    prompts: Mapping[str, PromptFunction] | None = None,
    on_event: Subscriber | None = None,
    clock: Clock | None = None,
    lease_seconds: float | None = None,
    durability: Durability | None = None,
    env: Environment | None = None,
) -> RunResult:
    """Approve what run ``run_id`` waits for, and continue the run.

    The run is taken under its lease first, so two approvals (or an approval and a
    rejection) of one run cannot both act.

    Args:
        run_id: a paused run.
        store: where it is stored.
        plan: an edited plan to run instead of the pending one (``{"kind": "plan",
            "steps": [...]}`` or the list of steps); it must pass the policy boundary.
        tools: the toolset; default: the one stored with the run.
        model: the planner model; default: the one stored with the run.
        combiner_model: the combine call's model; default: the stored one.
        roles: models for some roles; a role left out keeps its stored model (see
            :func:`~taskdecomp.engine.run`).
        prompts: the run's prompt-building functions (they are not stored).
        on_event: receives every event of the continued run.
        clock: monotonic clock, for tests.
        lease_seconds: this process's lease on the run.
        durability: how the continued run's checkpoints reach the disk (the approval
            itself is on disk before anything runs).
        env: the store, lease, durability, clock and subscribers, built once at the
            edge (:class:`~taskdecomp.environment.Environment`); a keyword above wins.

    Raises:
        RunNotFoundError: no run has this id.
        RunLeasedError: another process holds the run.
        ConfigError: the run is not waiting for approval, or the edited plan is refused
            (the message says which rule it breaks); nothing was written.
    """
    e = Environment.of(
        env, store=store, lease_seconds=lease_seconds, durability=durability, clock=clock
    )
    stored = e.needs_store("approve").load_run(RunId(run_id))
    _pending(_paused(stored))  # refuse early, before taking the lease
    decision = _Decision(plan)
    return await continue_run(
        run_id,
        prepare=decision.prepare,
        tools=tools,
        model=model,
        combiner_model=combiner_model,
        roles=roles,
        prompts=prompts,
        on_event=on_event,
        before=decision.record,
        env=e,
    )


class _Decision:
    """An approval: checked against the run as read under its lease, then recorded."""

    def __init__(self, plan: Any) -> None:
        self._plan = plan
        self._stored: StoredRun | None = None
        self._pending: ApprovalRequest | None = None
        self._edited: Plan | None = None

    def prepare(self, stored: StoredRun) -> StoredRun:
        """The run to continue: paused, with the edited plan (if any) in place.

        Raises:
            ConfigError: the run is not waiting for approval, or the edit is refused.
        """
        self._pending = _pending(_paused(stored))
        if self._plan is not None:
            stored, self._edited = _edited(stored, self._pending, self._plan)
        self._stored = stored
        return stored

    def record(self, ctx: RunContext) -> None:
        """Grant the approval and store it (with an edited plan) before anything runs."""
        assert self._pending is not None and self._stored is not None  # prepare() ran
        pending, stored, edited = self._pending, self._stored, self._edited
        ctx.approvals.grant(pending.digest)
        if edited is not None:
            ctx.approvals.grant(ApprovalRequest.for_plan(edited, redactor=ctx.redactor).digest)
        ctx.events.emit(
            ApprovalDecided(
                run_id=ctx.run_id, digest=pending.digest, approved=True, edited=edited is not None
            )
        )
        if ctx.journal is not None and stored.plan is not None:
            approvals = ctx.approvals.to_dict()
            ctx.journal.state_saved(stored.plan, stored.state, approvals=approvals)
            ctx.journal.flush()  # the approval holds even if this process dies next


def reject(
    run_id: str,
    *,
    reason: str,
    store: Store | None = None,
    lease_seconds: float | None = None,
    env: Environment | None = None,
) -> RunResult:
    """End paused run ``run_id`` with ``approval_rejected``; ``reason`` becomes its message.

    Raises:
        RunNotFoundError: no run has this id.
        RunLeasedError: another process holds the run.
        ConfigError: the run is not waiting for approval, or ``reason`` is empty.
    """
    if not reason.strip():
        raise ConfigError("a rejection needs a reason: --reason TEXT")
    e = Environment.of(env, store=store, lease_seconds=lease_seconds)
    store = e.needs_store("reject")
    _pending(_paused(store.load_run(RunId(run_id))))
    lease, stored = durable.take_over(store, RunId(run_id), seconds=e.lease_seconds)
    try:
        pending = _pending(_paused(stored))
        state = _undone(store, stored)
    except BaseException:
        store.release_lease(lease)
        raise
    result = stored.ended(stops.APPROVAL_REJECTED, f"rejected: {reason.strip()}")
    journal = durable.Journal(store, lease, segment=stored.segments, usage=lambda: result.usage)
    journal(
        ApprovalDecided(run_id=stored.run_id, digest=pending.digest, approved=False, reason=reason)
    )
    approvals = {"approved": list(stored.approvals.get("approved", [])), "pending": None}
    if state is not None and stored.plan is not None:
        journal.state_saved(stored.plan, state, approvals=approvals)
    journal(RunStopped(run_id=stored.run_id, result=result))
    return journal.finished(result, approvals=approvals)


def _undone(store: Store, stored: StoredRun) -> Mapping[str, Any] | None:
    """Undo what the rejected approval would have let the run do, if its strategy can.

    The strategy's ``on_reject(store, stored)``, when it has one, returns the run's new
    state (stored with the rejection), or ``None``.
    """
    hook = getattr(registry.strategy(runconfig.stored_config(stored).strategy), "on_reject", None)
    if hook is None:
        return None
    state: Mapping[str, Any] | None = hook(store, stored)
    return state


def _paused(stored: StoredRun) -> StoredRun:
    run_id = stored.run_id
    if stored.summary.status != "paused":
        summary = stored.summary
        raise ConfigError(
            f"run {run_id!r} is not waiting for approval (status {summary.status}, stop reason "
            f"{summary.stop_reason or '-'}); nothing to approve or reject"
        )
    return stored


def _pending(stored: StoredRun) -> ApprovalRequest:
    raw = stored.approvals.get("pending")
    if not isinstance(raw, dict) or raw.get("kind") not in ("plan", "tool"):
        raise ConfigError(
            f"run {stored.run_id!r} is paused but its pending approval is not stored; "
            "reject it, or resume it from a copy of the store"
        )
    return ApprovalRequest(kind=raw["kind"], digest=str(raw["digest"]), subject=raw["subject"])


def _edited(stored: StoredRun, pending: ApprovalRequest, plan: Any) -> tuple[StoredRun, Plan]:
    """``stored`` with ``plan`` in place of its pending plan, if its strategy revises plans.

    Raises:
        ConfigError: the run waits for a tool call, its strategy has no plan to edit, or the
            edited plan is refused.
    """
    config = runconfig.stored_config(stored)
    chosen = registry.strategy(config.strategy)
    edit = getattr(chosen, "edit_plan", None)
    if pending.kind != "plan" or edit is None:
        takers = [n for n in registry.STRATEGIES.names() if _edits(registry.strategy(n))]
        raise ConfigError(
            f"run {stored.run_id!r} waits for a {pending.kind} approval; an edited plan "
            f"replaces a pending plan of the {' or '.join(takers)} strategy only"
        )
    edited: tuple[StoredRun, Plan] = edit(stored, config, plan)
    return edited


def _edits(strategy: object) -> bool:
    return getattr(strategy, "edit_plan", None) is not None


def approve_sync(run_id: str, **kwargs: Any) -> RunResult:
    """Blocking :func:`approve` (see :func:`run_sync`).

    Raises:
        RuntimeError: when called from inside a running event loop (use ``await approve(...)``).
    """
    no_loop("approve_sync", "approve")
    return run_blocking(approve(run_id, **kwargs))


async def reject_async(run_id: str, **kwargs: Any) -> RunResult:
    """:func:`reject` for async code: the store's writes run in a worker thread."""
    return await asyncio.to_thread(functools.partial(reject, run_id, **kwargs))
