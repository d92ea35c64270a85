"""The MCP server: six tools that let any MCP client delegate work to a controlled run.

Built on the official SDK's :class:`~mcp.server.mcpserver.MCPServer`: each tool's input
schema comes from its typed parameters, its output schema from the model it returns
(:mod:`taskdecomp.mcpserver.schemas`), and a request that cannot be served is an MCP tool
error (``isError``) with one line saying why, never a traceback.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from taskdecomp._version import __version__
from taskdecomp.errors import TaskdecompError
from taskdecomp.mcpserver.operations import Operations
from taskdecomp.mcpserver.progress import Progress
from taskdecomp.mcpserver.schemas import BudgetIn, DecomposeOut, RunOut, TreeOut

T = TypeVar("T")

INSTRUCTIONS = (
    "taskdecomp runs goals as controlled task-decomposition agents: a planner writes a plan, "
    "a policy boundary validates it, the operator's tools execute it within budgets, and "
    "every run ends with an explicit stop reason. Start with run_goal; a run whose tool or "
    "plan needs a human pauses (status 'paused'): read it with get_run, then approve or "
    "reject it. decompose breaks a goal into a stored plan tree that run_goal(plan_id=...) "
    "can execute."
)


def _strategies(schema: dict[str, Any]) -> None:
    """List the strategies installed when the schema is made (plugins included)."""
    from taskdecomp.strategies.registry import goal_strategies

    schema["enum"] = list(goal_strategies())


RunId = Annotated[str, Field(min_length=1, max_length=200, description="A run's id.")]
ApprovalId = Annotated[
    str | None,
    Field(
        description="The approval_id get_run shows; when given, the run must still wait for "
        "exactly that plan or call."
    ),
]


def create_server(operations: Operations) -> MCPServer[Any]:
    """The MCP server of ``operations``.

    Its tools: ``run_goal``, ``get_run``, ``approve``, ``reject``, ``decompose`` and
    ``get_tree``.
    """
    server: MCPServer[Any] = MCPServer(
        "taskdecomp", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )
    ops = operations

    @server.tool(
        description="Run GOAL as a controlled agent with the server's tools: plan, validate, "
        "execute within the budget, combine. Returns when the run ends or waits for approval: "
        "its run_id, status (ok, stopped, paused), stop_reason, answer and steps. Progress "
        "notifications report each step while it runs.",
        annotations=ToolAnnotations(title="Run a goal", read_only_hint=False),
    )
    async def run_goal(
        ctx: Context,
        goal: Annotated[
            str,
            Field(
                max_length=20_000,
                description="What to achieve, in words (may be empty with plan_id).",
            ),
        ] = "",
        strategy: Annotated[
            str | None,
            Field(
                description="How to work: plan_execute (plan once, execute, combine; the "
                "default), replan (revise the plan after each wave), tree (decompose into a "
                "plan tree and execute it; the default with plan_id), or a plugin's.",
                json_schema_extra=_any_of_strategies,
            ),
        ] = None,
        budget: Annotated[
            BudgetIn | None,
            Field(description="Limits of this run; a field left out keeps the server's."),
        ] = None,
        allow: Annotated[
            list[str] | None,
            Field(description="The tools the plan may use; default: all the server's tools."),
        ] = None,
        options: Annotated[
            dict[str, Any] | None,
            Field(description='The strategy\'s options, e.g. {"max_iterations": 5} (replan).'),
        ] = None,
        answer_schema: Annotated[
            dict[str, Any] | None,
            Field(description="A JSON schema the answer must match; 'output' is then the value."),
        ] = None,
        plan_id: Annotated[
            int | None,
            Field(ge=1, description="Execute this stored plan tree (from decompose) instead."),
        ] = None,
    ) -> RunOut:
        async with _progress(ctx) as progress:
            return await _served(
                ops.run_goal(
                    goal,
                    strategy=strategy,
                    budget=budget,
                    allow=allow,
                    options=options,
                    answer_schema=answer_schema,
                    plan_id=plan_id,
                    on_event=progress,
                )
            )

    @server.tool(
        description="Read a stored run: status, stop_reason, answer, its plan's steps with "
        "their status, usage, and what it waits for while paused (approval).",
        annotations=ToolAnnotations(title="Read a run", read_only_hint=True),
    )
    async def get_run(run_id: RunId) -> RunOut:
        return await _served(_now(ops.get_run, run_id))

    @server.tool(
        description="Approve what a paused run waits for (its plan, or one tool call), and "
        "continue it until it ends or waits again; returns its new state.",
        annotations=ToolAnnotations(title="Approve a paused run", read_only_hint=False),
    )
    async def approve(ctx: Context, run_id: RunId, approval_id: ApprovalId = None) -> RunOut:
        async with _progress(ctx) as progress:
            return await _served(ops.approve(run_id, approval_id=approval_id, on_event=progress))

    @server.tool(
        description="Reject what a paused run waits for: the run ends with stop reason "
        "approval_rejected and the reason as its message; returns its new state.",
        annotations=ToolAnnotations(title="Reject a paused run", read_only_hint=False),
    )
    async def reject(
        run_id: RunId,
        reason: Annotated[str, Field(min_length=1, max_length=2000, description="Why.")],
        approval_id: ApprovalId = None,
    ) -> RunOut:
        return await _served(ops.reject(run_id, reason=reason, approval_id=approval_id))

    @server.tool(
        description="Break GOAL into a stored plan tree, breadth-first within the server's "
        "budgets (depth, children per node, nodes); returns the plan_id and the tree. "
        "run_goal(plan_id=...) executes it.",
        annotations=ToolAnnotations(title="Decompose a goal", read_only_hint=False),
    )
    async def decompose(
        ctx: Context,
        goal: Annotated[
            str, Field(min_length=1, max_length=20_000, description="The plan's root task.")
        ],
        instruction: Annotated[
            str, Field(max_length=20_000, description="More about the root task.")
        ] = "",
    ) -> DecomposeOut:
        async with _progress(ctx) as progress:
            return await _served(
                ops.decompose(goal, instruction=instruction, on_progress=progress.note)
            )

    @server.tool(
        description="Read a stored plan tree: its title and nodes in walk order, each with "
        "its parent, depth, name, instruction and whether it is a leaf.",
        annotations=ToolAnnotations(title="Read a plan tree", read_only_hint=True),
    )
    async def get_tree(
        plan_id: Annotated[int, Field(ge=1, description="A plan tree's id (from decompose).")],
    ) -> TreeOut:
        return await _served(_now(ops.get_tree, plan_id))

    return server


def _any_of_strategies(schema: dict[str, Any]) -> None:
    for choice in schema.get("anyOf", ()):
        if choice.get("type") == "string":
            _strategies(choice)


async def _now(read: Callable[[Any], T], key: Any) -> T:
    return read(key)


async def _served(work: Awaitable[T]) -> T:
    """The result of ``work``; an error of ours becomes an MCP tool error, in one line.

    Raises:
        ToolError: ``work`` raised a :class:`~taskdecomp.errors.TaskdecompError`.
    """
    try:
        return await work
    except TaskdecompError as exc:
        raise ToolError(" ".join(str(exc).split())) from None


@asynccontextmanager
async def _progress(ctx: Context) -> AsyncIterator[Progress]:
    """Progress notifications for this request (none when the client sent no token)."""

    async def send(progress: float, message: str) -> None:
        await ctx.report_progress(progress, None, message)

    async with Progress(send) as progress:
        yield progress
