"""Request bodies and query strings: pydantic models at the HTTP edge, unknown keys refused.

Limits a request may leave out (a budget, a decomposition's options) are typed dictionaries:
a field is there with a value of its type, or absent (the server's default). ``null`` is
refused (422), never taken as "no limit".
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, with_config
from typing_extensions import TypedDict

from taskdecomp.strategies.tree.options import Decompose

Text = Field(min_length=1, max_length=20_000)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


@with_config(ConfigDict(extra="forbid"))
class BudgetIn(TypedDict, total=False):
    """Limits of one run; a missing field keeps the server's default."""

    max_plan_steps: Annotated[int, Field(ge=1, le=1000)]
    max_execute_steps: Annotated[int, Field(ge=1, le=10_000)]
    max_tool_calls: Annotated[int, Field(ge=1, le=10_000)]
    max_seconds: Annotated[float, Field(gt=0, le=86_400)]
    max_llm_calls: Annotated[int, Field(ge=0)]
    max_tokens: Annotated[int, Field(ge=0)]
    max_cost_usd: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    max_parallel: Annotated[int, Field(ge=1, le=64)]
    min_plan_steps: Annotated[int, Field(ge=1, le=1000)]
    repairs: Annotated[int, Field(ge=0, le=10)]


class ReplanIn(_Body):
    """The ``replan`` strategy's options a client may set (never a prompts directory)."""

    max_iterations: int = Field(default=10, ge=1, le=100)
    max_agent_turns: int = Field(default=20, ge=1, le=100)
    approve_plan: bool = False


def strategy_names(schema: dict[str, Any]) -> None:
    """Document the strategies installed when the schema is made (plugins included)."""
    from taskdecomp.strategies.registry import goal_strategies

    schema["enum"] = list(goal_strategies())


STRATEGY = Field(
    default="plan_execute",
    min_length=1,
    max_length=200,
    description="A registered strategy that starts from a goal.",
    json_schema_extra=strategy_names,
)


class RunIn(_Body):
    """``POST /runs``: what to run, with what, under which limits."""

    goal: str = Text
    toolset: str = Field(min_length=1, max_length=200, description="A registered toolset name.")
    strategy: str = STRATEGY
    allow: list[str] | None = Field(
        default=None, max_length=200, description="Tools the plan may use; default: all."
    )
    budget: BudgetIn | None = None
    model: str | None = Field(
        default=None, max_length=500, description="One of GET /models; default: the first."
    )
    options: dict[str, Any] | None = Field(
        default=None, description="The strategy's options, in their JSON form."
    )
    replan: ReplanIn | None = Field(default=None, description="The replan strategy's options.")
    answer_schema: dict[str, Any] | None = Field(
        default=None,
        description="A JSON schema the answer must match; the run's output is then the "
        "typed answer (GET /runs/{id} returns it as output).",
    )
    idempotency_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="Queued runs only: the same key submitted again gives the same run.",
    )


@with_config(ConfigDict(extra="forbid"))
class TreeOptionsIn(TypedDict, total=False):
    """The ``tree`` strategy's options a client may set; a missing field keeps its default."""

    decompose: Annotated[
        Decompose,
        Field(description="as-needed (default): split a leaf whose attempt fails; upfront; none."),
    ]
    max_depth: Annotated[
        int, Field(ge=1, le=1000, description="Deepest split level below the run's root (3).")
    ]
    max_nodes: Annotated[int, Field(ge=1, le=1000, description="Most nodes the run adds (50).")]
    max_children: Annotated[int, Field(ge=1, le=1000, description="Most children a split has.")]
    node_retries: Annotated[
        int, Field(ge=0, le=100, description="Attempts at a failed leaf after the first (1).")
    ]
    redecompose: Annotated[
        bool, Field(description="Split a node again once when a child failed (true).")
    ]
    approve_decompositions: Annotated[
        bool, Field(description="Pause before the children of an as-needed split run (false).")
    ]
    max_agent_turns: Annotated[
        int, Field(ge=1, le=1000, description="Most executor turns per attempt at a leaf (20).")
    ]


class TreeRunIn(_Body):
    """``POST /plans/{id}/runs``, ``POST /plans/{id}/nodes/{node}/runs``: run a stored tree."""

    toolset: str = Field(min_length=1, max_length=200, description="A registered toolset name.")
    goal: str | None = Field(
        default=None,
        min_length=1,
        max_length=20_000,
        description="The objective the executor is given; default: the node's name, or the "
        "plan's title.",
    )
    allow: list[str] | None = Field(
        default=None, max_length=200, description="Tools the leaves may use; default: all."
    )
    budget: BudgetIn | None = None
    model: str | None = Field(
        default=None, max_length=500, description="One of GET /models; default: the first."
    )
    options: TreeOptionsIn | None = Field(default=None, description="The tree strategy's options.")


class ApproveIn(_Body):
    """``POST /runs/{id}/approve``: optionally an edited plan (replan strategy only)."""

    plan: dict[str, Any] | list[Any] | None = None


class RejectIn(_Body):
    """``POST /runs/{id}/reject``."""

    reason: str = Field(min_length=1, max_length=2000)


@with_config(ConfigDict(extra="forbid"))
class DecompIn(TypedDict, total=False):
    """Budgets of one decomposition; a missing field keeps the server's default."""

    max_depth: Annotated[int, Field(ge=1, le=10)]
    max_children: Annotated[int, Field(ge=1, le=50)]
    total_node_budget: Annotated[int, Field(ge=1, le=1000)]
    retry_limit: Annotated[int, Field(ge=0, le=5)]
    concurrency: Annotated[int, Field(ge=1, le=32)]
    max_seconds: Annotated[float, Field(gt=0, le=3600)]


class PlanIn(_Body):
    """``POST /plans`` (``create_plan``)."""

    title: str = Field(min_length=1, max_length=2000)
    instruction: str = Field(default="", max_length=20_000)
    auto_decompose: bool | None = Field(
        default=None, description="Decompose at once; default: DECOMP_AUTO_ON_CREATE."
    )
    options: DecompIn | None = None


class NodeDecomposeIn(_Body):
    """``POST /plans/{id}/nodes/{node}/decompose`` (single-node mode)."""

    expand_depth: int = Field(default=1, ge=1, le=10)
    mode: Literal["append", "overwrite"] = "append"
    options: DecompIn | None = None


class ChatIn(_Body):
    """``POST /chat``."""

    message: str = Field(min_length=1, max_length=20_000)
    conversation_id: str | None = Field(default=None, min_length=1, max_length=100)


RunStatus = Literal["queued", "running", "interrupted", "paused", "ok", "stopped"]
"""The statuses the API shows (:data:`taskdecomp.server.runs.STATUSES`)."""

Limit = Field(default=50, ge=1, le=500, description="The most items a page holds.")
Cursor = Field(
    default=None,
    min_length=1,
    max_length=1000,
    description="The previous page's next_cursor; leave it out for the first page.",
)


class RunsQuery(_Body):
    """``GET /runs``: a page of runs, newest first."""

    status: RunStatus | None = Field(default=None, description="Only runs with this status.")
    limit: int = Limit
    cursor: str | None = Cursor


class PlansQuery(_Body):
    """``GET /plans``: a page of plan trees, newest first."""

    limit: int = Limit
    cursor: str | None = Cursor
