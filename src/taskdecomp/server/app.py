"""The FastAPI application: the HTTP API, the event streams and the web page.

:func:`create_app` wires a :class:`~taskdecomp.server.service.Service` to routes; the routes
only translate HTTP to the service's calls and back. Errors leave as
``application/problem+json`` (:mod:`.problems`), never with a stack trace.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import Body, FastAPI, Header, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from taskdecomp.errors import TaskdecompError
from taskdecomp.server import streams
from taskdecomp.server.guard import BearerToken, BodyLimit
from taskdecomp.server.hosts import HostAllowlist
from taskdecomp.server.openapi import (
    PLAN_STREAM,
    RUN_STREAM,
    event_stream,
    install,
    problem_responses,
    returns,
)
from taskdecomp.server.origin import SameOrigin
from taskdecomp.server.problems import MEDIA_TYPE, Problem, body, detail_of, status_of
from taskdecomp.server.responses import (
    ChatTurn,
    DecompositionJob,
    Health,
    ModelList,
    PlanCreated,
    PlanList,
    PlanTree,
    RunList,
    RunView,
    ToolsetList,
)
from taskdecomp.server.schemas import (
    ApproveIn,
    ChatIn,
    NodeDecomposeIn,
    PlanIn,
    PlansQuery,
    RejectIn,
    RunIn,
    RunsQuery,
)
from taskdecomp.server.service import Service
from taskdecomp.server.treeruns import add_routes as add_tree_run_routes
from taskdecomp.server.workflows import add_routes as add_workflow_routes

logger = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"

RunPath = Annotated[str, PathParam(description="A run id (an id no run has: 404).")]


def create_app(service: Service) -> FastAPI:
    """The application over ``service``; shutting it down cancels runs in flight."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        service.loop = asyncio.get_running_loop()
        service.runs.readmit()  # runs a stopped server left queued start again
        yield
        await service.shutdown()

    app = FastAPI(
        title="taskdecomp",
        summary="Controllable task-decomposition agents: runs, plan trees, a chat agent.",
        version="0.1.0",
        docs_url=None,  # the interactive docs load from a CDN; /openapi.json is the contract
        redoc_url=None,
        lifespan=lifespan,
        generate_unique_id_function=lambda route: route.name,  # operation ids: the routes' names
    )
    app.state.service = service
    _errors(app)
    _run_routes(app, service)
    _plan_routes(app, service)
    add_tree_run_routes(app, service)
    _misc_routes(app, service)
    install(app, token=service.config.token is not None)
    add_workflow_routes(app, service)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    config = service.config
    app.add_middleware(BodyLimit, limit=config.max_body_bytes)
    app.add_middleware(BearerToken, token=config.token)
    app.add_middleware(SameOrigin, trusted=config.cors_origins)
    app.add_middleware(
        HostAllowlist, host=config.host, port=config.port, names=config.allowed_hosts
    )
    if config.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(config.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
        )
    return app


def problem(
    status: int, detail: str, headers: dict[str, str] | None = None, **extra: Any
) -> Response:
    """A problem response."""
    return Response(
        body(status, detail, **extra), status_code=status, media_type=MEDIA_TYPE, headers=headers
    )


def _errors(app: FastAPI) -> None:
    @app.exception_handler(Problem)
    async def on_problem(_request: Request, exc: Problem) -> Response:
        return problem(exc.status, exc.detail, exc.headers)

    @app.exception_handler(TaskdecompError)
    async def on_error(_request: Request, exc: TaskdecompError) -> Response:
        status = status_of(exc)
        if status >= 500:
            logger.warning("request failed: %s: %s", type(exc).__name__, exc)
        return problem(status, detail_of(exc))

    @app.exception_handler(RequestValidationError)
    async def on_invalid(_request: Request, exc: RequestValidationError) -> Response:
        errors = [
            {"loc": [str(part) for part in error.get("loc", ())], "msg": str(error.get("msg"))}
            for error in exc.errors()
        ]
        first = errors[0] if errors else {"loc": [], "msg": "invalid"}
        where = ".".join(first["loc"]) or "the request"
        return problem(422, f"{where}: {first['msg']}", errors=errors)

    @app.exception_handler(StarletteHTTPException)
    async def on_http(_request: Request, exc: StarletteHTTPException) -> Response:
        return problem(exc.status_code, str(exc.detail), dict(exc.headers or {}))

    @app.exception_handler(Exception)
    async def on_crash(_request: Request, exc: Exception) -> Response:
        logger.error("request failed: %s", type(exc).__name__, exc_info=exc)
        return problem(500, "the server failed to handle this request; see its log")


def _run_routes(app: FastAPI, service: Service) -> None:
    runs = service.runs

    @app.post("/runs", status_code=202, tags=["runs"], **returns(RunView, 409, 429, 503))
    async def start_run(run: RunIn) -> dict[str, Any]:
        """Store a run and start it when a slot is free; 202 with it, 429 when the line is full."""
        return await runs.post(run)

    @app.get("/runs", tags=["runs"], **returns(RunList, 503))
    async def list_runs(query: Annotated[RunsQuery, Query()]) -> dict[str, Any]:
        """Stored runs, newest first, a page at a time (next_cursor: the next page)."""
        return await runs.listing(status=query.status, limit=query.limit, cursor=query.cursor)

    @app.get("/runs/{run_id}", tags=["runs"], **returns(RunView, 404, 503))
    async def get_run(run_id: RunPath) -> dict[str, Any]:
        """One stored run: status, plan, trace, history, answer, usage."""
        return await runs.show(run_id)

    @app.post(
        "/runs/{run_id}/resume", status_code=202, tags=["runs"], **returns(RunView, 404, 409, 503)
    )
    async def resume_run(run_id: RunPath) -> dict[str, Any]:
        """Continue an interrupted run (or one stopped on its deadline or cancelled)."""
        await runs.resume(run_id)
        return await runs.show(run_id)

    @app.post("/runs/{run_id}/cancel", tags=["runs"], **returns(RunView, 404, 409, 503))
    async def cancel_run(run_id: RunPath) -> dict[str, Any]:
        """Cancel a run executing here or queued; it is stored as cancelled (resumable)."""
        await runs.cancel(run_id)
        return await runs.show(run_id)

    @app.post(
        "/runs/{run_id}/approve", status_code=202, tags=["runs"], **returns(RunView, 404, 409, 503)
    )
    async def approve_run(
        run_id: RunPath, approval: Annotated[ApproveIn | None, Body()] = None
    ) -> dict[str, Any]:
        """Approve what a paused run waits for (optionally with an edited plan); it goes on."""
        await runs.approve(run_id, approval.plan if approval is not None else None)
        return await runs.show(run_id)

    @app.post("/runs/{run_id}/reject", tags=["runs"], **returns(RunView, 404, 409, 503))
    async def reject_run(run_id: RunPath, rejection: RejectIn) -> dict[str, Any]:
        """End a paused run with approval_rejected."""
        await runs.reject(run_id, rejection.reason)
        return await runs.show(run_id)

    @app.get(
        "/runs/{run_id}/events",
        tags=["runs"],
        response_class=StreamingResponse,
        responses=event_stream(RUN_STREAM) | problem_responses(400, 404, 429, 503),
    )
    async def run_events(
        request: Request,
        run_id: RunPath,
        last_event_id: Annotated[str | None, Header()] = None,
        after: Annotated[int | None, Query(ge=0, le=streams.MAX_CURSOR)] = None,
    ) -> StreamingResponse:
        """The run's events as server-sent events, from the first or after Last-Event-ID."""
        start = streams.last_event_id(last_event_id, after)
        feed = await service.streams.subscribe(run_id, start, client=_client(request))
        return streams.EventStream(
            feed.frames(), close=feed.close, cut=lambda cut: setattr(feed, "on_drop", cut)
        )


def _plan_routes(app: FastAPI, service: Service) -> None:
    plans = service.plans

    @app.post(
        "/plans",
        status_code=201,
        tags=["plans"],
        response_model=PlanCreated,
        responses={
            202: {"model": PlanCreated, "description": "Created; its decomposition runs."},
            **problem_responses(409, 503),
        },
    )
    async def create_plan(plan: PlanIn) -> JSONResponse:
        """Create a plan (create_plan); 202 while it is decomposed in the background."""
        tree, job = await plans.create(
            plan.title, plan.instruction, auto=plan.auto_decompose, options=plan.options
        )
        data = await plans.show(tree.id)
        data["job"] = job.to_dict() if job is not None else None
        return JSONResponse(data, status_code=201 if job is None else 202)

    @app.get("/plans", tags=["plans"], **returns(PlanList, 503))
    async def list_plans(query: Annotated[PlansQuery, Query()]) -> dict[str, Any]:
        """Stored plan trees, newest first, a page at a time (next_cursor: the next page)."""
        return await plans.listing(limit=query.limit, cursor=query.cursor)

    @app.get("/plans/{plan_id}/tree", tags=["plans"], **returns(PlanTree, 404, 503))
    async def plan_tree(plan_id: int) -> dict[str, Any]:
        """A plan tree with its nodes (walk order, with depth) and its decompositions."""
        return await plans.show(plan_id)

    @app.post(
        "/plans/{plan_id}/decompose",
        status_code=202,
        tags=["plans"],
        **returns(DecompositionJob, 404, 409, 503),
    )
    async def decompose_plan(plan_id: int) -> dict[str, Any]:
        """Decompose the whole plan breadth-first (plan_bfs) in the background."""
        return (await plans.decompose(plan_id, None)).to_dict()

    @app.post(
        "/plans/{plan_id}/nodes/{node_id}/decompose",
        status_code=202,
        tags=["plans"],
        **returns(DecompositionJob, 404, 409, 503),
    )
    async def decompose_node(
        plan_id: int, node_id: int, request: Annotated[NodeDecomposeIn | None, Body()] = None
    ) -> dict[str, Any]:
        """Decompose one node (single_node), expand_depth levels deep, in the background."""
        given = request or NodeDecomposeIn()
        job = await plans.decompose(
            plan_id,
            node_id,
            expand_depth=given.expand_depth,
            overwrite=given.mode == "overwrite",
            options=given.options,
        )
        return job.to_dict()

    @app.get(
        "/plans/{plan_id}/events",
        tags=["plans"],
        response_class=StreamingResponse,
        responses=event_stream(PLAN_STREAM) | problem_responses(400, 404, 503, 429),
    )
    async def plan_events(
        request: Request,
        plan_id: int,
        last_event_id: Annotated[str | None, Header()] = None,
        after: Annotated[int | None, Query(ge=0, le=streams.MAX_CURSOR)] = None,
    ) -> StreamingResponse:
        """Every node of the plan as it is written, and each decomposition's start and end."""
        start = streams.last_event_id(last_event_id, after)
        hub = service.streams
        release = hub.slots.take(_client(request))
        try:
            await hub.read(plans.tree, plan_id)  # 404 before streaming
        except BaseException:
            release()
            raise
        return streams.EventStream(
            streams.plan_events(plans, plan_id, start, service.closing, hub.read), close=release
        )


def _client(request: Request) -> str:
    """The address a request came from: what the per-client cap on streams counts by."""
    return request.client.host if request.client is not None else "unknown"


def _misc_routes(app: FastAPI, service: Service) -> None:
    @app.post("/chat", tags=["chat"], **returns(ChatTurn, 404, 502, 503))
    async def chat(message: ChatIn) -> dict[str, Any]:
        """Talk to the chat agent; its structured actions run through the same code."""
        if service.chat is None:
            raise Problem(404, "the chat agent is off; start the server with --chat-model")
        return await service.chat.turn(message.message, message.conversation_id)

    @app.get("/toolsets", tags=["service"], **returns(ToolsetList))
    async def toolsets() -> dict[str, Any]:
        """The toolsets runs may use, by name, with their tools."""
        return {
            "toolsets": [
                {"name": name, "tools": [spec.catalog_entry() for spec in toolset.values()]}
                for name, toolset in sorted(service.runs.toolsets.items())
            ]
        }

    @app.get("/models", tags=["service"], **returns(ModelList))
    async def models() -> dict[str, Any]:
        """The models runs may use (the first is the default)."""
        config = service.config
        return {
            "models": list(config.models),
            "default": config.models[0],
            "chat": config.chat_model is not None,
        }

    @app.get("/health", tags=["service"], **returns(Health))
    async def health() -> dict[str, Any]:
        """Whether the server takes work."""
        return {"ok": not service.closing.is_set()}

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")
