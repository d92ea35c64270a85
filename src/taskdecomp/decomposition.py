"""What the decomposer asks the model, what it accepts back, and what it reports.

The request carries the ``target_task`` (with its path and existing children), a truncated
``plan_outline``, the ``constraints``, a ``mode_hint`` and, when an attempt at the task
failed, what went wrong (``failure``). The answer is parsed strictly
(:func:`~taskdecomp.policy.parse_model_json`), shaped by :class:`DecompositionPayload` and
checked by :func:`validate_payload` against the tree as it stood when the question was
asked. Anything wrong raises :class:`~taskdecomp.stops.StopRun` with an
``invalid_children:<rule>`` reason (a non-finite number such as ``NaN`` or ``1e400`` is
``invalid_children:non_json``); the node fails, the decomposition goes on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from taskdecomp import jsonsafe
from taskdecomp.policy import parse_model_json
from taskdecomp.stops import StopRun, with_detail
from taskdecomp.tree import NewNode, NodeContext, NodeId, PlanNode, PlanTree, PlanTreeId

Mode = Literal["plan_bfs", "single_node"]
"""Whole-plan breadth-first decomposition, or one node on demand."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DecompOptions:
    """Budgets and switches of a decomposition (seed 002, section 6)."""

    max_depth: int = 3
    """Deepest level created, counted from the roots (``DECOMP_MAX_DEPTH``)."""
    max_children: int = 6
    """Most children one answer may have; more is an invalid answer."""
    total_node_budget: int = 50
    """Most nodes one call creates (``DECOMP_TOTAL_NODE_BUDGET``)."""
    auto_on_create: bool = True
    """Decompose a new plan right after :meth:`PlanDecomposer.create_plan`."""
    stop_on_empty: bool = True
    """An empty answer means "nothing to split" (else it is retried as invalid)."""
    retry_limit: int = 1
    """Retries of one node after a failed or invalid answer."""
    concurrency: int = 8
    """Most model calls at once; 1 asks in exact BFS order (``DECOMP_CONCURRENCY``)."""
    skip_existing: bool = True
    """In ``plan_bfs``, do not ask about a node that already has children (walk below it)."""
    expand_depth: int = 1
    """In ``single_node``, how many levels to create below the node."""
    replace: bool = False
    """In ``single_node``, delete the node's existing children first (else append)."""
    max_seconds: float | None = None
    """Deadline for the whole decomposition."""
    outline_chars: int = 4000
    """Longest plan outline sent with a request."""

    def __post_init__(self) -> None:
        for name in (
            "max_depth",
            "max_children",
            "total_node_budget",
            "concurrency",
            "expand_depth",
            "outline_chars",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)!r}")
        if self.retry_limit < 0:
            raise ValueError(f"retry_limit must be >= 0, got {self.retry_limit!r}")
        if self.max_seconds is not None and self.max_seconds <= 0:
            raise ValueError(f"max_seconds must be positive, got {self.max_seconds!r}")


def with_options(options: DecompOptions, **changes: Any) -> DecompOptions:
    """``options`` with the given fields changed (``None`` values are ignored)."""
    return replace(options, **{k: v for k, v in changes.items() if v is not None})


class ChildContext(BaseModel):
    """A child's context, as the model gives it."""

    model_config = ConfigDict(extra="forbid")
    combined: str | None = None
    sections: list[Any] = Field(default_factory=list)
    meta: dict[str, Any] = Field(default_factory=dict)


class Child(BaseModel):
    """One subtask, as the model gives it."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200)
    instruction: str = ""
    dependencies: list[int] = Field(default_factory=list)
    context: ChildContext = Field(default_factory=ChildContext)
    leaf: bool = False


class DecompositionPayload(BaseModel):
    """The model's answer for one node (seed 002, section 4.2)."""

    model_config = ConfigDict(extra="forbid")
    target_node_id: int | None = None
    mode: Mode | None = None
    should_stop: bool = False
    reason: str | None = None
    children: list[Child] = Field(default_factory=list)


def response_schema(*, max_children: int) -> dict[str, Any]:
    """JSON schema of the answer, for structured output."""
    schema = DecompositionPayload.model_json_schema()
    schema["properties"]["children"]["maxItems"] = max_children
    return schema


class ExistingChild(BaseModel):
    """A child the target task already has."""

    id: int
    name: str


class TargetTask(BaseModel):
    """The node to decompose, with where it stands in the plan."""

    id: int
    name: str
    instruction: str
    path: list[str]
    """Names from the root down to this node."""
    existing_children: list[ExistingChild]


class Constraints(BaseModel):
    """What an answer must respect."""

    max_children: int
    dependencies: str = "ids of existing nodes of this plan only"
    allowed_child_keys: list[str] = Field(
        default_factory=lambda: ["name", "instruction", "dependencies", "context", "leaf"]
    )


class DecompositionRequest(BaseModel):
    """What the decomposer sends for one node (seed 002, section 4.1)."""

    target_task: TargetTask
    plan_outline: str
    """The plan as indented ``[id] name`` lines, truncated."""
    constraints: Constraints
    mode_hint: Mode
    failure: str | None = None
    """How an attempt at the task went wrong, when one was made (left out otherwise)."""


def build_request(
    tree: PlanTree,
    node: PlanNode,
    *,
    mode: Mode,
    max_children: int,
    outline_chars: int,
    failure: str | None = None,
) -> DecompositionRequest:
    """The request for decomposing ``node`` (``failure``: why an attempt at it failed)."""
    return DecompositionRequest(
        target_task=TargetTask(
            id=node.id,
            name=node.name,
            instruction=node.instruction,
            path=[step.name for step in tree.path(node.id)],
            existing_children=[
                ExistingChild(id=child.id, name=child.name) for child in tree.children(node.id)
            ],
        ),
        plan_outline=outline(tree, max_chars=outline_chars),
        constraints=Constraints(max_children=max_children),
        mode_hint=mode,
        failure=failure,
    )


def outline(tree: PlanTree, *, max_chars: int) -> str:
    """The plan as indented ``[id] name`` lines, cut at ``max_chars`` with a marker."""
    lines = [f"plan #{tree.id}: {tree.title}"]
    used = len(lines[0])
    for node, depth in tree.walk():
        line = f"{'  ' * (depth + 1)}[{node.id}] {node.name}"
        if used + len(line) + 1 > max_chars:
            lines.append(f"  ... ({len(tree.nodes)} nodes in all)")
            break
        lines.append(line)
        used += len(line) + 1
    return "\n".join(lines)


def _reject(rule: str, message: str) -> StopRun:
    return StopRun(with_detail("invalid_children", rule), message=message)


def parse_payload(text: str) -> DecompositionPayload:
    """Parse the model's text strictly into a payload.

    Raises:
        StopRun: ``invalid_children:non_json`` or ``invalid_children:schema``.
    """
    try:
        value = parse_model_json(text)
    except StopRun as stop:
        raise _reject("non_json", stop.message) from stop
    try:
        return DecompositionPayload.model_validate(value)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "(answer)"
        raise _reject("schema", f"{where}: {first['msg']}") from exc


def validate_payload(
    payload: DecompositionPayload,
    *,
    tree: PlanTree,
    node: PlanNode,
    mode: Mode,
    max_children: int,
) -> list[NewNode]:
    """Check an answer for ``node`` and return the children to write, in order.

    Raises:
        StopRun: ``invalid_children:<rule>`` (``wrong_target``, ``wrong_mode``,
            ``too_many``, ``unknown_dependency:<id>``, ``duplicate_name``).
    """
    if payload.target_node_id is not None and payload.target_node_id != node.id:
        raise _reject(
            "wrong_target", f"answered for node {payload.target_node_id}, asked for {node.id}"
        )
    if payload.mode is not None and payload.mode != mode:
        raise _reject("wrong_mode", f"answered in mode {payload.mode!r}, asked {mode!r}")
    if len(payload.children) > max_children:
        raise _reject(
            "too_many", f"{len(payload.children)} children; at most {max_children} allowed"
        )
    known = {n.id for n in tree.nodes}
    names: set[str] = set()
    for child in payload.children:
        for dep in child.dependencies:
            if dep not in known:
                raise _reject(f"unknown_dependency:{dep}", f"no node {dep} in plan {tree.id}")
        name = child.name.strip()
        if not name or name in names:
            raise _reject("duplicate_name", f"child name {child.name!r} is empty or repeated")
        names.add(name)
    return [_new_node(child) for child in payload.children]


def _new_node(child: Child) -> NewNode:
    return NewNode(
        name=child.name.strip(),
        instruction=child.instruction.strip(),
        dependencies=tuple(NodeId(d) for d in dict.fromkeys(child.dependencies)),
        context=NodeContext(
            combined=child.context.combined,
            sections=tuple(child.context.sections),
            meta=child.context.meta,
        ),
        leaf=child.leaf,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class DecompositionResult:
    """How a decomposition went (seed 002, section 8)."""

    plan_id: PlanTreeId
    mode: Mode
    root_node_id: NodeId | None
    """The node decomposed in single-node mode; ``None`` for a whole plan."""
    processed_nodes: tuple[NodeId, ...]
    """Nodes the model answered for, in BFS order."""
    created_tasks: tuple[PlanNode, ...]
    """Every node written, in BFS order."""
    failed_nodes: tuple[NodeId, ...]
    """Nodes that got no usable answer after the retries, or whose write failed."""
    stopped_reason: str | None
    """``None`` when the decomposition finished; else a stop reason (``max_nodes``, ...)."""
    stats: dict[str, Any] = field(default_factory=dict)
    """``llm_calls``, ``retries``, ``tokens_in``, ``tokens_out``, ``seconds``,
    ``nodes_created``, ``levels``, and ``failures`` (node id -> ``reason`` and ``message``)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form (strict: a copy of ``stats`` made through :func:`jsonsafe.dumps`).

        Raises:
            StrictJSONError: ``stats`` holds a NaN or an infinity.
        """
        return {
            "plan_id": self.plan_id,
            "mode": self.mode,
            "root_node_id": self.root_node_id,
            "processed_nodes": list(self.processed_nodes),
            "created_tasks": [node.to_dict() for node in self.created_tasks],
            "failed_nodes": list(self.failed_nodes),
            "stopped_reason": self.stopped_reason,
            "stats": json.loads(jsonsafe.dumps(self.stats)),
        }

    def summary(self) -> str:
        """One line in plain words, e.g. ``Plan #8 got 10 subtasks; node 15 was not ...``."""
        count = len(self.created_tasks)
        parts = [f"Plan #{self.plan_id} got {count} subtask{'s' if count != 1 else ''}"]
        failures: dict[str, dict[str, str]] = self.stats.get("failures", {})
        for node_id in self.failed_nodes:
            reason = failures.get(str(node_id), {}).get("reason", "")
            why = _EXPLAIN.get(reason.partition(":")[0], "it failed")
            parts.append(f"node {node_id} was not processed because {why}")
        if self.stopped_reason in _STOPPED:
            parts.append(_STOPPED[self.stopped_reason])
        return "; ".join(parts) + "."


_EXPLAIN = {
    "llm_timeout": "the model did not answer",
    "llm_empty": "the model gave an empty answer",
    "llm_error": "the model call failed",
    "invalid_children": "the model's answer was invalid",
    "store_error": "its children could not be written",
}
_STOPPED = {
    "max_nodes": "stopped at the node budget",
    "max_depth": "stopped at the depth limit",
    "max_seconds": "stopped at the time limit",
    "cancelled": "cancelled",
}
