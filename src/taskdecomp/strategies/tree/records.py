"""What a ``tree`` run writes down: each node's record, its events, and the checkpoints.

A node that ends ``ok`` is a step of the run: its result goes into the history and the
journal checkpoints it with the tree state, in one transaction (a leaf's attempt is step
``node-<id>``, its retries ``node-<id>.2``, ...; the roll-up of every root of a plan is
``plan-<id>``). A node that fails, and every split, is checkpointed with the state alone.
The run's plan, stored with every checkpoint, has a step per node that has a number (a
node a second split replaced keeps its step once it finished).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from taskdecomp.errors import TaskdecompError
from taskdecomp.events import NodeDecomposed, NodeFinished, NodeStarted
from taskdecomp.plan import Plan, Step, TaskId
from taskdecomp.runtime import RunContext, StoredState
from taskdecomp.stops import StopRun
from taskdecomp.strategies.base import Outcome
from taskdecomp.strategies.tree.shape import TOP, Shape
from taskdecomp.strategies.tree.state import TreeState
from taskdecomp.tree import NodeId, PlanNode, PlanTree


class Records:
    """The run's record of its nodes (see the module docstring).

    Args:
        ctx: the run.
        outcome: where the run's plan and answer go.
        state: the tree state, changed in place and stored with every checkpoint.
    """

    def __init__(self, ctx: RunContext, outcome: Outcome, state: TreeState) -> None:
        self.ctx, self.outcome, self.state = ctx, outcome, state
        self.shape: Shape
        """The tree as the run sees it now (:meth:`reshape` after every change)."""
        self._soon: asyncio.Handle | None = None
        """The checkpoint of the nodes that just started, to be made (:meth:`started`)."""
        self._failed: StopRun | TaskdecompError | None = None
        """Why that checkpoint could not be made: raised by the next one."""
        self._finished: dict[str, Step] = {}
        """The finished steps of the history, by node (``node-<id>``, ``plan-<id>``)."""
        self._seen = 0
        """How much of the history :attr:`_finished` holds."""
        self._steps: tuple[Shape | None, dict[NodeId, Step]] = (None, {})
        """Each node's step, for one shape (see :meth:`_plan`)."""

    def reshape(self, tree: PlanTree) -> Shape:
        """See ``tree`` (as stored now) with the state's splits; return the new shape."""
        self.shape = Shape(tree, self.state)
        return self.shape

    def step(self, node: PlanNode, *, attempt: int) -> Step:
        """The step of ``node``'s attempt number ``attempt`` (from 0), or of its roll-up."""
        suffix = f".{attempt + 1}" if attempt else ""
        return Step(
            id=TaskId(f"node-{node.id}{suffix}"),
            title=node.name,
            instruction=node.instruction or node.name,
        )

    def top_step(self) -> Step:
        """The step of the roll-up of every root of the plan."""
        tree = self.shape.tree
        return Step(id=TaskId(f"plan-{tree.id}"), title=tree.title, instruction=tree.title)

    def started(self, node: PlanNode, *, leaf: bool) -> None:
        """Say that ``node`` started: a leaf's attempt, or an inner node's children.

        Saved once the nodes starting with it have started too (one checkpoint for a wave
        of leaves, not one each), so that whoever reads the run from the store sees it
        running.
        """
        self.ctx.events.emit(
            NodeStarted(
                run_id=self.ctx.run_id,
                node_id=node.id,
                name=node.name,
                parent_id=node.parent_id,
                leaf=leaf,
            )
        )
        if self._soon is None:  # one checkpoint for every node starting now
            self._soon = asyncio.get_running_loop().call_soon(self._save_soon)

    def settle(self) -> None:
        """Make the checkpoint of the nodes that started last, if none was made since.

        Before the run ends: whatever stopped it, the store shows what was running.
        """
        if self._soon is not None:
            with contextlib.suppress(StopRun, TaskdecompError):  # the run's stop says more
                self.save()

    def ok(self, node_id: NodeId, step: Step, result: Any, *, started: float) -> None:
        """``node_id`` ended with ``result``: a step of the run, checkpointed."""
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

    def fail(self, node_id: NodeId, reason: str, message: str | None) -> bool:
        """``node_id`` failed for ``reason`` (a stop reason); checkpointed. Returns ``False``."""
        record = self.state.record(node_id)
        record.status, record.reason, record.message = "failed", reason, message
        if node_id != TOP:
            self.ctx.events.emit(
                NodeFinished(
                    run_id=self.ctx.run_id, node_id=node_id, status="failed", reason=reason
                )
            )
        self.save()
        return False

    def skipped(self, node_ids: list[NodeId], above: NodeId) -> None:
        """``node_ids`` fail unrun: ``above``, over them, failed before running them.

        Not checkpointed here: the failure of ``above`` that follows is.
        """
        reason = f"node_failed:{above}"
        for node_id in node_ids:
            record = self.state.record(node_id)
            record.status, record.reason = "failed", reason
            record.message = f"node {above}, above it, failed before it ran"
            self.ctx.events.emit(
                NodeFinished(
                    run_id=self.ctx.run_id, node_id=node_id, status="failed", reason=reason
                )
            )

    def decomposed(self, node_id: NodeId, children: list[int], reason: str) -> None:
        """``node_id`` was split into ``children``; checkpointed."""
        self.state.record(node_id).status = "decomposed"
        self.ctx.events.emit(
            NodeDecomposed(
                run_id=self.ctx.run_id, node_id=node_id, children=tuple(children), reason=reason
            )
        )
        self.save()

    def cause(self, node_id: NodeId) -> NodeId:
        """The node whose own failure ``node_id``'s failure comes from (itself, if none).

        A node that fails because a child or a node it needs failed says so in its reason
        (``node_failed:<node>``); the chain ends at a node that failed of itself.
        """
        seen = {node_id}
        reason = self.state.record(node_id).reason or ""
        while reason.startswith("node_failed:"):
            after = NodeId(int(reason.partition(":")[2]))
            if after in seen:
                break
            seen.add(after)
            node_id, reason = after, self.state.record(after).reason or ""
        return node_id

    def answer(self, result: Any) -> None:
        """The run's answer: the root's result, as text."""
        self.outcome.answer = result if isinstance(result, str) else json.dumps(result)

    def save(self) -> None:
        """Checkpoint the tree state (with the run's plan and approvals)."""
        plan, state, approvals = self._stored()
        if self.ctx.journal is not None:
            self.ctx.journal.state_saved(plan, state, approvals=approvals)

    async def save_durably(self) -> None:
        """Checkpoint the tree state and wait until it is on disk.

        For what must be on record before the run acts on it (a split, before the
        decomposer is asked): a journal that commits in groups could lose it in a crash.
        """
        self.save()
        if self.ctx.journal is not None:
            await self.ctx.journal.durably(_nothing)  # every write before it is on disk too

    def _plan(self) -> Plan:
        """The run's plan: a step per node that has a number, in number order.

        Made at every checkpoint, so from what earlier ones found: the finished steps are
        read from the history once, and each node's step is made once per shape.
        """
        history = self.ctx.history
        for entry in history[self._seen :]:
            self._finished[entry.plan_step.id.partition(".")[0]] = entry.plan_step
        self._seen = len(history)
        if self._steps[0] is not self.shape:
            self._steps = (self.shape, {})
        numbered = sorted(
            (record.step_no, int(key))
            for key, record in self.state.nodes.items()
            if record.step_no is not None
        )
        steps: list[Step] = []
        for _, node_id in numbered:
            step = self._finished.get(self._key(NodeId(node_id))) or self._step_of(NodeId(node_id))
            if step is not None:
                steps.append(step)
        return Plan(steps=tuple(steps))

    def _key(self, node_id: NodeId) -> str:
        return f"plan-{self.shape.tree.id}" if node_id == TOP else f"node-{node_id}"

    def _step_of(self, node_id: NodeId) -> Step | None:
        """The node's step (``None`` for a node gone from the tree that never finished)."""
        made = self._steps[1]
        step = made.get(node_id)
        if step is None:
            node = self.shape.node(node_id)
            if node_id == TOP:
                step = self.top_step()
            elif node is not None:
                step = self.step(node, attempt=0)
            else:
                return None
            made[node_id] = step
        return step

    def _save_soon(self) -> None:
        self._soon = None
        try:
            self.save()
        except (StopRun, TaskdecompError) as exc:  # not lost: the next checkpoint raises it
            self._failed = exc

    def _stored(self) -> StoredState:
        if self._soon is not None:  # this checkpoint has the nodes that started
            self._soon.cancel()
            self._soon = None
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed
        plan = self.outcome.plan = self._plan()
        return plan, self.state.snapshot(), self.ctx.approvals.to_dict()


def _nothing() -> None:
    """A write that writes nothing: waiting for it waits for the writes before it."""
