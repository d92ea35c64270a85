"""Plans: what to do. A plan is an ordered tuple of steps, optionally a DAG.

A plan never records how its steps went; that is the run's business
(:mod:`taskdecomp.run`). Plans are frozen; a revised plan is a new object.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NewType

TaskId = NewType("TaskId", str)
"""The id of a step, unique within its plan (``step_1``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """One step of a plan: call ``tool`` with ``args``."""

    id: TaskId
    """Unique within the plan."""
    title: str
    """What the step is for, in words."""
    tool: str
    """The tool to call."""
    args: Mapping[str, Any]
    """The tool's arguments, as the model wrote them."""
    depends_on: tuple[TaskId, ...] | None = None
    """Steps that must finish first; ``None`` when the model did not say."""

    def to_dict(self) -> dict[str, Any]:
        """The seed's JSON shape, plus ``depends_on`` when the plan declares it."""
        data: dict[str, Any] = {
            "id": self.id,
            "title": self.title,
            "tool": self.tool,
            "args": dict(self.args),
        }
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
