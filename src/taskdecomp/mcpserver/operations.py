"""What each MCP tool does, through the engine and the store, apart from the protocol.

Every run goes through the engine's entry points (:func:`~taskdecomp.engine.run`,
:func:`~taskdecomp.engine.approve`, :func:`~taskdecomp.engine.reject`) and is kept in the
store the operator named, so ``taskdecomp show``, ``runs`` and ``resume`` see it as any
other. A request that cannot be served raises a :class:`~taskdecomp.errors.TaskdecompError`
whose message says why in one line; :mod:`taskdecomp.mcpserver.app` turns it into an MCP
tool error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from taskdecomp.engine import Environment, approve, reject_async, run
from taskdecomp.errors import ConfigError
from taskdecomp.events import Subscriber
from taskdecomp.mcpserver.config import MCPConfig
from taskdecomp.mcpserver.schemas import BudgetIn, DecomposeOut, RunOut, TreeOut, strict
from taskdecomp.models import Model, resolve_model
from taskdecomp.run import RunId
from taskdecomp.store import SqlStore, StoredRun
from taskdecomp.strategies import registry
from taskdecomp.tree import PlanTree, PlanTreeId


class Operations:
    """The tools' work, on one store with the operator's toolset and models.

    Args:
        config: what the operator chose.
        store: where runs and plan trees are kept (open for the server's life).
    """

    def __init__(self, config: MCPConfig, store: SqlStore) -> None:
        self.config = config
        self.store = store
        self.env = Environment.of(
            None, store=store, lease_seconds=config.lease_seconds, durability=config.durability
        )

    async def run_goal(
        self,
        goal: str,
        *,
        strategy: str | None = None,
        budget: BudgetIn | None = None,
        allow: list[str] | None = None,
        options: Mapping[str, Any] | None = None,
        answer_schema: Mapping[str, Any] | None = None,
        plan_id: int | None = None,
        on_event: Subscriber | None = None,
    ) -> RunOut:
        """Run ``goal`` (or stored plan tree ``plan_id``) until it ends or waits for approval.

        Raises:
            ConfigError: the strategy is unknown or does not start from a goal, an option
                is one only the operator may set, the budget or the answer schema is
                refused, or ``allow`` names a tool the toolset lacks.
        """
        chosen = strategy or ("tree" if plan_id is not None else "plan_execute")
        _check_options(chosen, options)
        self._check_allow(allow)
        output_type = None
        if answer_schema is not None:
            from taskdecomp.answertype import answer_type

            output_type = answer_type(dict(answer_schema))
        result = await run(
            goal,
            tools=self.config.toolset,
            model=self._model(),
            allow=allow,
            budget=self._budget(budget),
            on_event=on_event,
            strategy=chosen,
            options=dict(options) if options is not None else None,
            plan=plan_id,
            env=self.env,
            output_type=output_type,
        )
        return RunOut.of(result, goal=goal or None)

    def get_run(self, run_id: str) -> RunOut:
        """The stored run ``run_id``, as it is now.

        Raises:
            RunNotFoundError: no run has this id.
        """
        return RunOut.stored(self.store.load_run(RunId(run_id)))

    async def approve(
        self, run_id: str, *, approval_id: str | None = None, on_event: Subscriber | None = None
    ) -> RunOut:
        """Approve what paused run ``run_id`` waits for, and continue it until it ends or waits.

        The run continues with this server's toolset, so one started with another (by
        ``taskdecomp run``, say) is refused: ``taskdecomp approve`` continues it with its own.

        Raises:
            RunNotFoundError: no run has this id.
            RunLeasedError: another process holds the run.
            ConfigError: the run is not paused, waits for another approval than
                ``approval_id``, or was started with another toolset than this server's.
        """
        stored = self._waits_for(run_id, approval_id)
        served = self.config.toolset.source
        if stored.tools != served:
            raise ConfigError(
                f"run {run_id!r} was started with toolset {stored.tools!r}, not this server's "
                f"{served!r}; approve it with: taskdecomp approve {run_id}"
            )
        result = await approve(
            run_id,
            tools=self.config.toolset,
            model=self._model(),
            on_event=on_event,
            env=self.env,
        )
        return RunOut.of(result, goal=self.store.load_run(RunId(run_id)).summary.goal)

    async def reject(self, run_id: str, *, reason: str, approval_id: str | None = None) -> RunOut:
        """End paused run ``run_id`` with ``approval_rejected``.

        Raises:
            RunNotFoundError: no run has this id.
            RunLeasedError: another process holds the run.
            ConfigError: the run is not paused, waits for another approval than
                ``approval_id``, or ``reason`` is empty.
        """
        self._waits_for(run_id, approval_id)
        result = await reject_async(run_id, reason=reason, env=self.env)
        return RunOut.of(result, goal=self.store.load_run(RunId(run_id)).summary.goal)

    async def decompose(
        self, goal: str, *, instruction: str = "", on_progress: Callable[[str], None] | None = None
    ) -> DecomposeOut:
        """Store a new plan tree whose root is ``goal`` and decompose it breadth-first.

        Raises:
            ConfigError: ``goal`` is empty.
        """
        from taskdecomp.store.trees import TreeRepository
        from taskdecomp.strategies.decompose import PlanDecomposer

        repository = TreeRepository(self.store)
        decomposer = PlanDecomposer(
            repository,
            self._model(self.config.decomp_model),
            options=dataclasses.replace(self.config.decomp, auto_on_create=True),
            on_progress=on_progress,
        )
        created, result = await decomposer.create_plan(goal, instruction=instruction)
        tree = repository.get_plan_tree(created.id)
        return DecomposeOut(
            plan_id=tree.id,
            tree=_tree(tree),
            created=len(result.created_tasks) if result is not None else 0,
            failed_nodes=list(result.failed_nodes) if result is not None else [],
            stopped_reason=result.stopped_reason if result is not None else None,
            summary=result.summary() if result is not None else None,
        )

    def get_tree(self, plan_id: int) -> TreeOut:
        """Stored plan tree ``plan_id``.

        Raises:
            TreeNotFoundError: no plan tree has this id.
        """
        from taskdecomp.store.trees import TreeRepository

        return _tree(TreeRepository(self.store).get_plan_tree(PlanTreeId(plan_id)))

    def _model(self, spec: str | None = None) -> Model:
        return resolve_model(spec or self.config.model, connection=self.config.connection)

    def _budget(self, given: BudgetIn | None) -> Any:
        try:
            return dataclasses.replace(self.config.budget, **(given.given() if given else {}))
        except ValueError as exc:
            raise ConfigError(f"budget refused: {exc}") from None

    def _check_allow(self, allow: list[str] | None) -> None:
        """Refuse an ``allow`` that names a tool the toolset lacks.

        Raises:
            ConfigError: it does.
        """
        unknown = sorted(set(allow or ()) - set(self.config.toolset))
        if unknown:
            offered = ", ".join(self.config.toolset) or "(none)"
            raise ConfigError(
                f"allow names {', '.join(map(repr, unknown))}, which the toolset does not "
                f"offer; its tools: {offered}"
            )

    def _waits_for(self, run_id: str, approval_id: str | None) -> StoredRun:
        """The paused run ``run_id``, refusing an approval id other than the one it waits for.

        Raises:
            RunNotFoundError: no run has this id.
            ConfigError: the run is not paused, or waits for another approval.
        """
        stored = self.store.load_run(RunId(run_id))
        if stored.summary.status != "paused":
            summary = stored.summary
            raise ConfigError(
                f"run {run_id!r} is not waiting for approval (status {summary.status}, stop "
                f"reason {summary.stop_reason or '-'}); nothing to approve or reject"
            )
        pending = stored.pending_approval() or {}
        if approval_id is not None and approval_id != pending.get("digest"):
            raise ConfigError(
                f"run {run_id!r} waits for approval {pending.get('digest')!r}, not "
                f"{approval_id!r}; read what it waits for with get_run"
            )
        return stored


def _check_options(strategy: str, options: Mapping[str, Any] | None) -> None:
    """Refuse options that name paths on this machine (the operator's to set).

    Raises:
        ConfigError: the strategy is unknown, or an option is local only.
    """
    chosen = registry.strategy(strategy)
    local = sorted(set(options or {}) & set(getattr(chosen, "local_only_options", ())))
    if local:
        raise ConfigError(
            f"option {local[0]!r} of strategy {strategy!r} names a path on the server; "
            "only the operator may set it"
        )


def _tree(tree: PlanTree) -> TreeOut:
    data = strict(tree.to_dict())
    return TreeOut(plan_id=data["id"], title=data["title"], nodes=data["nodes"])
