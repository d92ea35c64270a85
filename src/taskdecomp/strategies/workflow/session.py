"""A workflow run's live state, its stored form, and the files it shows in the workspace.

The :class:`Session` holds the :class:`~.state.WorkflowState` (phase, status fields, task
list, attempts, feedback), the phase runs in flight with their agents' turns, and the paths
each task changed. It is stored as the run's strategy state (``{"workflow": {...}}``) with
every checkpoint: a phase starting or ending, and every tool call an agent makes, so a
killed workflow resumes in the phase it was in, after its agent's last recorded turn.

Each checkpoint also writes ``.taskdecomp/tasks.json`` and ``.taskdecomp/status.json`` into
the workspace for people and tools to read (the store stays the record of truth). A phase's
starting snapshot goes to ``.taskdecomp/run/<step>.json``, outside the stored state, so a
large workspace does not make every checkpoint large.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from taskdecomp.errors import CorruptRecordError
from taskdecomp.stops import StopRun, with_detail
from taskdecomp.strategies.workflow import state as rules
from taskdecomp.strategies.workflow.definition import Workflow
from taskdecomp.strategies.workflow.options import WorkflowOptions
from taskdecomp.strategies.workflow.snapshot import Snapshot, snapshot
from taskdecomp.strategies.workflow.state import WorkflowState
from taskdecomp.strategies.workflow.tasklist import TaskList, TaskListError, parse_tasks
from taskdecomp.strategies.workflow.workspace import (
    RUNNER_DIR,
    PathRefused,
    Workspace,
    write_new,
)

STATE_DIR = ".taskdecomp"
DESIGN_PATH = ".taskdecomp/design.md"
"""Where the design phases keep the design document."""
INPUT_PATH = ".taskdecomp/input.md"
"""Where the run keeps a copy of ``--input``, so every phase (and a resume) can read it."""


@dataclass(kw_only=True)
class PhaseRun:
    """One run of one phase, possibly for one task."""

    no: int
    """Its number in the run (the step number), from 1."""
    phase: str
    task: str | None = None
    attempt: int = 1
    """For a task phase: which attempt at the task this is."""
    turns: list[dict[str, Any]] = field(default_factory=list)
    """The agent's calls so far, with what they returned."""

    @property
    def step_id(self) -> str:
        """The run's step id for it (``p<no>``)."""
        return f"p{self.no}"

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "no": self.no,
            "phase": self.phase,
            "task": self.task,
            "attempt": self.attempt,
            "turns": self.turns,
        }


class Session:
    """Everything a workflow run knows, shared by its phase runs and its state tools."""

    def __init__(
        self,
        *,
        workflow: Workflow,
        spec: str,
        workspace: Workspace,
        options: WorkflowOptions,
        state: WorkflowState,
        design_path: str | None,
        input_path: str | None,
    ) -> None:
        self.workflow = workflow
        self.spec = spec
        self.workspace = workspace
        self.options = options
        self.state = state
        self.design_path = design_path
        self.input_path = input_path
        self.runs = 0
        """Phase runs started."""
        self.inflight: dict[str, PhaseRun] = {}
        self.changed: dict[str, list[str]] = {}
        """Paths each task's phases changed, in scope or not."""
        self.violations: dict[str, list[str]] = {}
        """Out-of-scope paths found for a task and not yet reported by its spec check."""
        self.commits: dict[str, str] = {}
        """The commit of each passed task, when the workspace is a repository."""
        self.implemented: dict[str, int] = {}
        """For each task, the attempt whose implementation finished and awaits its check."""
        self.base_commit: str | None = None
        """The workspace's commit when the run started (task commits come after it)."""
        self.on_change: Callable[[], object] = _nothing
        """Called (from a tool's thread) after a workspace tool changed a file: a read of
        the same file is then no repeated call."""
        self.previous: dict[str, Any] | None = None
        """The last phase run outside the task loop: its name and result, for the next."""

    # -- phase runs --------------------------------------------------------------------

    def start_run(self, phase: str, task: str | None = None, attempt: int = 1) -> PhaseRun:
        """Number a new phase run and note it as in flight."""
        self.sweep()
        self.runs += 1
        run = PhaseRun(no=self.runs, phase=phase, task=task, attempt=attempt)
        self.inflight[run.step_id] = run
        return run

    def end_run(self, run: PhaseRun) -> None:
        """``run`` is over.

        Its snapshot file stays until the next phase run starts: a crash before this end is
        stored resumes ``run`` from that file.
        """
        self.inflight.pop(run.step_id, None)

    def sweep(self) -> None:
        """Remove the snapshot files of phase runs no longer in flight."""
        folder = self.workspace.root / RUNNER_DIR
        if folder.is_symlink() or not folder.is_dir():
            return  # a link is never followed (own_folder refuses it at the next write)
        keep = {f"{step_id}.json" for step_id in self.inflight}
        for path in folder.iterdir():
            if path.name not in keep and path.suffix == ".json" and path.is_file():
                path.unlink(missing_ok=True)

    def save_before(self, run: PhaseRun, found: Snapshot) -> None:
        """Keep ``run``'s starting snapshot in the workspace's runner folder."""
        path = self._snapshot_file(run)
        own_folder(self.workspace.root, path.parent)
        _write_json(path, dict(found))

    def load_before(self, run: PhaseRun) -> Snapshot:
        """``run``'s starting snapshot; a fresh one when its file is gone."""
        try:
            data = json.loads(self._snapshot_file(run).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return snapshot(self.workspace.root)
        if not isinstance(data, dict):
            return snapshot(self.workspace.root)
        return {str(key): str(value) for key, value in data.items()}

    def _snapshot_file(self, run: PhaseRun) -> Path:
        return self.workspace.root / RUNNER_DIR / f"{run.step_id}.json"

    def note_changes(self, task: str, paths: list[str]) -> None:
        """Remember that ``task``'s phases changed ``paths``."""
        known = self.changed.setdefault(task, [])
        known.extend(path for path in paths if path not in known)

    # -- the task list -----------------------------------------------------------------

    @property
    def tasks(self) -> TaskList | None:
        """The task list, once the decomposition set it."""
        return self.state.tasks

    def set_status(self, by: str | None = None, **fields: Any) -> None:
        """Set status fields (the runner's own, not checked like an agent's) as phase ``by``."""
        self.state = rules.with_status(self.state, fields, by=by)

    def clear_status(self, names: frozenset[str]) -> None:
        """Drop status fields, whoever set them."""
        self.state = replace(
            self.state,
            status={k: v for k, v in self.state.status.items() if k not in names},
            status_by={k: v for k, v in self.state.status_by.items() if k not in names},
        )

    # -- stored form -------------------------------------------------------------------

    def snapshot(self) -> Mapping[str, Any]:
        """The strategy state a checkpoint stores; also refreshes the workspace's files."""
        self.write_files()
        return {"workflow": self.to_dict()}

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        state = self.state
        return {
            "name": self.workflow.name,
            "spec": self.spec,
            "workspace": str(self.workspace.root),
            "design_path": self.design_path,
            "input_path": self.input_path,
            "phase": state.phase,
            "status": dict(state.status),
            "status_by": dict(state.status_by),
            "tasks": state.tasks.to_json() if state.tasks is not None else None,
            "attempts": dict(state.attempts),
            "feedback": dict(state.feedback),
            "added": state.added,
            "runs": self.runs,
            "inflight": [run.to_dict() for run in self.inflight.values()],
            "changed": self.changed,
            "violations": self.violations,
            "commits": self.commits,
            "implemented": self.implemented,
            "base_commit": self.base_commit,
            "previous": self.previous,
        }

    def restore(self, data: Mapping[str, Any]) -> None:
        """Put a stored state back (from :meth:`to_dict`).

        Raises:
            CorruptRecordError: it does not decode.
        """
        try:
            tasks = _tasks(data.get("tasks"))
            self.state = WorkflowState(
                phase=str(data["phase"]),
                status=dict(data.get("status") or {}),
                status_by={str(k): str(v) for k, v in (data.get("status_by") or {}).items()},
                tasks=tasks,
                attempts={str(k): int(v) for k, v in (data.get("attempts") or {}).items()},
                feedback={str(k): str(v) for k, v in (data.get("feedback") or {}).items()},
                added=int(data.get("added", 0)),
            )
            self.runs = int(data.get("runs", 0))
            self.inflight = {}
            for raw in data.get("inflight") or []:
                run = PhaseRun(
                    no=int(raw["no"]),
                    phase=str(raw["phase"]),
                    task=raw.get("task"),
                    attempt=int(raw.get("attempt", 1)),
                    turns=list(raw.get("turns") or []),
                )
                self.inflight[run.step_id] = run
            self.changed = {str(k): list(v) for k, v in (data.get("changed") or {}).items()}
            self.violations = {str(k): list(v) for k, v in (data.get("violations") or {}).items()}
            self.commits = {str(k): str(v) for k, v in (data.get("commits") or {}).items()}
            self.implemented = {str(k): int(v) for k, v in (data.get("implemented") or {}).items()}
            self.base_commit = data.get("base_commit")
            previous = data.get("previous")
            self.previous = dict(previous) if isinstance(previous, Mapping) else None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptRecordError(
                f"the stored workflow state does not decode ({type(exc).__name__}: {exc}); "
                "refusing to use it"
            ) from exc
        if self.state.phase not in self.workflow.phases:
            raise CorruptRecordError(
                f"the stored workflow state is in phase {self.state.phase!r}, which the "
                f"workflow {self.workflow.name!r} does not have"
            )

    def write_files(self) -> None:
        """Write ``.taskdecomp/tasks.json`` and ``.taskdecomp/status.json``."""
        folder = own_folder(self.workspace.root, self.workspace.root / STATE_DIR)
        state = self.state
        if state.tasks is not None:
            _write_json(folder / "tasks.json", state.tasks.to_json())
        _write_json(
            folder / "status.json",
            {
                "workflow": self.workflow.name,
                "phase": state.phase,
                "status": dict(state.status),
                "attempts": dict(state.attempts),
            },
        )


def _nothing() -> None:
    return None


def _tasks(raw: Any) -> TaskList | None:
    if raw is None:
        return None
    try:
        return parse_tasks(raw, min_tasks=0, max_tasks=10_000)
    except TaskListError as exc:
        raise CorruptRecordError(f"the stored task list does not decode: {exc}") from exc


def own_folder(root: Path, folder: Path) -> Path:
    """``folder`` (under ``root``), made if missing, unless a folder on the way is a link.

    The runner writes only inside the workspace.

    Raises:
        StopRun: ``out_of_scope_write:runner``.
    """
    parts = folder.relative_to(root).parts
    for end in range(1, len(parts) + 1):
        path = root.joinpath(*parts[:end])
        if path.is_symlink():
            raise StopRun(
                with_detail("out_of_scope_write", "runner"),
                message=f"{str(path)!r} is a link; the workflow's own folders must be folders",
            )
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _write_json(path: Path, data: Any) -> None:
    try:
        write_new(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    except PathRefused as exc:
        raise StopRun(with_detail("out_of_scope_write", "runner"), message=str(exc)) from exc
