"""Splitting nodes while a ``tree`` run works through its tree.

As needed, a leaf whose attempt failed (or that asked for it) is split one level by the
:class:`~taskdecomp.strategies.decompose.PlanDecomposer` (``single_node``, told how the
attempt failed), and an inner node whose child failed is split again, once
(``redecompose``). Upfront, every leaf of the run's subtree is grown breadth-first
(``plan_bfs``) before anything runs. The decomposer asks the run's model within the run's
budgets, so its calls count like any other; the nodes one run adds stay within
``max_nodes`` even when several splits are asked at once.

A split is on record (the state's ``asking``) and on disk before the decomposer is asked,
so a run resumed after a crash takes the children the decomposer wrote instead of asking
again (:meth:`Splitter.adopt`). The children a split wrote become the run's nodes (see
:mod:`taskdecomp.strategies.tree.shape`). Children whose dependencies would make nodes wait
for each other are not taken and leave the stored tree: the node stays as it was, and a
second split that was tried stays on record as tried whatever it wrote. A second split's
children, taken, replace the node's old ones in the stored tree (the run keeps their
records). Upfront, a node whose children are in the stored tree is not asked about again,
and the end of the growth is on disk before anything runs.
"""

from __future__ import annotations

import asyncio

from taskdecomp import stops
from taskdecomp.approvals import ApprovalRequest
from taskdecomp.decomposition import DecompOptions, DecompositionResult
from taskdecomp.models import ModelRequest, ModelResponse
from taskdecomp.plan import Plan, Step, TaskId
from taskdecomp.runtime import RunContext
from taskdecomp.stops import LlmPhase, StopRun
from taskdecomp.store.trees import TreeRepository, pruned
from taskdecomp.strategies.decompose import PlanDecomposer
from taskdecomp.strategies.tree import done
from taskdecomp.strategies.tree.options import TreeOptions
from taskdecomp.strategies.tree.records import Records
from taskdecomp.strategies.tree.shape import TOP, Shape, check
from taskdecomp.strategies.tree.state import Split, TreeState
from taskdecomp.tree import NodeId, PlanTree, PlanTreeId

SPLIT_FAILURES = frozenset({"invalid_children", "llm_empty", "store_error"})
"""Ways a split can fail that leave the node unsplit; every other one ends the run."""

_MODEL_STOPS = frozenset(
    {"llm_timeout", "llm_empty", "llm_error", "max_llm_calls", "max_tokens", "max_cost"}
)
"""Stops of a model call (their ``llm_phase`` is ``decompose`` when the decomposer's)."""


class _RunModel:
    """The run's model as the decomposer sees it: every call within the run's budgets."""

    def __init__(self, ctx: RunContext) -> None:
        self._ctx = ctx

    @property
    def name(self) -> str:
        return self._ctx.model_for("decompose").name

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return await self._ctx.ask(request)


class Splitter:
    """Splits the nodes of one run (see the module docstring).

    Args:
        ctx: the run.
        options: the run's tree options (mode, depth and node budgets, approvals).
        records: the run's records; a split changes its state and its shape.
        repository: where the plan tree is stored.
        slots: the run's ``max_parallel`` slots (a question to the decomposer takes one).
    """

    def __init__(
        self,
        ctx: RunContext,
        options: TreeOptions,
        records: Records,
        repository: TreeRepository,
        slots: asyncio.Semaphore,
    ) -> None:
        self.ctx, self.options, self.records, self.repository = ctx, options, records, repository
        self.slots = slots
        self.decomposer = PlanDecomposer(repository, _RunModel(ctx))
        self._held = 0
        """Nodes the splits being asked may still write."""

    @property
    def state(self) -> TreeState:
        """The run's tree state."""
        return self.records.state

    def can_split(self, node_id: NodeId) -> bool:
        """Whether leaf ``node_id`` may be split when its attempt fails (once, as needed)."""
        if self.options.decompose != "as-needed" or str(node_id) in self.state.splits:
            return False
        return self._fits(node_id)

    def may_redo(self, node_id: NodeId) -> bool:
        """Whether inner node ``node_id`` may be split again, now that a child failed."""
        split = self.state.splits.get(str(node_id))
        return (
            self.options.redecompose
            and self.options.decompose != "none"
            and node_id != TOP
            and not (split is not None and split.redo)
            and self._fits(node_id)
        )

    async def split(self, node_id: NodeId, failure: str, *, redo: bool = False) -> bool:
        """Ask for ``node_id``'s children, one level, told ``failure``; whether it has some.

        The question takes one of the run's ``max_parallel`` slots, like a leaf's attempt.

        Raises:
            StopRun: asking stopped the run (a budget, a model failure, the lease).
        """
        room = min(self._room(), self.options.max_children)
        if room < 1:
            self.state.asking.pop(str(node_id), None)
            return False
        tree = self.repository.get_plan_tree(self.records.shape.tree.id)
        first = max((kid.position for kid in tree.children(node_id)), default=-1) + 1
        old: list[int] = [kid.id for kid in self.records.shape.children(node_id)] if redo else []
        asked = Split(first_position=first, reason=failure, redo=redo, old=old)
        self.state.asking[str(node_id)] = asked
        self._held += room
        try:
            await self.records.save_durably()
            options = DecompOptions(
                max_children=self.options.max_children,
                total_node_budget=room,
                auto_on_create=False,
            )
            told = done.told(self.records.shape, node_id, failure)
            async with self.slots:  # held for the question alone, never while waiting
                result = await self.decomposer.decompose_node(
                    tree.id, node_id, options, failure=told
                )
        finally:
            self._held -= room
        _stop_on(result)
        written: list[int] = [kid.id for kid in result.created_tasks if kid.parent_id == node_id]
        return await self._take(node_id, asked, written)

    async def adopt(self) -> None:
        """Settle the splits a stopped run was asking for, before it goes on.

        A question with children at its positions (other than the node's old ones) was
        answered: they are taken, as if the answer had just come. A leaf's question without
        is asked again when the run comes to the leaf (:meth:`split`); an inner node's is
        forgotten (the node is split again when its failed child is seen again). Nodes a
        split took out of the tree and a stop left there are deleted.
        """
        tree = self.records.shape.tree
        changed = False
        for key, split in self.state.splits.items():
            there = {kid.id for kid in tree.children(NodeId(int(key)))}
            split.drop = [kid for kid in split.drop if kid in there]
            changed = changed or bool(split.drop)
            self._drop(split)
        for key, asked in list(self.state.asking.items()):
            changed = True
            node_id = NodeId(int(key))
            kids = self.repository.get_plan_tree(tree.id).children(node_id)
            if any(k.position >= asked.first_position and k.id not in asked.old for k in kids):
                await self._take(node_id, asked)
            elif asked.redo:
                del self.state.asking[key]
        if changed:
            self.records.reshape(self.repository.get_plan_tree(tree.id))

    async def grow(self) -> None:
        """Grow every leaf of the run's subtree breadth-first, down to ``max_depth``.

        Raises:
            StopRun: growing stopped the run, or the tree it made cannot be worked through
                (``invalid_tree:<rule>``).
        """
        shape = self._grown()
        starts = [
            (node.id, shape.depth(node.id))
            for node, _ in shape.scope()
            if node is not None and not node.leaf and shape.is_leaf(node.id)
        ]
        room = self._room()
        if starts and room > 0:
            options = DecompOptions(
                max_depth=self.options.max_depth,
                max_children=self.options.max_children,
                total_node_budget=room,
                auto_on_create=False,
                concurrency=self.ctx.meter.budget.max_parallel,
            )
            result = await self.decomposer.grow(shape.tree.id, starts, options)
            self._created([node.id for node in result.created_tasks])
            _stop_on(result)
            shape = self.records.reshape(self.repository.get_plan_tree(shape.tree.id))
        check(shape)
        self.state.upfront = True
        await self.records.save_durably()  # a resumed run does not ask about any node again

    def gate(self, node_id: NodeId) -> None:
        """Pause before the children of an as-needed split run, until a human approves them.

        Only the children the split wrote wait: a node that kept its children (its second
        split wrote none the run could take) goes on.

        Raises:
            StopRun: ``awaiting_approval``, when they were not approved yet.
        """
        split = self.state.splits.get(str(node_id))
        if not self.options.approve_decompositions or split is None:
            return
        written = [
            kid
            for kid in self.records.shape.children(node_id)
            if kid.position >= split.first_position
        ]
        if not written:
            return
        steps = tuple(
            Step(
                id=TaskId(f"node-{kid.id}"), title=kid.name, instruction=kid.instruction or kid.name
            )
            for kid in written
        )
        request = ApprovalRequest.for_plan(Plan(steps=steps), redactor=self.ctx.redactor)
        approvals = self.ctx.approvals
        waiting = approvals.enabled and request.digest not in approvals.approved
        if waiting and not split.waiting:  # on record, so that a rejection finds them
            split.waiting = True
            self.records.save()
        split.waiting = waiting
        approvals.require(request)

    async def _take(self, node_id: NodeId, asked: Split, written: list[int] | None = None) -> bool:
        """Make the children ``asked`` wrote ``node_id``'s active ones; whether there are any.

        ``written``: the children the decomposer said it wrote; ``None`` for a stopped
        run's question: the node's children at the split's positions, not its old ones.
        Taken, a second split's children replace the old ones in the stored tree; refused,
        they leave it.
        """
        key = str(node_id)
        self.state.asking.pop(key, None)
        tree = self.repository.get_plan_tree(self.records.shape.tree.id)
        if written is None:
            written = [
                kid.id
                for kid in tree.children(node_id)
                if kid.position >= asked.first_position and kid.id not in asked.old
            ]
        self._created(written)
        before = self.state.splits.get(key)
        asked.children = written
        self.state.splits[key] = asked
        if written and self._fine(pruned(tree, asked.old)):
            asked.drop = list(asked.old)
            self.records.decomposed(node_id, written, asked.reason)
            self._drop(asked)
            return True
        self._created(written, keep=False)
        if asked.redo:  # the node keeps the children it had (not new ones), and fails
            # on record as tried, so that a resumed run does not ask for it once more
            asked = self.state.splits[key] = Split(
                first_position=asked.first_position,
                reason=before.reason if before is not None else "",
                children=asked.old,
                redo=True,
            )
        else:  # tried: the leaf is not split again
            asked.children = []
        asked.drop = written
        self.records.reshape(tree)
        await self.records.save_durably()  # refused before they leave the tree
        self._drop(asked)
        return False

    def _created(self, node_ids: list[int], *, keep: bool = True) -> None:
        """The run wrote ``node_ids``, and keeps them as its nodes (or no longer does)."""
        created = self.state.created
        assert created is not None  # the run settles it when it opens its tree
        if keep:
            created.extend(node_ids)
            self.state.added += len(node_ids)
        else:
            self.state.created = [kid for kid in created if kid not in set(node_ids)]

    def _drop(self, split: Split) -> None:
        """Delete the nodes ``split`` takes out of the stored tree."""
        if split.drop:
            self.repository.delete_nodes(self.records.shape.tree.id, split.drop)
            split.drop = []

    def _grown(self) -> Shape:
        """The run's shape with the nodes an upfront growth cut off by a stop wrote.

        Nodes below the run's nodes that are not the run's were written by it, before it
        could note them (or, in that moment, by another run of the plan).
        """
        members = self.state.members() or set()
        tree = self.repository.get_plan_tree(self.records.shape.tree.id)
        found: list[int] = []
        stack = list(tree.children(self.records.shape.root or None))
        while stack:
            kid = stack.pop()
            if kid.id not in members:
                found.append(kid.id)
            stack.extend(tree.children(kid.id))
        self._created(found)
        return self.records.reshape(tree)

    def _fine(self, tree: PlanTree) -> bool:
        """Whether the run can work through ``tree`` with the state's splits."""
        try:
            check(self.records.reshape(tree))
        except StopRun:
            return False
        return True

    def _fits(self, node_id: NodeId) -> bool:
        return self.records.shape.depth(node_id) < self.options.max_depth and self._room() > 0

    def _room(self) -> int:
        """How many more nodes the run may add."""
        return self.options.max_nodes - self.state.added - self._held


def _stop_on(result: DecompositionResult) -> None:
    """Raise the first failure of ``result`` that ends the run (not a bad answer).

    Raises:
        StopRun: a budget, a model failure, a lost lease: whatever stopped a question.
    """
    for problem in result.stats.get("failures", {}).values():
        reason = problem["reason"]
        family = reason.partition(":")[0]
        if family not in SPLIT_FAILURES:
            phase: LlmPhase | None = "decompose" if family in _MODEL_STOPS else None
            raise StopRun(stops.StopReason(reason), llm_phase=phase, message=problem["message"])


def reject_waiting(state: TreeState, repository: TreeRepository) -> bool:
    """Undo the splits of a stopped run whose children wait for approval; whether any did.

    A rejected split's children are deleted from the stored tree (a later run of the plan
    would otherwise run them, unapproved), and its node fails, ``approval_rejected``.
    """
    rejected = [(key, split) for key, split in state.splits.items() if split.waiting]
    if state.plan_id is None or not rejected:
        return False
    for key, split in rejected:
        kids = split.children or []
        repository.delete_nodes(PlanTreeId(state.plan_id), kids)
        if state.created is not None:
            state.created = [kid for kid in state.created if kid not in set(kids)]
        split.children, split.waiting = [], False
        record = state.record(int(key))
        record.status, record.reason = "failed", stops.APPROVAL_REJECTED
        record.message = "a human rejected its split"
    return True
