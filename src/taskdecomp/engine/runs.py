"""Starting and continuing runs: :func:`run`, :func:`resume`, :func:`continue_run`."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from taskdecomp import answers, durable, runconfig
from taskdecomp.answertype import AnswerType, OutputType, answer_type
from taskdecomp.budget import Budget
from taskdecomp.durable import Durability
from taskdecomp.engine.environment import Environment
from taskdecomp.errors import ConfigError
from taskdecomp.events import RunStarted, Subscriber
from taskdecomp.models import Model, ScriptedModel, prices, resolve_model
from taskdecomp.prompting import PromptFunction, Prompts
from taskdecomp.roles import RoleMapping, Roles
from taskdecomp.run import RunId, RunResult, new_run_id
from taskdecomp.runtime import Clock, RunContext, run_blocking
from taskdecomp.store.base import Lease, Store, StoredRun
from taskdecomp.strategies import registry
from taskdecomp.strategies.base import (
    Outcome,
    Phases,
    ToolsArg,
    as_toolset,
    attach_journal,
    build_context,
    execute,
    finish,
    restore,
)
from taskdecomp.strategies.registry import Setup, Strategy, options_for
from taskdecomp.strategies.replan import ReplanOptions
from taskdecomp.strategies.tree import TreeOptions
from taskdecomp.telemetry.runspan import RunSpan
from taskdecomp.tools import Toolset


async def run(
    goal: str = "",
    *,
    tools: ToolsArg,
    model: Model | str,
    allow: Iterable[str] | None = None,
    budget: Budget | None = None,
    combiner_model: Model | str | None = None,
    roles: Roles | RoleMapping | None = None,
    prompts: Mapping[str, PromptFunction] | None = None,
    on_event: Subscriber | None = None,
    run_id: RunId | None = None,
    clock: Clock | None = None,
    store: Store | None = None,
    strategy: str | None = None,
    options: Any = None,
    replan: ReplanOptions | None = None,
    tree: TreeOptions | None = None,
    plan: int | None = None,
    node: int | None = None,
    lease_seconds: float | None = None,
    durability: Durability | None = None,
    stream_plan: bool | None = None,
    env: Environment | None = None,
    output_type: OutputType | None = None,
) -> RunResult:
    """Run ``goal`` with ``strategy``; always returns a result, never raises for a run failure.

    ``plan_execute`` (the default) plans once, executes and combines; ``replan`` plans,
    runs the ready steps, and asks a replanner after each wave until it answers
    (:mod:`taskdecomp.strategies.replan`). Any strategy in the registry
    (:mod:`taskdecomp.strategies.registry`) that starts from a goal may be named.

    Args:
        goal: what to achieve, in words.
        tools: the toolset (see :data:`ToolsArg`).
        model: the run's model, or a model string such as ``scripted:plan.json``: the
            planner's, and every other role's that ``roles`` leaves out.
        allow: tool names the plan may use; default: every tool in the toolset.
        budget: limits; default: the seed's.
        combiner_model: a different model for the combine call; default: ``model``
            (the same as ``roles={"combiner": ...}``).
        roles: a model per role (:class:`~taskdecomp.roles.Roles`, or a mapping such as
            ``{"executor": "openai:gpt-4.1-mini"}``): ``planner``, ``executor``,
            ``replanner``, ``rollup``, ``combiner``; a role left out uses ``model``.
            Their model strings are stored with the run.
        prompts: a prompt-building function per role (:mod:`taskdecomp.prompting`):
            ``fn(PromptInput) -> list[Message]`` builds the messages of that role's
            calls. Not stored: pass them again to :func:`resume`.
        on_event: receives every event of the run.
        run_id: use this id instead of a fresh one.
        clock: monotonic clock, for tests.
        store: keep the run there, checkpointed after every step, so :func:`resume` can
            continue it; default: nothing is stored.
        strategy: a registered strategy's name: ``plan_execute`` (the default), ``replan``,
            ``tree`` (the default with ``plan``), or a plugin's.
        options: the strategy's options: its options object, or their JSON form.
        replan: the same as ``options``, for the ``replan`` strategy (kept for callers that
            name it so).
        tree: the same as ``options``, for the ``tree`` strategy.
        plan: a stored plan tree to execute with the ``tree`` strategy (``goal`` may then be
            left out: the tree's title, or the node's name, is the goal).
        node: with ``plan``, execute only this node's subtree.
        lease_seconds: how long the run's lease in the store outlives this process if it
            dies (see :func:`resume`); renewed every third of it while the run is in flight.
        durability: ``async`` (default) commits finished steps in groups off the event
            loop and waits for the disk only before ``unsafe`` calls, at pauses and at the
            end; ``sync`` commits every step durably before the run goes on.
        stream_plan: start ``read_only`` steps while the planner still writes the plan
            (:mod:`taskdecomp.streaming`); default: when the model streams (``openai``,
            ``local``, a scripted model with ``stream_ms``). ``plan_execute`` only.
        env: the store, lease, durability, clock and subscribers, built once at the
            edge (:class:`~taskdecomp.environment.Environment`); a keyword above wins.
        output_type: the type the answer must have: a pydantic model class (the result's
            ``output`` is an instance of it) or a JSON schema (``output`` is the JSON
            value; needs the ``answers`` extra). The combine call runs under its schema;
            ``answer`` is then the answer's JSON text.

    Raises:
        ConfigError: the goal is empty, the toolset or a model string cannot be loaded,
            the strategy is unknown, ``output_type`` is not a type an answer can have,
            ``roles`` or ``prompts`` names something that is not a role, or
            ``budget.max_cost_usd`` is set and a model's price is unknown (before the run
            starts).
        StoreError: the store cannot be written; the run is then left to :func:`resume`.
    """
    e = Environment.of(
        env, store=store, lease_seconds=lease_seconds, durability=durability, clock=clock
    )
    durable.durability(e.durability)
    given = next((o for o in (options, replan, tree) if o is not None), None)
    if plan is not None or node is not None:
        given = _with_tree(strategy, given, plan, node)
        strategy = "tree"
    chosen = _goal_strategy(strategy or "plan_execute")
    settings = options_for(chosen, given)
    if not goal.strip() and (default_goal := getattr(chosen, "default_goal", None)):
        goal = default_goal(e.store, settings)
    _check_goal(goal)
    typed = answer_type(output_type) if output_type is not None else None
    toolset = as_toolset(tools)
    planner = resolve_model(model)
    fits = getattr(planner, "default_max_seconds", None)  # the embedded model's is longer
    budget = budget or (Budget(max_seconds=fits) if fits else Budget())
    named = with_combiner(Roles.of(roles), combiner_model)
    role_models = named.resolved(resolve_model)  # before the context: its redactor knows their keys
    written = Prompts.of(prompts)
    prices.require_prices((planner, *role_models.values()), budget.max_cost_usd)
    ctx = build_context(
        goal, toolset, planner, allow, budget, e.on_event(on_event),
        run_id or new_run_id(),
    )  # fmt: skip
    if e.clock is not None:
        ctx.clock = e.clock
    ctx.roles, ctx.prompts = role_models, written
    started = ctx.clock()
    traced = RunSpan(ctx, chosen.name)
    if (store := e.store) is not None:
        new = runconfig.new_run(
            ctx.run_id,
            goal,
            tools=tools,
            model=ctx.model,  # the resolved model's name: file paths made absolute
            roles=ctx.roles,
            allow=ctx.gateway.allow,
            budget=budget,
            strategy=chosen.name,
            options=chosen.encode(settings),
            answer_schema=typed.schema if typed is not None else None,
            redactor=ctx.redactor,
        )
        new = traced.stamped(new)  # a resume links to this run's first trace
        ttl = durable.lease_seconds(e.lease_seconds)
        lease = durable.first_lease(store, ctx.run_id, seconds=ttl)
        journal = attach_journal(
            ctx, store, lease, segment=1, started=started, durability=e.durability
        )
        journal.create(new)  # async: committed before the run calls anything (execute)
    combiner = ctx.roles.get("combiner")
    setup = Setup(
        budget=budget, combiner=combiner, stream_plan=stream_plan, store=e.store, answer=typed
    )
    try:
        phases = _answering(chosen, setup, chosen.start(setup, settings))
    except BaseException:
        if ctx.journal is not None:  # give up its place on the shared writer, and the lease
            ctx.journal.release()
        raise
    async with durable.leased(ctx.journal), traced:
        return await execute(ctx, Outcome(), budget, phases, started=started)


def _answering(chosen: Strategy, setup: Setup, phases: Phases) -> Phases:
    """``phases``, typing their answer at the end unless the strategy types its own."""
    if setup.answer is None or getattr(chosen, "types_answer", False):
        return phases
    return answers.typed(phases, setup.answer, setup.combiner)


def _with_tree(
    strategy: str | None, given: Any, plan: int | None, node: int | None
) -> dict[str, Any]:
    """The ``tree`` options ``given`` (an object or their JSON form) with ``plan``/``node``.

    Raises:
        ConfigError: another strategy is named, ``given`` is another strategy's options, or
            ``node`` comes without ``plan``.
    """
    if strategy not in (None, "tree"):
        raise ConfigError(
            f"plan= and node= execute a stored plan tree with the 'tree' strategy, not "
            f"{strategy!r}; leave strategy out or name 'tree'"
        )
    if plan is None:
        raise ConfigError(f"node={node!r} names a node of a stored plan tree: give plan= too")
    if isinstance(given, TreeOptions):
        given = registry.strategy("tree").encode(given)
    elif given is not None and not isinstance(given, dict):
        raise ConfigError(f"plan= runs the tree strategy, which takes TreeOptions, not {given!r}")
    return {**(given or {}), "plan_id": plan, "node_id": node}


def _check_goal(goal: str) -> None:
    """Refuse an empty goal: there is nothing to plan, and no answer could be right.

    Raises:
        ConfigError: ``goal`` is empty or only whitespace.
    """
    if not goal.strip():
        raise ConfigError("the goal is empty; say in words what the run should achieve")


def _goal_strategy(name: str) -> Strategy:
    """The strategy ``name``, if a run can start it from a goal.

    Raises:
        ConfigError: it is unknown, or starts elsewhere (``workflow``).
    """
    chosen = registry.strategy(name)
    if not chosen.starts_from_goal:
        raise ConfigError(
            f"strategy {name!r} does not start from a goal; choose one of: "
            f"{', '.join(registry.goal_strategies())}"
        )
    return chosen


async def resume(
    run_id: str,
    *,
    store: Store | None = None,
    tools: ToolsArg | None = None,
    model: Model | str | None = None,
    allow: Iterable[str] | None = None,
    budget: Budget | None = None,
    combiner_model: Model | str | None = None,
    roles: Roles | RoleMapping | None = None,
    prompts: Mapping[str, PromptFunction] | None = None,
    on_event: Subscriber | None = None,
    clock: Clock | None = None,
    lease_seconds: float | None = None,
    durability: Durability | None = None,
    env: Environment | None = None,
    output_type: OutputType | None = None,
) -> RunResult:
    """Continue a stored run that crashed, was killed, or stopped on ``max_seconds``.

    The stored plan is reused and finished steps are not run again; their history comes
    from the store. An unfinished step runs again when its tool is ``read_only`` or
    ``idempotent`` (with the same idempotency key). An ``unsafe`` step that started and
    left no result is never called again: the run stops with
    ``interrupted_unknown_outcome:<step>`` for a human to decide. The deadline
    (``max_seconds``) starts afresh. A ``replan`` run continues in the middle of its
    loop, with its iteration count, its executor agent's turns and its approvals.

    Budgets cover the whole run: model calls, tokens and cost spent before the resume
    count; each finished tool call counts as one tool call and loop detection knows it,
    while an attempt that left no result is not counted (it is retried, not repeated).

    A run that has already ended (any other stop reason) is returned as stored and
    nothing is written. A run that waits for approval is continued by
    :func:`approve`.

    One process owns a run at a time: resume takes the run's lease and is refused while
    another process holds it (a run in flight elsewhere); the lease of a process that died
    expires ``lease_seconds`` after its last renewal. Should this process be taken over
    in turn (it stalled past its lease), it stops with ``lease_lost`` without writing.

    Args:
        run_id: the stored run.
        store: where it is stored.
        tools: the toolset; default: the one stored with the run.
        model: the run's model; default: the one stored with the run.
        allow: tools the plan may use; default: the stored list.
        budget: limits; default: the stored budget.
        combiner_model: the combine call's model; default: the stored one, else ``model``.
        roles: models for some roles (see :func:`run`); a role left out keeps the model
            stored with the run, else ``model``.
        prompts: the prompt-building functions (see :func:`run`); they are not stored,
            so a run started with some needs them again here.
        on_event: receives every event of the resumed segment.
        clock: monotonic clock, for tests.
        lease_seconds: this process's lease on the run (see :func:`run`).
        durability: how the resumed segment's checkpoints reach the disk (see :func:`run`).
        env: the store, lease, durability, clock and subscribers, built once at the
            edge (:class:`~taskdecomp.environment.Environment`); a keyword above wins.
        output_type: the pydantic model class the run's ``output`` is an instance of;
            default: the answer schema stored with the run (``output`` is then its JSON
            value).

    Raises:
        RunNotFoundError: no run has this id.
        RunLeasedError: another process owns the run; the message names it.
        LeaseLostError: another process took the run over the moment this one took it.
        CorruptRecordError: the stored run does not decode.
        ConfigError: no toolset or model was stored and none is given, or one cannot load;
            the run waits for approval.
        StoreError: the store cannot be read or written.
    """
    e = Environment.of(
        env, store=store, lease_seconds=lease_seconds, durability=durability, clock=clock
    )
    stored = _resumable(e.needs_store("resume").load_run(RunId(run_id)))
    if isinstance(stored, RunResult):
        return stored
    return await continue_run(
        run_id,
        prepare=_resumable,
        tools=tools,
        model=model,
        allow=allow,
        budget=budget,
        combiner_model=combiner_model,
        roles=roles,
        prompts=prompts,
        on_event=on_event,
        env=e,
        output_type=output_type,
    )


def _resumable(stored: StoredRun) -> StoredRun | RunResult:
    """``stored`` when resume has work to do; its result when it ended.

    Raises:
        ConfigError: it waits for approval.
    """
    if stored.summary.status == "paused":
        run_id = stored.run_id
        raise ConfigError(
            f"run {run_id!r} waits for approval; continue it with `taskdecomp approve "
            f"{run_id}` or end it with `taskdecomp reject {run_id} --reason TEXT`"
        )
    return stored if stored.resumable else stored.result()


Prepare = Callable[[StoredRun], "StoredRun | RunResult"]
"""Checks a run read under its lease: the run to continue, or a result to return as is."""


async def continue_run(
    run_id: str,
    *,
    store: Store | None = None,
    prepare: Prepare,
    tools: ToolsArg | None = None,
    model: Model | str | None = None,
    allow: Iterable[str] | None = None,
    budget: Budget | None = None,
    combiner_model: Model | str | None = None,
    roles: Roles | RoleMapping | None = None,
    prompts: Mapping[str, PromptFunction] | None = None,
    on_event: Subscriber | None = None,
    clock: Clock | None = None,
    lease_seconds: float | None = None,
    before: Callable[[RunContext], None] | None = None,
    durability: Durability | None = None,
    lease: Lease | None = None,
    taken: StoredRun | None = None,
    phases: Phases | None = None,
    env: Environment | None = None,
    output_type: OutputType | None = None,
) -> RunResult:
    """Take run ``run_id``'s lease and continue it in a new segment.

    For :func:`resume` and :func:`approve`. ``prepare``
    checks the run as read under the lease (another process may have moved it on since it
    was first read); ``before`` runs once the context is restored, before the run goes on
    (an approval records itself there). ``lease``, when the caller has taken the run's
    lease already (a queue worker), is used instead of taking it; with it, ``taken`` is the
    run as the caller read it in the transaction that took the lease and reopened the run
    for the new segment, so the run is neither read nor reopened again. ``phases`` replace
    the strategy's (a run a worker only ends). ``output_type`` types the answer; default: the
    answer schema stored with the run. ``roles`` override the role models stored with the
    run (see :func:`run`); ``prompts`` are the run's prompt functions.

    Raises:
        RunLeasedError: another process owns the run.
        ConfigError: ``prepare`` refused the run, or a toolset or model cannot load.
    """
    e = Environment.of(
        env, store=store, lease_seconds=lease_seconds, durability=durability, clock=clock
    )
    durable.durability(e.durability)
    store = e.needs_store("continue_run")
    if taken is not None and lease is None:
        raise ConfigError("taken= is the run as read under a lease: give that lease= too")
    if lease is None:
        lease, stored = durable.take_over(store, RunId(run_id), seconds=e.lease_seconds)
    else:
        stored = taken if taken is not None else durable.load_leased(store, lease)
    segment = stored.segments if taken is not None else stored.segments + 1
    try:
        prepared = prepare(stored)
        if isinstance(prepared, RunResult):
            store.release_lease(lease)
            return prepared
        stored = prepared
        config = runconfig.stored_config(stored)
        budget = budget or config.budget
        planner = resolve_model(model or runconfig.require(stored.model, "model", stored.run_id))
        named = with_combiner(Roles.of(roles), combiner_model)
        role_models = Roles.of(config.roles).replaced(named).resolved(resolve_model)
        written = Prompts.of(prompts)
        prices.require_prices((planner, *role_models.values()), budget.max_cost_usd)
        combiner = role_models.get("combiner")
        toolset: Toolset | None = None
        if phases is None:
            chosen = registry.strategy(config.strategy)
            settings = chosen.options(config.options)
            typed = _stored_type(output_type, config.answer_schema)
            setup = Setup(budget=budget, combiner=combiner, store=store, answer=typed)
            toolset, phases = chosen.resume(setup, settings, stored, tools)
            phases = _answering(chosen, setup, phases)
        if toolset is None:
            toolset = as_toolset(
                tools
                if tools is not None
                else runconfig.require(stored.tools, "tools", stored.run_id)
            )
        _carry_on_scripts(stored, planner)
    except BaseException:
        store.release_lease(lease)
        raise
    allowed: Iterable[str] | None = config.allow if allow is None else allow
    if allow is None and (stored.config.get("queue") or {}).get("allow_all"):
        allowed = None  # submitted without --allow: every tool of the toolset
    goal = stored.summary.goal
    ctx = build_context(
        goal, toolset, planner, allowed, budget, e.on_event(on_event), stored.run_id
    )
    if e.clock is not None:
        ctx.clock = e.clock
    ctx.roles, ctx.prompts = role_models, written
    restore(ctx, stored)
    started = ctx.clock() - stored.usage.seconds
    journal = attach_journal(
        ctx, store, lease, segment=segment, started=started, durability=e.durability
    )
    traced = RunSpan(ctx, config.strategy, stored=stored.config, segment=segment)
    async with durable.leased(journal), traced:
        if taken is None:
            journal.reopened()
        if before is not None:
            before(ctx)
        outcome = Outcome(plan=stored.plan)
        step_id = stored.in_doubt()
        if step_id is not None:
            ctx.events.emit(RunStarted(run_id=ctx.run_id, goal=goal))
            outcome.stop(durable.interrupted(stored, step_id))
            return finish(ctx, outcome, started)
        return await execute(ctx, outcome, budget, phases, started=started)


def with_combiner(roles: Roles, combiner_model: Model | str | None) -> Roles:
    """``roles`` with ``combiner_model`` (the older keyword) as the combiner's model.

    Raises:
        ConfigError: both name a combiner model, and not the same one.
    """
    if combiner_model is None:
        return roles
    if roles.combiner is not None and roles.combiner != combiner_model:
        raise ConfigError(
            f"combiner_model={runconfig.model_name(combiner_model)!r} and roles['combiner']="
            f"{runconfig.model_name(roles.combiner)!r} both name the combine call's model; "
            "give one of them"
        )
    return dataclasses.replace(roles, combiner=combiner_model)


def _stored_type(given: OutputType | None, stored: dict[str, Any] | None) -> AnswerType | None:
    """The answer type of a continued run: the one given, else the stored schema's."""
    if given is not None:
        return answer_type(given)
    return answer_type(stored) if stored is not None else None


def _carry_on_scripts(stored: StoredRun, planner: Model) -> None:
    """Make a list-form scripted planner go on after the answers the run already used.

    The stored run counts its model calls (``usage.llm_calls``), and a script takes an
    answer per call. All were the planner's, or the last was a separate combiner's, after
    which a resumed run does not ask the planner again.
    """
    if isinstance(planner, ScriptedModel) and planner.in_order:
        planner.skip(stored.usage.llm_calls)


def run_sync(goal: str = "", **kwargs: Any) -> RunResult:
    """Blocking :func:`run`, for scripts and notebooks without an event loop.

    ``goal`` may be left out with ``plan=`` (a stored tree's title, or its node's name,
    is the goal). It returns at the deadline even when a tool ignores cancellation (that
    tool is left behind). Ctrl-C stores the run as ``cancelled`` (resumable), then raises
    :class:`KeyboardInterrupt`.

    Raises:
        RuntimeError: when called from inside a running event loop (use ``await run(...)``).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run_blocking(run(goal, **kwargs))
    raise RuntimeError("run_sync() cannot run inside an event loop; use `await run(...)`")


def resume_sync(run_id: str, **kwargs: Any) -> RunResult:
    """Blocking :func:`resume` (see :func:`run_sync`).

    Raises:
        RuntimeError: when called from inside a running event loop (use ``await resume(...)``).
    """
    no_loop("resume_sync", "resume")
    return run_blocking(resume(run_id, **kwargs))


def no_loop(name: str, instead: str) -> None:
    """Refuse a blocking form inside a running event loop (``instead``: the async one)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(f"{name}() cannot run inside an event loop; use `await {instead}(...)`")
