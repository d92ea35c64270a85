"""Plans: what to do. A plan is an ordered tuple of steps, optionally a DAG.

A step is either a **tool step** (call ``tool`` with ``args``, the seed's contract) or an
**instruction step** (``instruction`` in words, carried out by the executor agent of the
``replan`` strategy). A plan never records how its steps went; that is the run's business
(:mod:`taskdecomp.run`). Plans are frozen; a revised plan is a new object.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NewType

TaskId = NewType("TaskId", str)
"""The id of a step, unique within its plan (``step_1``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """One step of a plan: call ``tool`` with ``args``, or carry out ``instruction``."""

    id: TaskId
    """Unique within the plan (and, in a replanned run, across every revision)."""
    title: str
    """What the step is for, in words."""
    tool: str | None = None
    """The tool to call; ``None`` for an instruction step."""
    args: Mapping[str, Any] = field(default_factory=dict)
    """The tool's arguments, as the model wrote them (``{"$ref": ...}`` values included)."""
    instruction: str | None = None
    """What the executor agent should do; ``None`` for a tool step."""
    depends_on: tuple[TaskId, ...] | None = None
    """Steps that must finish first; ``None`` when the model did not say."""

    @property
    def tool_name(self) -> str:
        """The tool of a tool step; ``"-"`` for an instruction step (for tables and traces)."""
        return self.tool if self.tool is not None else "-"

    def to_dict(self) -> dict[str, Any]:
        """The seed's JSON shape, plus ``depends_on`` when the plan declares it.

        An instruction step has ``instruction`` instead of ``tool`` and ``args``.
        """
        data: dict[str, Any] = {"id": self.id, "title": self.title}
        if self.instruction is not None:
            data["instruction"] = self.instruction
        else:
            data["tool"] = self.tool
            data["args"] = dict(self.args)
        if self.depends_on is not None:
            data["depends_on"] = list(self.depends_on)
        return data


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """An ordered, validated list of steps."""

    steps: tuple[Step, ...]
    """In the order the model gave them."""

    @property
    def is_dag(self) -> bool:
        """Whether any step declares ``depends_on`` (then order comes from the edges)."""
        return any(step.depends_on is not None for step in self.steps)

    def dependencies(self) -> dict[TaskId, tuple[TaskId, ...]]:
        """Each step's prerequisites; in a sequential plan, the step before it."""
        if self.is_dag:
            return {step.id: step.depends_on or () for step in self.steps}
        deps: dict[TaskId, tuple[TaskId, ...]] = {}
        previous: tuple[TaskId, ...] = ()
        for step in self.steps:
            deps[step.id] = previous
            previous = (step.id,)
        return deps

    def to_list(self) -> list[dict[str, Any]]:
        """The plan as the seed's JSON list of steps."""
        return [step.to_dict() for step in self.steps]

    def ready(self, done: Collection[TaskId]) -> list[Step]:
        """The steps not in ``done`` whose prerequisites all are, in plan order.

        A prerequisite that is not a step of this plan counts as done (a revised plan may
        depend on steps finished under an earlier revision).
        """
        ids = {step.id for step in self.steps}
        return [
            step
            for step, deps in zip(self.steps, self.dependencies().values(), strict=True)
            if step.id not in done and all(dep in done or dep not in ids for dep in deps)
        ]

    def ancestors(self, step_id: TaskId) -> set[TaskId]:
        """Every step ``step_id`` waits for, directly or through others."""
        deps = self.dependencies()
        seen: set[TaskId] = set()
        stack = list(deps.get(step_id, ()))
        while stack:
            current = stack.pop()
            if current not in seen:
                seen.add(current)
                stack.extend(deps.get(current, ()))
        return seen


def find_cycle(edges: Mapping[TaskId, Iterable[TaskId]]) -> list[TaskId] | None:
    """Return one cycle in ``edges`` (node -> prerequisites) as a list of nodes, or ``None``.

    Edges to nodes outside the mapping are ignored. Iterative, so deep chains cannot
    overflow the stack.
    """
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(edges, white)
    for start in edges:
        if colour[start] != white:
            continue
        stack: list[tuple[TaskId, Iterator[TaskId]]] = [(start, iter(edges[start]))]
        path = [start]
        colour[start] = grey
        while stack:
            node, children = stack[-1]
            child = next((c for c in children if c in colour), None)
            if child is None:
                colour[node] = black
                stack.pop()
                path.pop()
            elif colour[child] == grey:
                return [*path[path.index(child) :], child]
            elif colour[child] == white:
                colour[child] = grey
                stack.append((child, iter(edges[child])))
                path.append(child)
    return None
