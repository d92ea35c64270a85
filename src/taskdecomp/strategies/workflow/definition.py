"""Workflow definitions: the YAML file, checked whole, as frozen domain objects.

A workflow file (seed 003, section 6.2.4)::

    workflow: {name: default, version: 2, start: design_draft}
    phases:
      design_review:
        prompt: design.review.md          # next to the file, or in the built-in prompts
        type: evaluate                    # execute | evaluate | terminal
        description: Review the design (read-only)
        allowed_writes: [".taskdecomp/*"]
        transitions:
          - {to: design_edit, when: "status.designNeedsChanges == true"}
          - {to: task_decomposition, when: "status.designApproved == true"}

Unknown keys are errors. :func:`check_workflow` reports every problem at once, each naming
its phase and field: YAML that does not parse, a missing or unknown ``start``, transitions
to phases that do not exist, guards that do not parse, phases no path from ``start``
reaches, no terminal phase, terminal phases with transitions, non-terminal phases without
any, missing prompt files. :func:`load_workflow` returns the :class:`Workflow` or raises
:class:`~taskdecomp.errors.WorkflowError` with all of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from taskdecomp.errors import WorkflowError
from taskdecomp.strategies.workflow.guards import Guard

PhaseType = Literal["execute", "evaluate", "terminal"]
"""``execute`` phases change the workspace; ``evaluate`` ones only read it (but their
``allowed_writes``); a ``terminal`` phase ends the workflow."""

BUILT_IN = ("default", "tasks")
"""The workflows that ship with taskdecomp, by name."""

_PACKAGE = "taskdecomp.strategies.workflow"


class _TransitionModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    to: str = Field(min_length=1)
    when: str | None = None
    auto: bool | None = None


class _PhaseModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt: str | None = None
    type: PhaseType
    description: str = ""
    allowed_writes: list[str] = Field(default_factory=list)
    transitions: list[_TransitionModel] = Field(default_factory=list)


class _HeaderModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    version: int | str = 1
    start: str = Field(min_length=1)


class _FileModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workflow: _HeaderModel
    phases: dict[str, _PhaseModel] = Field(min_length=1)


@dataclass(frozen=True, kw_only=True, slots=True)
class Transition:
    """Where a phase may go next."""

    to: str
    """The next phase."""
    guard: Guard | None
    """When it may go there; ``None`` for ``auto: true`` (always)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Phase:
    """One phase of a workflow."""

    name: str
    type: PhaseType
    prompt: str | None
    """The prompt's file name, or ``None`` (a terminal phase needs none)."""
    description: str
    allowed_writes: tuple[str, ...]
    """Globs an ``evaluate`` phase may write besides nothing else (an ``execute`` phase's
    writes are bounded by its task)."""
    transitions: tuple[Transition, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Problem:
    """Something wrong with a workflow file: where, and what."""

    phase: str | None
    """The phase it is in; ``None`` for the file or its ``workflow`` header."""
    field: str
    """The field, e.g. ``transitions[1].when``."""
    message: str

    def __str__(self) -> str:
        where = f"phase {self.phase!r}, {self.field}" if self.phase else self.field
        return f"{where}: {self.message}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Workflow:
    """A checked workflow."""

    name: str
    version: str
    start: str
    phases: Mapping[str, Phase]
    prompts: Mapping[str, str]
    """Each phase's prompt text, read when the workflow was loaded."""

    def next_phase(self, phase: str, state: Mapping[str, Any]) -> str | None:
        """The first transition of ``phase`` whose guard holds in ``state``; ``None`` if none."""
        for transition in self.phases[phase].transitions:
            if transition.guard is None or transition.guard.evaluate(state):
                return transition.to
        return None

    def verdict_fields(self) -> frozenset[str]:
        """The ``status.*`` fields an ``evaluate`` phase's guards read.

        Only such a phase (or the runner) sets them, so no phase approves its own work.
        """
        return frozenset(
            path.removeprefix("status.")
            for phase in self.phases.values()
            if phase.type == "evaluate"
            for transition in phase.transitions
            if transition.guard is not None
            for path in transition.guard.paths()
            if path.startswith("status.")
        )

    def status_fields(self) -> frozenset[str]:
        """The ``status.*`` fields the guards read (what an agent may set)."""
        return frozenset(
            path.removeprefix("status.")
            for phase in self.phases.values()
            for transition in phase.transitions
            if transition.guard is not None
            for path in transition.guard.paths()
            if path.startswith("status.")
        )


def load_workflow(spec: str | Path) -> Workflow:
    """Load a workflow file, or a built-in one by name (``default``, ``tasks``).

    Raises:
        WorkflowError: the file is missing or has problems; the message lists every one.
    """
    path = _locate(spec)
    raw, problems = _read(path)
    workflow = None if raw is None else _build(raw, path, problems)
    if problems or workflow is None:
        listed = "; ".join(str(problem) for problem in problems)
        raise WorkflowError(
            f"workflow {str(spec)!r} has {len(problems)} problem(s): {listed}",
            tuple(str(problem) for problem in problems),
        )
    return workflow


def check_workflow(spec: str | Path) -> list[Problem]:
    """Every problem in a workflow file (or a built-in one); empty when it is valid.

    Raises:
        WorkflowError: the file does not exist.
    """
    path = _locate(spec)
    raw, problems = _read(path)
    if raw is not None:
        _build(raw, path, problems)
    return problems


def _locate(spec: str | Path) -> Path:
    if isinstance(spec, str) and spec in BUILT_IN:
        return Path(str(resources.files(_PACKAGE) / "builtin" / f"{spec}.yaml"))
    path = Path(spec).expanduser()
    if not path.is_file():
        raise WorkflowError(
            f"no workflow file at {str(spec)!r}; give a YAML file or a built-in name "
            f"({', '.join(BUILT_IN)})"
        )
    return path


def _read(path: Path) -> tuple[_FileModel | None, list[Problem]]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        message = " ".join(str(exc).split())
        return None, [Problem(phase=None, field="file", message=f"not YAML: {message}")]
    try:
        return _FileModel.model_validate(data), []
    except ValidationError as exc:
        return None, [_schema_problem(error) for error in exc.errors(include_url=False)]


def _schema_problem(error: Mapping[str, Any]) -> Problem:
    loc = [str(part) for part in error["loc"]]
    if len(loc) >= 2 and loc[0] == "phases":
        return Problem(phase=loc[1], field=_field(loc[2:]) or "phase", message=error["msg"])
    return Problem(phase=None, field=_field(loc) or "file", message=error["msg"])


def _field(loc: list[str]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if part.isdigit() else (f".{part}" if text else part)
    return text


def _build(raw: _FileModel, path: Path, problems: list[Problem]) -> Workflow | None:
    phases = {name: _phase(name, model, problems) for name, model in raw.phases.items()}
    prompts = {name: _prompt(phase, path, problems) for name, phase in phases.items()}
    _check_graph(raw.workflow.start, raw.phases, problems)
    if problems:
        return None
    return Workflow(
        name=raw.workflow.name,
        version=str(raw.workflow.version),
        start=raw.workflow.start,
        phases=phases,
        prompts={name: text for name, text in prompts.items() if text is not None},
    )


def _phase(name: str, model: _PhaseModel, problems: list[Problem]) -> Phase:
    transitions = []
    for index, item in enumerate(model.transitions):
        field = f"transitions[{index}]"
        if (item.when is None) == (not item.auto):
            problems.append(
                Problem(
                    phase=name, field=field, message="give either 'when: GUARD' or 'auto: true'"
                )
            )
            continue
        guard = None
        if item.when is not None:
            try:
                guard = Guard.parse(item.when)
            except WorkflowError as exc:
                problems.append(Problem(phase=name, field=f"{field}.when", message=str(exc)))
                continue
        transitions.append(Transition(to=item.to, guard=guard))
    return Phase(
        name=name,
        type=model.type,
        prompt=model.prompt,
        description=model.description,
        allowed_writes=tuple(model.allowed_writes),
        transitions=tuple(transitions),
    )


def _prompt(phase: Phase, path: Path, problems: list[Problem]) -> str | None:
    if phase.prompt is None:
        if phase.type != "terminal":
            problems.append(Problem(phase=phase.name, field="prompt", message="missing"))
        return None
    for candidate in (path.parent / phase.prompt, path.parent / "prompts" / phase.prompt):
        if candidate.is_file():
            return candidate.read_text(encoding="utf-8")
    packaged = resources.files(_PACKAGE) / "prompts" / phase.prompt
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    problems.append(
        Problem(
            phase=phase.name,
            field="prompt",
            message=f"no prompt file {phase.prompt!r} next to the workflow, in its prompts/ "
            "folder, or among the built-in prompts",
        )
    )
    return None


def _check_graph(start: str, phases: Mapping[str, _PhaseModel], problems: list[Problem]) -> None:
    """Check the graph as written (a transition with a bad guard still counts as an edge)."""

    def add(phase: str | None, field: str, message: str) -> None:
        problems.append(Problem(phase=phase, field=field, message=message))

    if start not in phases:
        add(None, "workflow.start", _unknown(start, phases))
    for name, phase in phases.items():
        for index, transition in enumerate(phase.transitions):
            if transition.to not in phases:
                add(name, f"transitions[{index}].to", _unknown(transition.to, phases))
        if phase.type == "terminal" and phase.transitions:
            add(name, "transitions", "a terminal phase has no transitions")
        if phase.type != "terminal" and not phase.transitions:
            add(name, "transitions", "none: add one, or make the phase terminal")
    if not any(phase.type == "terminal" for phase in phases.values()):
        add(None, "phases", "no terminal phase: the workflow could never end")
    if start in phases:
        for name in sorted(set(phases) - _reachable(start, phases)):
            add(name, "phase", f"cannot be reached from {start!r}")


def _reachable(start: str, phases: Mapping[str, _PhaseModel]) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for transition in phases[todo.pop()].transitions:
            if transition.to in phases and transition.to not in seen:
                seen.add(transition.to)
                todo.append(transition.to)
    return seen


def _unknown(name: str, phases: Mapping[str, object]) -> str:
    return f"no phase {name!r}; the phases are: {', '.join(phases)}"
