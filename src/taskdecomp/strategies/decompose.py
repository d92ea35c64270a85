"""The ``decompose`` strategy (seed 002): grow a stored plan tree breadth-first.

:class:`PlanDecomposer` asks an independent model session (no shared conversation: every
request stands alone) to split nodes into children, level by level. The nodes of one BFS
level are asked concurrently (at most ``concurrency`` at once); their answers are written
in queue order once the whole level has answered, so the tree is the same whatever order
the answers arrive in, and the node budget holds exactly. Three public entry points share
one core: :meth:`PlanDecomposer.run_plan` (every root, ``plan_bfs``),
:meth:`PlanDecomposer.grow` (below given nodes, ``plan_bfs``) and
:meth:`PlanDecomposer.decompose_node` (one node, ``single_node``, optionally continuing
breadth-first below it).

A node whose answer is unusable is retried up to ``retry_limit`` times, then listed in
``failed_nodes``; the rest goes on. The children of one node are written in one
transaction, so a failed write leaves none of them behind.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from taskdecomp import stops
from taskdecomp.decomposition import (
    DecompOptions,
    DecompositionResult,
    Mode,
    build_request,
    parse_payload,
    response_schema,
    validate_payload,
)
from taskdecomp.errors import (
    ConfigError,
    ModelError,
    ModelTimeoutError,
    StoreError,
    TreeNotFoundError,
)
from taskdecomp.models import Model, ModelRequest, resolve_model
from taskdecomp.prompts import render
from taskdecomp.stops import StopRun, with_detail
from taskdecomp.store.trees import TreeRepository
from taskdecomp.telemetry import spans
from taskdecomp.tree import NewNode, NodeId, PlanNode, PlanTree, PlanTreeId

Progress = Callable[[str], None]
"""Receives one line of progress per level and per answered node."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Answer:
    children: list[NewNode]
    should_stop: bool


@dataclass(kw_only=True)
class _Job:
    """One decomposition: what it works on, and what it has done so far."""

    plan_id: PlanTreeId
    mode: Mode
    opts: DecompOptions
    depth_limit: int
    """Nodes at this depth (relative to the start) are not decomposed."""
    root: NodeId | None = None
    """The node of a single-node decomposition."""
    failure: str | None = None
    """Why an attempt at the root failed, sent with its request."""
    processed: list[NodeId] = field(default_factory=list)
    created: list[PlanNode] = field(default_factory=list)
    failed: list[NodeId] = field(default_factory=list)
    failures: dict[str, dict[str, str]] = field(default_factory=dict)
    stopped: str | None = None
    depth_left: bool = False
    """Some node at the depth limit was not decomposed."""
    stats: dict[str, Any] = field(
        default_factory=lambda: dict.fromkeys(
            ("llm_calls", "retries", "tokens_in", "tokens_out", "levels"), 0
        )
    )

    def replaces(self, node_id: NodeId) -> bool:
        """Whether writing ``node_id``'s children deletes its old ones first."""
        return self.opts.replace and node_id == self.root

    def fail(self, node_id: NodeId, stop: StopRun) -> None:
        self.failed.append(node_id)
        self.failures[str(node_id)] = {"reason": stop.reason, "message": stop.message}


class PlanDecomposer:
    """Decomposes stored plan trees with an independent model session.

    Args:
        repository: where plan trees are stored.
        model: the decomposer's model (a :class:`~taskdecomp.models.Model` or model string).
        options: default budgets and switches; each call may pass others.
        on_progress: receives a line per level (nodes created so far, of the budget) and
            per answered node.
        clock: monotonic clock, for tests.
    """

    def __init__(
        self,
        repository: TreeRepository,
        model: Model | str,
        *,
        options: DecompOptions | None = None,
        on_progress: Progress | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.repository = repository
        self.model = resolve_model(model)
        self.options = options or DecompOptions()
        self._progress = on_progress or (lambda line: None)
        self._clock = clock

    async def create_plan(
        self, title: str, *, instruction: str = "", options: DecompOptions | None = None
    ) -> tuple[PlanTree, DecompositionResult | None]:
        """Store a plan whose one root is ``title``; decompose it when ``auto_on_create``.

        Raises:
            ConfigError: ``title`` is empty or only whitespace.
        """
        if not title.strip():
            raise ConfigError("the goal is empty; say in words what the plan should achieve")
        opts = options or self.options
        tree = self.repository.create_plan(title, [NewNode(name=title, instruction=instruction)])
        if not opts.auto_on_create:
            return tree, None
        return tree, await self.run_plan(tree.id, opts)

    async def run_plan(
        self, plan_id: PlanTreeId, options: DecompOptions | None = None
    ) -> DecompositionResult:
        """Decompose the whole plan breadth-first from its roots (``plan_bfs``).

        Raises:
            TreeNotFoundError: no plan has this id.
        """
        opts = options or self.options
        tree = self.repository.get_plan_tree(plan_id)
        start = [(root.id, 0) for root in tree.roots() if not root.leaf]
        job = _Job(plan_id=plan_id, mode="plan_bfs", opts=opts, depth_limit=opts.max_depth)
        return await self._decompose(job, start)

    async def decompose_node(
        self,
        plan_id: PlanTreeId,
        node_id: NodeId,
        options: DecompOptions | None = None,
        *,
        failure: str | None = None,
    ) -> DecompositionResult:
        """Decompose one node (``single_node``), ``expand_depth`` levels deep.

        ``failure`` tells the model how an attempt at the node went wrong.

        Raises:
            TreeNotFoundError: the plan or the node does not exist.
        """
        opts = options or self.options
        tree = self.repository.get_plan_tree(plan_id)
        if tree.node(node_id) is None:
            raise TreeNotFoundError(f"plan {plan_id!r} has no node {node_id!r}")
        job = _Job(
            plan_id=plan_id,
            mode="single_node",
            opts=opts,
            depth_limit=opts.expand_depth,
            root=node_id,
            failure=failure,
        )
        return await self._decompose(job, [(node_id, 0)])

    async def grow(
        self,
        plan_id: PlanTreeId,
        starts: Sequence[tuple[NodeId, int]],
        options: DecompOptions | None = None,
    ) -> DecompositionResult:
        """Decompose breadth-first below the ``starts`` (``plan_bfs``), all at once.

        Each start is a node with its depth, counted as ``max_depth`` counts: a start at
        ``max_depth`` or deeper is not asked about. A ``tree`` run grows every leaf of its
        subtree this way, level by level, before it executes them.

        Raises:
            TreeNotFoundError: no plan has this id.
        """
        opts = options or self.options
        self.repository.get_plan_tree(plan_id)
        job = _Job(plan_id=plan_id, mode="plan_bfs", opts=opts, depth_limit=opts.max_depth)
        return await self._decompose(job, [start for start in starts if start[1] < opts.max_depth])

    def create_plan_sync(
        self, title: str, *, instruction: str = "", options: DecompOptions | None = None
    ) -> tuple[PlanTree, DecompositionResult | None]:
        """Blocking :meth:`create_plan`, for code without an event loop."""
        return _blocking(
            "create_plan", self.create_plan(title, instruction=instruction, options=options)
        )

    def run_plan_sync(
        self, plan_id: PlanTreeId, options: DecompOptions | None = None
    ) -> DecompositionResult:
        """Blocking :meth:`run_plan`, for code without an event loop."""
        return _blocking("run_plan", self.run_plan(plan_id, options))

    def decompose_node_sync(
        self, plan_id: PlanTreeId, node_id: NodeId, options: DecompOptions | None = None
    ) -> DecompositionResult:
        """Blocking :meth:`decompose_node`, for code without an event loop."""
        return _blocking("decompose_node", self.decompose_node(plan_id, node_id, options))

    async def _decompose(self, job: _Job, start: list[tuple[NodeId, int]]) -> DecompositionResult:
        with spans.decomposition(job.plan_id, job.mode, job.root) as traced:
            return traced.ended(await self._levels(job, start))

    async def _levels(self, job: _Job, start: list[tuple[NodeId, int]]) -> DecompositionResult:
        started = self._clock()
        deadline = asyncio.timeout(job.opts.max_seconds)
        try:
            async with deadline:
                level = start
                while level and job.stopped is None:
                    job.stats["levels"] += 1
                    level = await self._level(job, level)
        except TimeoutError:
            if not deadline.expired():
                raise
            job.stopped = stops.MAX_SECONDS
        if job.stopped is None and job.depth_left:
            job.stopped = "max_depth"
        return _result(job, seconds=self._clock() - started)

    async def _level(self, job: _Job, level: list[tuple[NodeId, int]]) -> list[tuple[NodeId, int]]:
        """Ask about every node of one level, write the answers in order; return the next."""
        tree = self.repository.get_plan_tree(job.plan_id)
        next_level: list[tuple[NodeId, int]] = []
        todo: list[tuple[PlanNode, int]] = []
        for node_id, depth in level:
            node = tree.node(node_id)
            existing = tree.children(node_id)
            if node is None:
                continue
            if job.mode == "plan_bfs" and job.opts.skip_existing and existing:
                _enqueue(job, existing, depth, next_level)
            else:
                todo.append((node, depth))
        asked = todo[: max(job.opts.total_node_budget - len(job.created), 0)]
        if asked:
            self._progress(
                f"level {job.stats['levels']}: asking about {len(asked)} "
                f"node{'s' if len(asked) > 1 else ''} "
                f"({len(job.created)}/{job.opts.total_node_budget} nodes so far)"
            )
        semaphore = asyncio.Semaphore(job.opts.concurrency)
        answers = await asyncio.gather(
            *(self._ask(job, tree, node, semaphore) for node, _ in asked)
        )
        for (node, depth), answer in zip(asked, answers, strict=True):
            if isinstance(answer, StopRun):
                job.fail(node.id, answer)
                self._progress(f"node {node.id} {node.name!r}: failed ({answer.reason})")
                continue
            written = self._write(job, node, answer)
            if written is not None:
                kids = [c for c in written if not (c.leaf or answer.should_stop)]
                _enqueue(job, kids, depth, next_level)
        if len(asked) < len(todo):
            job.stopped = job.stopped or "max_nodes"
        return next_level if job.stopped is None else []

    def _write(self, job: _Job, node: PlanNode, answer: _Answer) -> list[PlanNode] | None:
        """Write one node's children in one transaction, within the node budget."""
        budget_left = job.opts.total_node_budget - len(job.created)
        children = answer.children
        if len(children) > budget_left:
            children = children[:budget_left]
            job.stopped = "max_nodes"
        if not children:
            job.processed.append(node.id)
            self._progress(f"node {node.id} {node.name!r}: no children")
            return []
        try:
            written = self.repository.write_children(
                job.plan_id, node.id, children, replace=job.replaces(node.id)
            )
        except StoreError as exc:
            job.fail(node.id, StopRun(with_detail("store_error", "write"), message=str(exc)))
            self._progress(f"node {node.id} {node.name!r}: write failed, nothing kept")
            return None
        job.processed.append(node.id)
        job.created.extend(written)
        self._progress(f"node {node.id} {node.name!r}: {len(written)} children")
        return written

    async def _ask(
        self, job: _Job, tree: PlanTree, node: PlanNode, semaphore: asyncio.Semaphore
    ) -> _Answer | StopRun:
        """Ask about one node, retrying up to the limit; the last failure when all fail."""
        opts = job.opts
        payload = build_request(
            tree,
            node,
            mode=job.mode,
            max_children=opts.max_children,
            outline_chars=opts.outline_chars,
            failure=job.failure if node.id == job.root else None,
        )
        messages: list[Any] = [
            {"role": "system", "content": render("decomposer", max_children=opts.max_children)},
            {
                "role": "user",
                "content": json.dumps(payload.model_dump(exclude_none=True), ensure_ascii=True),
            },
        ]
        failure = StopRun(stops.LLM_EMPTY)
        async with semaphore:
            for attempt in range(opts.retry_limit + 1):
                if attempt:
                    job.stats["retries"] += 1
                    messages = [*messages[:2], _retry_message(failure)]
                try:
                    return await self._answer(job, tree, node, messages)
                except StopRun as stop:
                    failure = stop
        return failure

    async def _answer(
        self, job: _Job, tree: PlanTree, node: PlanNode, messages: list[Any]
    ) -> _Answer:
        max_children = job.opts.max_children
        request = ModelRequest(
            phase="decompose",
            messages=tuple(messages),
            json_schema=response_schema(max_children=max_children),
            schema_name="decomposition",
        )
        text = await self._complete(job, request)
        payload = parse_payload(text)
        children = validate_payload(
            payload, tree=tree, node=node, mode=job.mode, max_children=max_children
        )
        if not children and not payload.should_stop and not job.opts.stop_on_empty:
            raise StopRun(with_detail("invalid_children", "empty"), message="no children")
        return _Answer(children=children, should_stop=payload.should_stop)

    async def _complete(self, job: _Job, request: ModelRequest) -> str:
        job.stats["llm_calls"] += 1
        try:
            with spans.model_call(self.model, request) as call:
                response = call.answered(await self.model.complete(request))
        except ModelTimeoutError as exc:
            raise StopRun(stops.LLM_TIMEOUT, llm_phase="decompose", message=str(exc)) from exc
        except ModelError as exc:
            raise StopRun(
                with_detail("llm_error", exc.kind), llm_phase="decompose", message=str(exc)
            ) from exc
        job.stats["tokens_in"] += response.tokens_in
        job.stats["tokens_out"] += response.tokens_out
        if not response.text.strip():
            raise StopRun(stops.LLM_EMPTY, llm_phase="decompose")
        if response.finish_reason == "length":
            raise StopRun(with_detail("invalid_children", "truncated"), message="cut off")
        return response.text


def _enqueue(
    job: _Job, children: list[PlanNode], depth: int, next_level: list[tuple[NodeId, int]]
) -> None:
    """Queue ``children`` (at ``depth + 1``) unless they are at the depth limit."""
    for child in children:
        if depth + 1 < job.depth_limit:
            next_level.append((child.id, depth + 1))
        elif not child.leaf:
            job.depth_left = True


def _result(job: _Job, *, seconds: float) -> DecompositionResult:
    stats = dict(job.stats)
    stats.update(seconds=round(seconds, 6), nodes_created=len(job.created), failures=job.failures)
    return DecompositionResult(
        plan_id=job.plan_id,
        mode=job.mode,
        root_node_id=job.root,
        processed_nodes=tuple(job.processed),
        created_tasks=tuple(job.created),
        failed_nodes=tuple(job.failed),
        stopped_reason=job.stopped,
        stats=stats,
    )


def _retry_message(failure: StopRun) -> dict[str, str]:
    detail = f": {failure.message}" if failure.message else ""
    return {
        "role": "user",
        "content": f"Your previous answer was rejected ({failure.reason}{detail}). "
        "Answer again with one JSON object that follows the rules.",
    }


_R = TypeVar("_R")


def _blocking(name: str, work: Coroutine[Any, Any, _R]) -> _R:
    """Run ``work`` to its end on a loop of its own.

    Raises:
        RuntimeError: called inside a running event loop (await ``name`` instead).
    """
    from taskdecomp.runtime import run_blocking  # the engine's runtime, only when blocking

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run_blocking(work)
    work.close()  # never awaited: closing it keeps Python from warning about it
    raise RuntimeError(f"{name}_sync() cannot run inside an event loop; use `await {name}(...)`")
