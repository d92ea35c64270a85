"""Working through a plan tree: leaves by the executor agent, inner nodes by roll-up.

Every node of the run's subtree runs once what it waits for has ended (see
:mod:`taskdecomp.strategies.tree.shape`); independent nodes run at once, at most
``max_parallel`` leaf attempts, roll-ups or splits at a time. A **leaf** is carried out by
the executor agent (one model turn per action: a tool call through the gateway,
``finish``, or ``decompose``), given the goal, its path, its instruction and the results of
the nodes it needs. When its attempt fails, or it asks to be split, and the run
decomposes as needed, the decomposer splits it one level
(:mod:`taskdecomp.strategies.tree.splits`); its children are written into the stored tree
and run, and it becomes an **inner** node: done when its children are, its result a
roll-up of theirs (one model call; with one child, that child's result). A leaf that
cannot be split is tried again (``node_retries``), then fails; a failed node fails its
parent, which is split again once (``redecompose``) before it fails too. When the run's
root fails, the run stops with ``node_failed:<node>``, naming the node whose own failure
brought it down.

Each attempt at a leaf compares its tool calls only with its own for loop detection: two
leaves, or two attempts at one, may make the same call.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import Coroutine
from typing import Any

from taskdecomp import stops
from taskdecomp.errors import TreeNotFoundError
from taskdecomp.gateway import LOOP_SCOPE
from taskdecomp.models import ModelRequest, ModelResponse
from taskdecomp.prompts import render
from taskdecomp.repairs import ask_checked
from taskdecomp.runtime import RunContext
from taskdecomp.stops import StopRun, with_detail
from taskdecomp.store.trees import TreeRepository
from taskdecomp.strategies.base import Outcome
from taskdecomp.strategies.replan.agent import DecompositionWanted, ExecutorAgent
from taskdecomp.strategies.tree import done
from taskdecomp.strategies.tree.options import TreeOptions
from taskdecomp.strategies.tree.records import Records
from taskdecomp.strategies.tree.shape import Shape, check
from taskdecomp.strategies.tree.splits import Splitter
from taskdecomp.strategies.tree.state import TreeState
from taskdecomp.telemetry import spans
from taskdecomp.tree import NewNode, NodeId, PlanNode, PlanTree, PlanTreeId

NODE_FAILURES = frozenset(
    {
        "tool_error",
        "tool_timeout",
        "tool_bad_args",
        "tool_denied",
        "tool_missing",
        "invalid_action",
        "max_agent_turns",
        "loop_detected",
        "bad_ref",
        "llm_empty",
    }
)
"""Stops that fail an attempt at a leaf; every other stop ends the run (budgets, model or
store failures, a pause for approval)."""

_PROGRESS: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("tree_progress")
"""The progress of the attempt the current task makes, as the executor agent sees it."""


class TreeRun:
    """One run (or resumed segment) working through a plan tree."""

    def __init__(
        self,
        ctx: RunContext,
        outcome: Outcome,
        options: TreeOptions,
        state: TreeState,
        repository: TreeRepository,
    ) -> None:
        self.ctx, self.options, self.state = ctx, options, state
        self.repository = repository
        self.records = Records(ctx, outcome, state)
        self.slots = asyncio.Semaphore(ctx.meter.budget.max_parallel)
        self.splits = Splitter(ctx, options, self.records, repository, self.slots)
        self.ends: dict[NodeId, asyncio.Future[bool]] = {}
        self.agents: dict[bool, ExecutorAgent] = {}
        self.pause: StopRun | None = None

    @property
    def shape(self) -> Shape:
        """The tree as the run sees it now."""
        return self.records.shape

    async def run(self) -> None:
        """Work through the tree; the root's result is the answer.

        Raises:
            StopRun: ``invalid_tree:<rule>``, ``node_failed:<node>``, or any run stop.
        """
        try:
            await self._work_through()
        finally:
            self.records.settle()

    async def _work_through(self) -> None:
        await self._open()
        if self.options.decompose == "upfront" and not self.state.upfront:
            await self.splits.grow()
        root = self.shape.root
        if not await self._run_node(root):
            cause = self.records.cause(root)
            record = self.state.record(cause)
            raise StopRun(
                with_detail("node_failed", str(cause)),
                message=f"node {cause} failed ({record.reason}"
                + (f": {record.message}" if record.message else "")
                + "), and with it every node above it up to the run's root",
            )
        self.records.answer(self.state.record(root).result)

    # -- the tree -----------------------------------------------------------------------

    async def _open(self) -> None:
        """Find (or store) the run's tree, check it, and put the run's start on record.

        Raises:
            StopRun: ``invalid_tree:<rule>``: the plan or the node is not stored, or the
                tree cannot be worked through.
        """
        state = self.state
        if state.plan_id is None:
            self._choose()
        tree = self._load(PlanTreeId(state.plan_id or 0))
        first = not state.known
        if first:
            state.known, state.created = [node.id for node in tree.nodes], []
        self.records.reshape(tree)
        if state.created is None:  # stored before a run kept its own nodes: all are
            known = set(state.known)
            state.created = [node.id for node in tree.nodes if node.id not in known]
            state.added = self.shape.added(known)
            self.records.reshape(tree)
        await self.splits.adopt()
        if first and (self.options.decompose != "none" or self.options.plan_id is None):
            await self.records.save_durably()  # the tree it writes to, and its nodes there
        elif first:
            self.records.save()  # it writes nothing to the tree it was given
        check(self.shape)

    def _choose(self) -> None:
        """The run's tree: the plan it was given, or a new one with the goal as its root."""
        if self.options.plan_id is not None:
            self.state.plan_id, self.state.root = self.options.plan_id, self.options.node_id
            return
        tree = self.repository.create_plan(self.ctx.goal, [NewNode(name=self.ctx.goal)])
        self.state.plan_id, self.state.root = tree.id, tree.nodes[0].id

    def _load(self, plan_id: PlanTreeId) -> PlanTree:
        try:
            tree = self.repository.get_plan_tree(plan_id)
        except TreeNotFoundError as exc:
            raise StopRun(with_detail("invalid_tree", "no_plan"), message=str(exc)) from None
        root = self.state.root
        if root is not None and tree.node(NodeId(root)) is None:
            raise StopRun(
                with_detail("invalid_tree", "no_node"), message=f"plan {tree.id} has no node {root}"
            )
        if not tree.nodes:
            raise StopRun(
                with_detail("invalid_tree", "empty"), message=f"plan {tree.id} has no nodes"
            )
        return tree

    # -- running nodes ------------------------------------------------------------------

    def _end(self, node_id: NodeId) -> asyncio.Future[bool]:
        end = self.ends.get(node_id)
        if end is None:
            end = self.ends[node_id] = asyncio.get_running_loop().create_future()
            if self.pause is not None:
                _fail_future(end, self.pause)
        return end

    async def _run_node(self, node_id: NodeId) -> bool:
        end = self._end(node_id)
        try:
            leaf = self.shape.is_leaf(node_id)
            with spans.node(self.ctx, node_id, self._name(node_id), leaf=leaf) as traced:
                ok = traced.ended(await self._work(node_id), self.state.record(node_id).reason)
        except StopRun as stop:
            if stop.reason == stops.AWAITING_APPROVAL:
                self._paused(stop)
            raise
        if not end.done():
            end.set_result(ok)
        return ok

    def _paused(self, stop: StopRun) -> None:
        """Start nothing more; whatever waits for a node that will not end now pauses too."""
        self.pause = self.pause or stop
        for end in self.ends.values():
            _fail_future(end, stop)

    async def _work(self, node_id: NodeId) -> bool:
        record = self.state.record(node_id)
        if record.status in ("ok", "failed"):
            if record.status == "failed" and self._settle_below(node_id):
                self.records.save()
            return record.status == "ok"
        if self.pause is not None:
            raise self.pause
        for dep in self.shape.waits_for(node_id):
            if not await self._end(dep):
                self._settle_below(node_id)
                return self.records.fail(
                    node_id, f"node_failed:{dep}", f"node {dep}, which it needs, failed"
                )
        if self.shape.is_leaf(node_id):
            return await self._leaf(node_id)
        return await self._inner(node_id)

    def _settle_below(self, node_id: NodeId) -> bool:
        """End the subtree of ``node_id``, which failed (maybe without running it).

        Whatever waits for one of its nodes must not wait forever: each ends as the run's
        record has it (``ok`` or ``failed``), or, never run, fails for ``node_id``. Returns
        whether some did not run (their records changed: not checkpointed here).
        """
        below = self.shape.below(node_id)
        unrun = [kid for kid in below if self.state.record(kid).status not in ("ok", "failed")]
        self.records.skipped(unrun, node_id)
        for kid in below:
            end = self._end(kid)
            if not end.done():
                end.set_result(self.state.record(kid).status == "ok")
        return bool(unrun)

    async def _all(self, work: list[Coroutine[Any, Any, bool]]) -> list[bool]:
        """Run ``work`` at once; a pause lets the others end first, any other stop cancels."""
        tasks = [asyncio.create_task(item) for item in work]
        pause: StopRun | None = None
        try:
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
                for task in done:
                    exc = None if task.cancelled() else task.exception()
                    if isinstance(exc, StopRun) and exc.reason == stops.AWAITING_APPROVAL:
                        pause = pause or exc
                    elif exc is not None:
                        raise exc
            if pause is not None:
                raise pause
            return [task.result() for task in tasks]
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- leaves -------------------------------------------------------------------------

    async def _leaf(self, node_id: NodeId) -> bool:
        """Attempt the leaf until it ends: done, split (then run as inner), or failed.

        A split the run asked for before it stopped (and got no answer to) is asked again
        first, instead of another attempt.
        """
        node = self.shape.node(node_id)
        assert node is not None  # the run's top is never a leaf
        record = self.state.record(node_id)
        while True:
            asked = self.state.asking.get(str(node_id))
            splittable = asked is not None or self.splits.can_split(node_id)
            failure = asked.reason if asked is not None else await self._attempt(node, splittable)
            if failure is None:
                return True
            if splittable and await self.splits.split(node_id, failure):
                return await self._inner(node_id)
            if record.reason == "decompose":
                record.reason = "cannot_split"
                record.message = f"it asked to be split and was not: {record.message}"
            if record.attempts > self.options.node_retries:
                return self.records.fail(node_id, record.reason or "failed", record.message)
            self.records.save()

    async def _attempt(self, node: PlanNode, splittable: bool) -> str | None:
        """One attempt at a leaf by the executor agent; ``None`` when it is done.

        Returns how it failed, in words for the decomposer (the node's record keeps the
        stop reason).
        """
        record = self.state.record(node.id)
        step = self.records.step(node, attempt=record.attempts)
        async with self.slots:
            if self.pause is not None:
                raise self.pause
            record.status = "running"
            self.records.started(node, leaf=True)
            started = self.ctx.clock()
            turns = self.state.turns(step.id)  # the agent's own list, kept when it fails
            scope = LOOP_SCOPE.set(step.id)
            seen = _PROGRESS.set(self._progress(node))
            try:
                result = await self._agent(splittable)(self.state.number(node.id), step)
            except DecompositionWanted as wanted:
                reason, message = "decompose", wanted.reason
            except StopRun as stop:
                if stop.reason.partition(":")[0] not in NODE_FAILURES:
                    raise
                reason, message = stop.reason, stop.message
            else:
                self.records.ok(node.id, step, result, started=started)
                return None
            finally:
                LOOP_SCOPE.reset(scope)
                _PROGRESS.reset(seen)
        self.state.finished(step.id)
        record.done = done.kept(record.done, turns)
        record.attempts += 1
        record.reason, record.message = reason, message or None
        return _failure_text(reason, message)

    def _progress(self, node: PlanNode) -> dict[str, Any]:
        """What the executor agent sees of the run, at each turn of an attempt at ``node``."""
        record = self.state.record(node.id)
        progress: dict[str, Any] = {
            "objective": self.ctx.goal,
            "path": [step.name for step in self.shape.path(node.id)],
            "dependencies": [
                {"id": dep, "name": self._name(dep), "result": self.state.record(dep).result}
                for dep in self.shape.waits_for(node.id)
            ],
        }
        if record.attempts:
            progress["last_attempt"] = {
                "failed": record.reason,
                "message": record.message,
                "done": record.done,
            }
        return progress

    def _agent(self, splittable: bool) -> ExecutorAgent:
        """The run's executor agent (one that may answer ``decompose``, or one that may not).

        Made once: each attempt gives it its node's progress through :data:`_PROGRESS`.
        """
        agent = self.agents.get(splittable)
        if agent is None:
            agent = self.agents[splittable] = ExecutorAgent(
                self.ctx,
                progress=_PROGRESS.get,
                log=self.state,
                max_turns=self.options.max_agent_turns,
                prompts=None,
                system=render("tree/executor"),
                decompose=splittable,
            )
        return agent

    def _name(self, node_id: NodeId) -> str:
        node = self.shape.node(node_id)
        return node.name if node is not None else ""

    # -- inner nodes --------------------------------------------------------------------

    async def _inner(self, node_id: NodeId) -> bool:
        """Run the node's children (split again once if one fails), then roll them up."""
        record = self.state.record(node_id)
        node = self.shape.node(node_id)
        if record.status != "decomposed":
            record.status = "running"
        if node is not None:
            self.records.started(node, leaf=False)
        self.splits.gate(node_id)
        while True:
            kids = self.shape.children(node_id)
            done = await self._all([self._run_node(kid.id) for kid in kids])
            if all(done):
                return await self._rollup(node_id, kids)
            failed = kids[done.index(False)]
            why = self.state.record(failed.id)
            failure = f"its subtask {failed.name!r} failed ({why.reason}" + (
                f": {why.message})" if why.message else ")"
            )
            if not (
                self.splits.may_redo(node_id)
                and await self.splits.split(node_id, failure, redo=True)
            ):
                return self.records.fail(
                    node_id,
                    f"node_failed:{failed.id}",
                    f"its subtask {failed.id} {failed.name!r} failed ({why.reason})",
                )
            self.splits.gate(node_id)

    async def _rollup(self, node_id: NodeId, kids: list[PlanNode]) -> bool:
        results = [self.state.record(kid.id).result for kid in kids]
        node = self.shape.node(node_id)
        step = self.records.step(node, attempt=0) if node is not None else self.records.top_step()
        started = self.ctx.clock()
        if len(kids) == 1:
            result = results[0]
        else:
            async with self.slots:
                result = await ask_checked(
                    self.ctx, self._rollup_request(node, kids, results), _rolled_up
                )
        self.records.ok(node_id, step, result, started=started)
        return True

    def _rollup_request(
        self, node: PlanNode | None, kids: list[PlanNode], results: list[Any]
    ) -> ModelRequest:
        tree = self.shape.tree
        task = {
            "name": node.name if node is not None else tree.title,
            "instruction": node.instruction if node is not None else "",
            "path": [step.name for step in tree.path(node.id)] if node is not None else [],
        }
        subtasks = [
            {"name": kid.name, "result": result} for kid, result in zip(kids, results, strict=True)
        ]
        payload = {"objective": self.ctx.goal, "task": task, "subtasks": subtasks}
        return ModelRequest(
            phase="rollup",
            messages=(
                {"role": "system", "content": render("tree/rollup")},
                {"role": "user", "content": json.dumps(payload, ensure_ascii=True)},
            ),
            goal=self.ctx.goal,
            payload=payload,
        )


def _rolled_up(response: ModelResponse) -> str:
    """A roll-up's result: its text (any text passes; a check that refuses one repairs it)."""
    return response.text.strip()


def _failure_text(reason: str, message: str | None) -> str:
    """How an attempt failed, in words, for the decomposer."""
    if reason == "decompose":
        return f"the executor asked to split the task: {message or 'it is too big'}"
    return f"an attempt failed ({reason})" + (f": {message}" if message else "")


def _fail_future(end: asyncio.Future[bool], stop: StopRun) -> None:
    if not end.done():
        end.set_exception(stop)
        end.exception()  # retrieved here: a node nobody waited for logs nothing
