"""Working through a plan tree: leaves by the executor agent, inner nodes by roll-up.

Every node of the run's subtree runs once what it waits for has ended (see
:mod:`taskdecomp.strategies.tree.shape`); independent nodes run at once, at most
``max_parallel`` leaves or roll-ups at a time. A **leaf** is carried out by the executor
agent (one model turn per action: a tool call through the gateway, ``finish``, or
``decompose``). When its attempt fails, or it asks to be split, and the run decomposes as
needed, the decomposer splits it one level (with the failure as context); its children are
written into the stored tree and run, and it becomes an **inner** node: done when its
children are, its result a roll-up of theirs. A leaf that cannot be split is tried again
(``node_retries``), then fails; a failed node fails its parent, which is split again once
(``redecompose``) before it fails too.

Each node's end is a step of the run, checkpointed with the tree state; splits are on
record before the decomposer is asked, so a resumed run never asks twice for a node whose
children were written.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine, Mapping
from typing import Any

from taskdecomp import stops
from taskdecomp.approvals import ApprovalRequest
from taskdecomp.decomposition import DecompOptions
from taskdecomp.errors import TreeNotFoundError
from taskdecomp.events import NodeDecomposed, NodeFinished, NodeStarted
from taskdecomp.models import ModelRequest, ModelResponse
from taskdecomp.plan import Plan, Step, TaskId
from taskdecomp.prompts import render
from taskdecomp.runtime import RunContext, StoredState
from taskdecomp.stops import StopRun, with_detail
from taskdecomp.store.trees import TreeRepository
from taskdecomp.strategies.base import Outcome
from taskdecomp.strategies.decompose import PlanDecomposer
from taskdecomp.strategies.replan.agent import DecompositionWanted, ExecutorAgent
from taskdecomp.strategies.tree.options import TreeOptions
from taskdecomp.strategies.tree.shape import TOP, Shape, check
from taskdecomp.strategies.tree.state import NodeRecord, Split, TreeState
from taskdecomp.tree import NewNode, NodeId, PlanNode, PlanTreeId

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

SPLIT_FAILURES = frozenset({"invalid_children", "llm_empty", "store_error"})
"""Ways a split can fail that leave the node unsplit; every other one ends the run."""


class _RunModel:
    """The run's model as the decomposer sees it: every call within the run's budgets."""

    def __init__(self, ctx: RunContext) -> None:
        self._ctx = ctx

    @property
    def name(self) -> str:
        return self._ctx.model.name

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return await self._ctx.ask(request)


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
        self.ctx, self.outcome, self.options, self.state = ctx, outcome, options, state
        self.repository = repository
        self.decomposer = PlanDecomposer(repository, _RunModel(ctx))
        self.slots = asyncio.Semaphore(ctx.meter.budget.max_parallel)
        self.ends: dict[NodeId, asyncio.Future[bool]] = {}
        self.pause: StopRun | None = None
        self.cause: NodeId | None = None
        """The first node that failed of itself (not because of another)."""
        self.shape: Shape

    async def run(self) -> None:
        """Work through the tree; the root's result is the answer.

        Raises:
            StopRun: ``invalid_tree:<rule>``, ``node_failed:<node>``, or any run stop.
        """
        self._open()
        if self.options.decompose == "upfront" and not self.state.upfront:
            await self._upfront()
        if not await self._run_node(self.shape.root):
            failed = self.cause if self.cause is not None else self.shape.root
            record = self.state.record(failed)
            raise StopRun(
                with_detail("node_failed", str(failed)),
                message=f"node {failed} failed ({record.reason}"
                + (f": {record.message}" if record.message else "")
                + "), and with it every node above it up to the run's root",
            )
        result = self.state.record(self.shape.root).result
        self.outcome.answer = result if isinstance(result, str) else json.dumps(result)
        self._save()

    # -- the tree -----------------------------------------------------------------------

    def _open(self) -> None:
        """Find (or store) the run's tree, check it, and put the run's start on record."""
        state, options = self.state, self.options
        if state.plan_id is None:
            if options.plan_id is not None:
                state.plan_id, state.root = options.plan_id, options.node_id
            else:
                tree = self.repository.create_plan(self.ctx.goal, [NewNode(name=self.ctx.goal)])
                state.plan_id, state.root = tree.id, tree.nodes[0].id
        try:
            tree = self.repository.get_plan_tree(PlanTreeId(state.plan_id))
        except TreeNotFoundError as exc:
            raise StopRun(with_detail("invalid_tree", "no_plan"), message=str(exc)) from None
        if state.root is not None and tree.node(NodeId(state.root)) is None:
            raise StopRun(
                with_detail("invalid_tree", "no_node"),
                message=f"plan {tree.id} has no node {state.root}",
            )
        if not tree.nodes:
            raise StopRun(
                with_detail("invalid_tree", "no_node"), message=f"plan {tree.id} has no nodes"
            )
        first = not state.known
        if first:
            state.known = [node.id for node in tree.nodes]
        self.shape = Shape(tree, state)
        check(self.shape)
        if first:
            self._save()

    def _reload(self) -> None:
        self.shape = Shape(self.repository.get_plan_tree(self.shape.tree.id), self.state)

    def _added(self) -> int:
        """How many nodes this run added below its root."""
        known, root = set(self.state.known), self.shape.root
        tree = self.shape.tree
        return sum(
            1
            for node in tree.nodes
            if node.id not in known
            and (root == TOP or root in {step.id for step in tree.path(node.id)})
        )

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
            ok = await self._work(node_id)
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
            return record.status == "ok"
        if self.pause is not None:
            raise self.pause
        for dep in self.shape.waits_for(node_id):
            if not await self._end(dep):
                return self._fail(node_id, f"node_failed:{dep}", f"node {dep} it needs failed")
        if self.shape.is_leaf(node_id):
            return await self._leaf(node_id)
        return await self._inner(node_id)

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
        node = self.shape.node(node_id)
        assert node is not None  # the run's top is never a leaf
        record = self.state.record(node_id)
        while True:
            step = self._step(node, attempt=record.attempts)
            splittable = self._can_split(node_id)
            record.status = "running"
            self._started(node, leaf=True)
            async with self.slots:
                if self.pause is not None:
                    raise self.pause
                started = self.ctx.clock()
                try:
                    result = await self._agent(node, splittable)(self.state.number(node_id), step)
                except DecompositionWanted as wanted:
                    reason, message = "decompose", wanted.reason
                except StopRun as stop:
                    if stop.reason.partition(":")[0] not in NODE_FAILURES:
                        raise
                    reason, message = stop.reason, stop.message
                else:
                    self._ok(node_id, step, result, started=started)
                    return True
            self.state.finished(step.id)
            record.attempts += 1
            record.reason, record.message = reason, message or None
            failure = _failure_text(reason, message)
            if splittable and await self._split(node_id, failure):
                return await self._inner(node_id)
            if reason == "decompose" or record.attempts > self.options.node_retries:
                if reason == "decompose":
                    record.reason = "cannot_split"
                    record.message = f"it asked to be split and cannot be: {message}"
                return self._fail(node_id, record.reason or reason, record.message)
            self._save()

    def _agent(self, node: PlanNode, splittable: bool) -> ExecutorAgent:
        path = [step.name for step in self.shape.tree.path(node.id)]
        needs = [
            {"id": dep, "name": self._name(dep), "result": self.state.record(dep).result}
            for dep in self.shape.waits_for(node.id)
        ]
        progress = {"objective": self.ctx.goal, "path": path, "dependencies": needs}
        return ExecutorAgent(
            self.ctx,
            progress=lambda: progress,
            log=self.state,
            max_turns=self.options.max_agent_turns,
            prompts=None,
            system=render("tree/executor"),
            decompose=splittable,
        )

    def _can_split(self, node_id: NodeId) -> bool:
        if self.options.decompose != "as-needed":
            return False
        split = self.state.splits.get(str(node_id))
        if split is not None and (split.children is not None or self.shape.children(node_id)):
            return False  # split once already (a crash before its answer allows another)
        return (
            self.shape.depth(node_id) < self.options.max_depth
            and self._added() < self.options.max_nodes
        )

    # -- splits -------------------------------------------------------------------------

    async def _split(self, node_id: NodeId, failure: str, *, redo: bool = False) -> bool:
        """Ask the decomposer for ``node_id``'s children; whether any were written.

        The split is on record before the question, so a resumed run finds the children
        of an answer whose checkpoint it lost, instead of asking again.
        """
        siblings = self.shape.tree.children(node_id)
        first = max((kid.position for kid in siblings), default=-1) + 1
        split = Split(first_position=first, reason=failure, redo=redo)
        self.state.splits[str(node_id)] = split
        self._save()
        budget = self.options.max_nodes - self._added()
        options = DecompOptions(
            max_depth=self.options.max_depth,
            max_children=self.options.max_children,
            total_node_budget=max(budget, 1),
            expand_depth=1,
            auto_on_create=False,
        )
        result = await self.decomposer.decompose_node(
            self.shape.tree.id, node_id, options, failure=failure
        )
        problem = result.stats.get("failures", {}).get(str(node_id))
        if problem and problem["reason"].partition(":")[0] not in SPLIT_FAILURES:
            raise StopRun(stops.StopReason(problem["reason"]), message=problem["message"])
        self._reload()
        children: list[int] = [kid.id for kid in self.shape.children(node_id)]
        split.children = children
        if not children:
            self._save()
            return False
        self.state.record(node_id).status = "decomposed"
        self.ctx.events.emit(
            NodeDecomposed(
                run_id=self.ctx.run_id, node_id=node_id, children=tuple(children), reason=failure
            )
        )
        self._save()
        return True

    def _gate(self, node_id: NodeId) -> None:
        """Pause before the children of an as-needed split run, until a human approves."""
        split = self.state.splits.get(str(node_id))
        if not self.options.approve_decompositions or split is None or not split.children:
            return
        steps = tuple(
            Step(
                id=TaskId(f"node-{kid.id}"), title=kid.name, instruction=kid.instruction or kid.name
            )
            for kid in self.shape.children(node_id)
        )
        self.ctx.approvals.require(
            ApprovalRequest.for_plan(Plan(steps=steps), redactor=self.ctx.redactor)
        )

    async def _upfront(self) -> None:
        """Grow the run's subtree breadth-first below each leaf, then run it as it is."""
        for node, depth in list(self.shape.scope()):
            if node is None or node.leaf or not self.shape.is_leaf(node.id):
                continue
            levels, budget = self.options.max_depth - depth, self.options.max_nodes - self._added()
            if levels < 1 or budget < 1:
                continue
            options = DecompOptions(
                max_depth=self.options.max_depth,
                max_children=self.options.max_children,
                total_node_budget=budget,
                expand_depth=levels,
                auto_on_create=False,
            )
            result = await self.decomposer.decompose_node(self.shape.tree.id, node.id, options)
            for problem in result.stats.get("failures", {}).values():
                if problem["reason"].partition(":")[0] not in SPLIT_FAILURES:
                    raise StopRun(stops.StopReason(problem["reason"]), message=problem["message"])
            self._reload()
        check(self.shape)
        self.state.upfront = True
        self._save()

    # -- inner nodes --------------------------------------------------------------------

    async def _inner(self, node_id: NodeId) -> bool:
        record = self.state.record(node_id)
        node = self.shape.node(node_id)
        if record.status != "decomposed":
            record.status = "running"
        if node is not None:
            self._started(node, leaf=False)
        self._gate(node_id)
        while True:
            kids = self.shape.children(node_id)
            done = await self._all([self._run_node(kid.id) for kid in kids])
            if all(done):
                break
            failed = next(kid for kid, ok in zip(kids, done, strict=True) if not ok)
            if not await self._redo(node_id, failed):
                why = self.state.record(failed.id)
                return self._fail(
                    node_id,
                    f"node_failed:{failed.id}",
                    f"its subtask {failed.id} {failed.name!r} failed ({why.reason})",
                )
            self._gate(node_id)
        return await self._rollup(node_id, kids)

    async def _redo(self, node_id: NodeId, failed: PlanNode) -> bool:
        """Split ``node_id`` again, once, after its child ``failed`` failed."""
        split = self.state.splits.get(str(node_id))
        if (
            not self.options.redecompose
            or self.options.decompose == "none"
            or node_id == TOP
            or (split is not None and split.redo)
            or self.shape.depth(node_id) >= self.options.max_depth
            or self._added() >= self.options.max_nodes
        ):
            return False
        why = self.state.record(failed.id)
        failure = _failure_text(
            why.reason or "failed",
            f"its subtask {failed.name!r} failed" + (f": {why.message}" if why.message else ""),
        )
        return await self._split(node_id, failure, redo=True)

    async def _rollup(self, node_id: NodeId, kids: list[PlanNode]) -> bool:
        results = [self.state.record(kid.id).result for kid in kids]
        node = self.shape.node(node_id)
        step = self._step(node, attempt=0) if node is not None else self._top_step()
        started = self.ctx.clock()
        if len(kids) == 1:
            result = results[0]
        else:
            async with self.slots:
                response = await self.ctx.ask(self._rollup_request(node, kids, results))
            result = response.text.strip()
        self._ok(node_id, step, result, started=started)
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
        )

    # -- records ------------------------------------------------------------------------

    def _step(self, node: PlanNode, *, attempt: int) -> Step:
        suffix = f".{attempt + 1}" if attempt else ""
        return Step(
            id=TaskId(f"node-{node.id}{suffix}"),
            title=node.name,
            instruction=node.instruction or node.name,
        )

    def _top_step(self) -> Step:
        tree = self.shape.tree
        return Step(id=TaskId(f"plan-{tree.id}"), title=tree.title, instruction=tree.title)

    def _name(self, node_id: NodeId) -> str:
        node = self.shape.tree.node(node_id)
        return node.name if node is not None else ""

    def _started(self, node: PlanNode, *, leaf: bool) -> None:
        self.ctx.events.emit(
            NodeStarted(
                run_id=self.ctx.run_id,
                node_id=node.id,
                name=node.name,
                parent_id=node.parent_id,
                leaf=leaf,
            )
        )

    def _ok(self, node_id: NodeId, step: Step, result: Any, *, started: float) -> None:
        record = self.state.record(node_id)
        record.status, record.result = "ok", result
        record.reason = record.message = None
        if node_id != TOP:
            self.ctx.events.emit(
                NodeFinished(run_id=self.ctx.run_id, node_id=node_id, status="ok", result=result)
            )
        self.ctx.step_finished(
            self.state.number(node_id), step, result, started=started, then=self._stored
        )

    def _fail(self, node_id: NodeId, reason: str, message: str | None) -> bool:
        record = self.state.record(node_id)
        record.status, record.reason, record.message = "failed", reason, message
        if self.cause is None and not reason.startswith("node_failed:"):
            self.cause = node_id
        if node_id != TOP:
            self.ctx.events.emit(
                NodeFinished(
                    run_id=self.ctx.run_id, node_id=node_id, status="failed", reason=reason
                )
            )
        self._save()
        return False

    def _plan(self) -> Plan:
        """The run's plan: a step per node that has a number, in number order."""
        finished = {
            entry.plan_step.id.partition(".")[0]: entry.plan_step for entry in self.ctx.history
        }
        numbered = sorted(
            (record.step_no, int(key))
            for key, record in self.state.nodes.items()
            if record.step_no is not None
        )
        steps: list[Step] = []
        for _, node_id in numbered:
            node = self.shape.tree.node(NodeId(node_id))
            if node_id == TOP:
                steps.append(finished.get(TaskId(f"plan-{self.shape.tree.id}"), self._top_step()))
            elif node is not None:
                steps.append(finished.get(TaskId(f"node-{node_id}"), self._step(node, attempt=0)))
        return Plan(steps=tuple(steps))

    def _stored(self) -> StoredState:
        plan = self.outcome.plan = self._plan()
        return plan, self.state.snapshot(), self.ctx.approvals.to_dict()

    def _save(self) -> None:
        plan, state, approvals = self._stored()
        if self.ctx.journal is not None:
            self.ctx.journal.state_saved(plan, state, approvals=approvals)


def _failure_text(reason: str, message: str | None) -> str:
    if reason == "decompose":
        return f"the executor asked to split the task: {message or 'it is too big'}"
    return f"an attempt failed ({reason})" + (f": {message}" if message else "")


def _fail_future(end: asyncio.Future[bool], stop: StopRun) -> None:
    if not end.done():
        end.set_exception(stop)
        end.exception()  # retrieved here: a node nobody waited for logs nothing


def node_records(state: TreeState) -> Mapping[str, NodeRecord]:
    """Each node's record, by node id (what ``show`` and the service draw)."""
    return state.nodes
