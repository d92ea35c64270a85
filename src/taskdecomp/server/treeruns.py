"""Runs of stored plan trees: ``POST /plans/{id}/runs`` and ``/plans/{id}/nodes/{node}/runs``.

A run of a plan (or of one node's subtree) is a run of the ``tree`` strategy with the plan
and the node as its options: it is stored ``queued`` and admitted exactly as ``POST /runs``
admits a run (:meth:`RunService.post <taskdecomp.server.runs.RunService.post>`), then
listed, streamed, cancelled, approved and resumed by the runs' routes. ``GET /runs/{id}``
shows its tree with each node's status in ``tree``. The chat agent's ``start_run`` with a
``plan_id`` comes here too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import FastAPI
from fastapi import Path as PathParam

from taskdecomp.server.openapi import returns
from taskdecomp.server.problems import Problem
from taskdecomp.server.responses import RunView
from taskdecomp.server.schemas import RunIn, TreeRunIn
from taskdecomp.tree import NodeId, PlanTreeId

if TYPE_CHECKING:
    from taskdecomp.server.service import Service

PlanPath = Annotated[int, PathParam(description="A plan tree's id (one no plan has: 404).")]
NodePath = Annotated[int, PathParam(description="A node of that plan (another: 404).")]


async def start(
    service: Service, plan_id: int, node_id: int | None, body: TreeRunIn
) -> dict[str, Any]:
    """Start a ``tree`` run of plan ``plan_id`` (or of node ``node_id``'s subtree).

    The goal, unless ``body`` gives one, is the node's name or the plan's title (as
    ``taskdecomp run --plan`` takes it).

    Returns:
        The stored run as the API shows it (``queued``), as ``POST /runs`` answers.

    Raises:
        TreeNotFoundError: no plan has this id (404).
        Problem: 404 when the plan has no such node; 409 while the plan is being
            decomposed; as :meth:`RunService.post` otherwise (422, 429, 503).
    """
    plans = service.plans
    tree = await plans.reads(plans.repository.get_plan_tree, PlanTreeId(plan_id))
    node = None if node_id is None else tree.node(NodeId(node_id))
    if node_id is not None and node is None:
        raise Problem(404, f"plan {plan_id} has no node {node_id}; GET /plans/{plan_id}/tree")
    if plans.decomposing(plan_id):
        raise Problem(409, f"plan {plan_id} is being decomposed; run it once that has ended")
    options = {**(body.options or {}), "plan_id": tree.id, "node_id": node_id}
    run = RunIn.model_construct(
        goal=body.goal or (node.name if node is not None else tree.title),
        toolset=body.toolset,
        strategy="tree",
        allow=body.allow,
        budget=body.budget,
        model=body.model,
        options=options,
        replan=None,
        idempotency_key=None,
    )
    return await service.runs.post(run)


def add_routes(app: FastAPI, service: Service) -> None:
    """Register the routes that run a stored plan tree on ``app``."""

    @app.post(
        "/plans/{plan_id}/runs",
        status_code=202,
        tags=["plans"],
        **returns(RunView, 404, 409, 429, 503),
    )
    async def start_plan_run(plan_id: PlanPath, run: TreeRunIn) -> dict[str, Any]:
        """Execute the whole plan tree (the tree strategy); 202 with the stored run."""
        return await start(service, plan_id, None, run)

    @app.post(
        "/plans/{plan_id}/nodes/{node_id}/runs",
        status_code=202,
        tags=["plans"],
        **returns(RunView, 404, 409, 429, 503),
    )
    async def start_node_run(
        plan_id: PlanPath, node_id: NodePath, run: TreeRunIn
    ) -> dict[str, Any]:
        """Execute one node's subtree of the plan (the tree strategy); 202 with the stored run."""
        return await start(service, plan_id, node_id, run)


__all__ = ["add_routes", "start"]
