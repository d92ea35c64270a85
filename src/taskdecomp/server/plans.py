"""Plan trees and the decomposer, as the service runs them.

Creating a plan stores it at once; its decomposition (``DECOMP_AUTO_ON_CREATE``, or a
request) runs in the background through :class:`~taskdecomp.PlanDecomposer`, one job at a
time per plan. Every node a job writes is in the store the moment its transaction commits,
which is what a plan's event stream reads; the jobs themselves (running, then their
:class:`~taskdecomp.DecompositionResult`) are kept in memory for the life of the process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from taskdecomp.decomposition import DecompOptions, DecompositionResult
from taskdecomp.models import resolve_model
from taskdecomp.server import paging
from taskdecomp.server.config import ServerConfig
from taskdecomp.server.problems import Problem, one_line
from taskdecomp.server.reading import Reads
from taskdecomp.server.schemas import DecompIn
from taskdecomp.store.trees import TreeRepository
from taskdecomp.strategies.decompose import PlanDecomposer
from taskdecomp.tree import NewNode, NodeId, PlanTree, PlanTreeId

logger = logging.getLogger(__name__)

JobState = Literal["running", "done", "failed", "cancelled"]


@dataclass(kw_only=True)
class Job:
    """One decomposition the service runs."""

    id: int
    plan_id: PlanTreeId
    mode: Literal["plan_bfs", "single_node"]
    node_id: NodeId | None
    state: JobState = "running"
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    summary: str | None = None
    """The result in one sentence (``Plan #8 got 10 subtasks; ...``)."""
    result: dict[str, Any] | None = None
    """The :class:`~taskdecomp.DecompositionResult` as JSON."""
    version: int = 0
    """Grows at every change, so a stream sends each change once."""
    task: asyncio.Task[DecompositionResult] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "job_id": self.id,
            "plan_id": self.plan_id,
            "mode": self.mode,
            "node_id": self.node_id,
            "state": self.state,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "summary": self.summary,
            "result": self.result,
        }


class PlanService:
    """Plan trees of one service process and the decompositions running on them.

    Args:
        config: the operator's choices (the decomposer's model and defaults).
        repository: where plan trees are stored.
        reads: the threads store reads run on (shared with the rest of the service).
    """

    def __init__(
        self, config: ServerConfig, repository: TreeRepository, *, reads: Reads | None = None
    ) -> None:
        self.config = config
        self.repository = repository
        self.reads = reads or Reads()
        """Where the routes' store reads run: off the event loop."""
        self.model = config.decomp_model or config.models[0]
        self._jobs: dict[PlanTreeId, list[Job]] = {}
        self._ids = itertools.count(1)
        self.closing = False

    async def create(
        self,
        title: str,
        instruction: str,
        *,
        auto: bool | None,
        options: DecompIn | None,
    ) -> tuple[PlanTree, Job | None]:
        """Store a plan with one root; start its breadth-first decomposition when asked.

        ``auto`` ``None`` follows ``DECOMP_AUTO_ON_CREATE``.
        """
        self._open()
        opts = self._options(options)
        root = [NewNode(name=title, instruction=instruction)]
        tree = await asyncio.to_thread(self.repository.create_plan, title, root)
        if not (opts.auto_on_create if auto is None else auto):
            return tree, None
        return tree, self._start(tree.id, None, opts)

    async def decompose(
        self,
        plan_id: int,
        node_id: int | None,
        *,
        expand_depth: int = 1,
        overwrite: bool = False,
        options: DecompIn | None = None,
    ) -> Job:
        """Start decomposing a whole plan (``node_id`` ``None``) or one node.

        Raises:
            TreeNotFoundError: the plan or the node does not exist (404).
            Problem: 409 while another decomposition of the plan runs.
        """
        self._open()
        tree = await self.reads(self.repository.get_plan_tree, PlanTreeId(plan_id))
        if node_id is not None and tree.node(NodeId(node_id)) is None:
            raise Problem(404, f"plan {plan_id} has no node {node_id}; GET /plans/{plan_id}/tree")
        opts = dataclasses.replace(
            self._options(options), expand_depth=expand_depth, replace=overwrite
        )
        return self._start(tree.id, None if node_id is None else NodeId(node_id), opts)

    def jobs(self, plan_id: int) -> list[Job]:
        """The decompositions of a plan this process ran or runs, oldest first."""
        return list(self._jobs.get(PlanTreeId(plan_id), ()))

    def tree(self, plan_id: int) -> dict[str, Any]:
        """A plan tree as JSON, with its decompositions (a blocking read: see :meth:`show`).

        Raises:
            TreeNotFoundError: no plan has this id (404).
        """
        jobs = [job.to_dict() for job in self.jobs(plan_id)]  # first: see show
        data = self.repository.get_plan_tree(PlanTreeId(plan_id)).to_dict()
        data["jobs"] = jobs
        return data

    async def show(self, plan_id: int) -> dict[str, Any]:
        """:meth:`tree`, the tree read on a worker thread (the event loop goes on meanwhile).

        Raises:
            TreeNotFoundError: no plan has this id (404).
        """
        # The jobs before the tree: a job shown ended has every node it wrote in the tree
        # read after (the other way round, a job could end between the two reads and be
        # shown ended beside a tree missing its last nodes).
        jobs = [job.to_dict() for job in self.jobs(plan_id)]
        data = await self.reads(_tree_data, self.repository, PlanTreeId(plan_id))
        data["jobs"] = jobs
        return data

    async def listing(self, *, limit: int, cursor: str | None) -> dict[str, Any]:
        """A page of plans, newest first: id, title, node count and whether one decomposes.

        Read in SQL a page at a time (a keyset on the id), on a worker thread; the answer
        holds the cursor of the next page, ``None`` on the last one.

        Raises:
            Problem: 422 for a cursor this server did not give.
        """
        before = paging.plan_key(cursor)
        busy = {plan_id for plan_id in self._jobs if self._busy(plan_id)}  # before: see show
        plans, following = await self.reads(
            self.repository.page_plans,
            limit=limit,
            before=None if before is None else PlanTreeId(before),
        )
        return {
            "plans": [
                {"id": plan_id, "title": title, "nodes": count, "decomposing": plan_id in busy}
                for plan_id, title, count in plans
            ],
            "next_cursor": paging.plan_cursor(following),
            "limit": limit,
        }

    async def wait(self, job: Job) -> Job:
        """``job`` once it has ended."""
        if job.task is not None:
            await asyncio.wait({job.task})
        return job

    async def shutdown(self, timeout: float) -> None:
        """Refuse new work and cancel the decompositions in flight."""
        self.closing = True
        tasks = [job.task for jobs in self._jobs.values() for job in jobs if job.task]
        running = [task for task in tasks if not task.done()]
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=timeout)

    def _start(self, plan_id: PlanTreeId, node_id: NodeId | None, opts: DecompOptions) -> Job:
        if self._busy(plan_id):
            raise Problem(409, f"plan {plan_id} is being decomposed; wait for that to end")
        job = Job(
            id=next(self._ids),
            plan_id=plan_id,
            mode="plan_bfs" if node_id is None else "single_node",
            node_id=node_id,
        )
        model = resolve_model(self.model, connection=self.config.connection)
        decomposer = PlanDecomposer(self.repository, model, options=opts)
        work = (
            decomposer.run_plan(plan_id, opts)
            if node_id is None
            else decomposer.decompose_node(plan_id, node_id, opts)
        )
        job.task = asyncio.create_task(work, name=f"decompose plan {plan_id}")
        job.task.add_done_callback(lambda task: _ended(job, task))
        self._jobs.setdefault(plan_id, []).append(job)
        return job

    def decomposing(self, plan_id: int) -> bool:
        """Whether a decomposition of the plan runs in this process now."""
        return self._busy(plan_id)

    def _busy(self, plan_id: int) -> bool:
        return any(job.state == "running" for job in self._jobs.get(PlanTreeId(plan_id), ()))

    def _options(self, given: DecompIn | None) -> DecompOptions:
        try:
            return dataclasses.replace(self.config.decomp, **(given or {}))
        except ValueError as exc:
            raise Problem(422, f"decomposition options refused: {exc}") from None

    def _open(self) -> None:
        if self.closing:
            raise Problem(503, "the server is shutting down; try again when it is back")


def _tree_data(repository: TreeRepository, plan_id: PlanTreeId) -> dict[str, Any]:
    return repository.get_plan_tree(plan_id).to_dict()


def _ended(job: Job, task: asyncio.Task[DecompositionResult]) -> None:
    job.finished_at = time.time()
    job.version += 1
    if task.cancelled():
        job.state = "cancelled"
        job.summary = f"The decomposition of plan #{job.plan_id} was cancelled."
        return
    error = task.exception()
    if error is not None:
        logger.warning("decomposition of plan %s failed: %s", job.plan_id, error)
        job.state = "failed"
        job.summary = f"The decomposition of plan #{job.plan_id} failed: {one_line(str(error))}"
        return
    result = task.result()
    job.state = "done"
    job.summary = result.summary()
    job.result = result.to_dict()
