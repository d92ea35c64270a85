"""The workflow runner: phases in order of their transitions, and the task loop.

Every phase run is one executor agent with the phase's prompt and a fresh context (for
``implement_task``: the task, the design text relevant to it and its last feedback), whose
tools are the workspace tools, the state tools and the user's tools. A phase run is a step
of the run (``p1``, ``p2``...): traced, journaled and checkpointed like any other, with the
workflow state stored at its start, at its end and with every call its agent makes.

After each phase run, a content snapshot of the workspace is compared with the one taken at
its start. The status fields a phase set in its earlier runs are cleared when it starts, so
a stale ``true`` from an earlier round never picks the next phase; a field another phase
set stays for the transitions that read it.

The **task loop** is the pair ``implement_task`` / ``task_spec_check``: the runner picks the
ready tasks (their dependencies passed), implements and checks each, and sends a failed one
back with its feedback, at most ``max_task_retries`` times (then ``task_failed:<id>``). With
``max_parallel`` above 1, ready tasks whose ``filesAllowed`` cannot overlap run at once,
each with its own agents. Changes outside a task's scope fail its spec check with the paths
listed. A passed task is committed with its id when the workspace is a git repository. When
every task passed, ``task_spec_check``'s transitions pick the next phase with
``taskPassed``, ``hasMoreTasks`` and ``allTasksComplete`` set from the task list.
``completeness_verification`` may add tasks; ``missingWork`` and ``implementationComplete``
are then set from the task list too.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from importlib import resources
from typing import Any

from taskdecomp import stops
from taskdecomp.errors import ConfigError
from taskdecomp.events import StepStarted
from taskdecomp.gateway import LOOP_SCOPE
from taskdecomp.plan import Plan, Step, TaskId
from taskdecomp.run import HistoryEntry
from taskdecomp.runtime import RunContext, StoredState
from taskdecomp.stops import StopRun, with_detail
from taskdecomp.strategies.base import Outcome
from taskdecomp.strategies.replan.agent import ExecutorAgent
from taskdecomp.strategies.workflow import gitops
from taskdecomp.strategies.workflow import state as rules
from taskdecomp.strategies.workflow.definition import Phase
from taskdecomp.strategies.workflow.session import PhaseRun, Session
from taskdecomp.strategies.workflow.snapshot import Changes, changes, out_of_scope, snapshot
from taskdecomp.strategies.workflow.statetools import CURRENT
from taskdecomp.strategies.workflow.tasklist import WorkTask
from taskdecomp.strategies.workflow.workspace import WriteScope
from taskdecomp.telemetry import spans

TASK_PHASE = "implement_task"
CHECK_PHASE = "task_spec_check"
COMPLETENESS_PHASE = "completeness_verification"
NOTES = ".taskdecomp/"
ALWAYS_WRITABLE = (".taskdecomp/*",)
"""The workflow's own notes folder (its state files excepted)."""
DESIGN_CHARS = 6_000
"""Most design text an ``implement_task`` agent is given."""

_AGENT_PROMPT = "prompts/agent.md"
_PACKAGE = "taskdecomp.strategies.workflow"
_WORD = re.compile(r"[a-z0-9_]{3,}")


class Runner:
    """Runs one workflow to its end (or its stop)."""

    def __init__(self, ctx: RunContext, outcome: Outcome, session: Session) -> None:
        self.ctx, self.outcome, self.session = ctx, outcome, session
        self._windows: dict[str, set[str]] = {}
        """For each phase run in flight, the tasks whose lanes ran during it."""
        self._active: set[str] = set()
        """The tasks whose lanes are running."""
        self._system = resources.files(_PACKAGE).joinpath(_AGENT_PROMPT).read_text("utf-8")

    # -- the phase machine ---------------------------------------------------------------

    async def run(self) -> None:
        """Go from the current phase to a terminal one.

        Raises:
            StopRun: ``workflow_stuck:<phase>``, ``task_failed:<id>``, ``max_iterations``,
                ``out_of_scope_write:<phase>``, or any engine stop.
        """
        s, workflow = self.session, self.session.workflow
        self._save()  # the starting state (a given task list, the input) before anything
        while True:
            phase = workflow.phases[s.state.phase]
            if phase.type == "terminal":
                self.outcome.answer = self._answer()
                self._save()
                s.sweep()
                return
            if phase.name != TASK_PHASE:
                resumed = next(
                    (r for r in s.inflight.values() if r.phase == phase.name and r.task is None),
                    None,
                )
                await self._phase(phase, resumed)  # moves on in its last checkpoint
                continue
            await self._task_loop()
            decided_in = CHECK_PHASE if CHECK_PHASE in workflow.phases else TASK_PHASE
            s.state = replace(s.state, phase=self._following(decided_in))
            self._save()

    def _following(self, phase: str) -> str:
        """The phase ``phase``'s transitions lead to now.

        Raises:
            StopRun: ``workflow_stuck:<phase>``: none of them holds.
        """
        s = self.session
        following = s.workflow.next_phase(phase, s.state.guard_state())
        if following is None:
            raise StopRun(
                with_detail("workflow_stuck", phase),
                message=f"no transition of phase {phase!r} holds with status "
                f"{json.dumps(dict(s.state.status), sort_keys=True)}",
            )
        return following

    async def _phase(self, phase: Phase, resumed: PhaseRun | None) -> None:
        """Run a phase outside the task loop; its end is stored with the next phase."""
        s = self.session
        outside: list[str] = []
        stuck: list[StopRun] = []

        def conclude(result: Any, found: Changes) -> None:
            if phase.name == COMPLETENESS_PHASE and s.tasks is not None:
                missing = any(task.status != "passed" for task in s.tasks.tasks)
                s.set_status(phase.name, missingWork=missing, implementationComplete=not missing)
            s.previous = {"name": phase.name, "result": result}
            outside.extend(out_of_scope(found, phase_scope(s, phase, None)))
            if outside:
                return  # the run stops in this phase
            try:
                s.state = replace(s.state, phase=self._following(phase.name))
            except StopRun as stop:
                stuck.append(stop)

        await self._run_phase(phase, None, resumed, conclude=conclude)
        if outside:
            raise StopRun(
                with_detail("out_of_scope_write", phase.name),
                message=f"phase {phase.name!r} changed files it may not write: "
                + ", ".join(outside),
            )
        if stuck:
            raise stuck[0]

    # -- the task loop -------------------------------------------------------------------

    async def _task_loop(self) -> None:
        s = self.session
        if s.tasks is None:
            raise StopRun(
                with_detail("workflow_stuck", TASK_PHASE),
                message="there is no task list: the decomposition never set one with put_tasks",
            )
        for task in s.tasks.tasks:  # passed in this run before a crash could commit them
            if task.status == "passed" and task.id not in s.commits and task.id in s.changed:
                self._commit(task)
        running = self._resumed_lanes()
        try:
            while True:
                for task in self._startable(running):
                    lane = self._lane(task, None)
                    running[task.id] = asyncio.create_task(lane, name=f"task {task.id}")
                if not running:
                    break
                done, _ = await asyncio.wait(running.values(), return_when="FIRST_COMPLETED")
                for task_id in [key for key, job in running.items() if job in done]:
                    running.pop(task_id).result()  # a lane's stop ends the loop
        finally:
            for job in running.values():
                job.cancel()
            if running:
                await asyncio.gather(*running.values(), return_exceptions=True)
        left = [task.id for task in s.tasks.tasks if task.status != "passed"]
        if left:
            raise StopRun(
                with_detail("workflow_stuck", TASK_PHASE),
                message="no task is ready: tasks " + ", ".join(left) + " wait for each other",
            )
        s.set_status(
            CHECK_PHASE if CHECK_PHASE in s.workflow.phases else TASK_PHASE,
            taskPassed=True,
            taskFailed=False,
            hasMoreTasks=False,
            allTasksComplete=True,
        )
        s.clear_status(frozenset({"currentTaskId"}))

    def _resumed_lanes(self) -> dict[str, asyncio.Task[None]]:
        """Lanes for the task phase runs a crash cut off, whatever their task's status.

        A check may have said passed before the crash; its lane finishes it.
        """
        s = self.session
        lanes: dict[str, asyncio.Task[None]] = {}
        for run in list(s.inflight.values()):
            task = s.tasks.get(run.task) if run.task is not None and s.tasks else None
            if task is not None:
                lane = self._lane(task, run)
                lanes[task.id] = asyncio.create_task(lane, name=f"task {task.id}")
        return lanes

    def _startable(self, running: Mapping[str, asyncio.Task[None]]) -> list[WorkTask]:
        s = self.session
        assert s.tasks is not None
        ready = [task for task in s.tasks.ready() if task.id not in running]
        limit = s.options.max_parallel - len(running)
        busy = [s.tasks.get(task_id) for task_id in running]
        chosen: list[WorkTask] = []
        for task in ready:
            if len(chosen) >= limit:
                break
            others = [t for t in busy + chosen if t is not None]
            if all(not _may_overlap(task.files_allowed, t.files_allowed) for t in others):
                chosen.append(task)
        return chosen

    async def _lane(self, task: WorkTask, resumed: PhaseRun | None) -> None:
        self._active.add(task.id)
        for window in self._windows.values():
            window.add(task.id)
        try:
            await self._lane_work(task, resumed)
        finally:
            self._active.discard(task.id)

    async def _lane_work(self, task: WorkTask, resumed: PhaseRun | None) -> None:
        """Implement ``task`` and check it until it passes (or fails too often).

        A phase run's outcome (the changes it made, the check's verdict) is stored with
        the phase run itself, in one checkpoint.
        """
        s, workflow = self.session, self.session.workflow
        implement, check = workflow.phases[TASK_PHASE], workflow.phases.get(CHECK_PHASE)
        while True:
            failed = s.state.attempts.get(task.id, 0)
            if failed > s.options.max_task_retries:
                raise StopRun(
                    with_detail("task_failed", task.id),
                    message=f"task {task.id!r} failed its spec check {failed} times: "
                    f"{s.state.feedback.get(task.id, '')}",
                )
            attempt = failed + 1
            if s.options.max_parallel == 1:
                s.set_status(currentTaskId=task.id)
            done = s.implemented.get(task.id) == attempt  # stored before a crash
            if resumed is None and not done:
                current = s.tasks.get(task.id) if s.tasks else None
                if current is not None and current.status != "in_progress":
                    s.state = rules.update_task(s.state, task.id, "in_progress")
            if (resumed is None and not done) or (resumed and resumed.phase == TASK_PHASE):

                def implemented(_: Any, found: Changes, attempt: int = attempt) -> None:
                    self._note(task, found)
                    s.implemented[task.id] = attempt

                await self._run_phase(implement, task, resumed, attempt, conclude=implemented)
                resumed = None
            verdict: list[bool] = []
            if check is not None:

                def judge(result: Any, found: Changes, verdict: list[bool] = verdict) -> None:
                    self._note(task, found)
                    verdict.append(self._verdict(task, result))
                    s.implemented.pop(task.id, None)

                await self._run_phase(check, task, resumed, attempt, conclude=judge)
                resumed = None
            else:
                s.state = rules.update_task(s.state, task.id, "passed")
                s.implemented.pop(task.id, None)
            if check is None or verdict[0]:
                self._commit(task)
                self._save()
                return

    def _note(self, task: WorkTask, found: Changes) -> None:
        s = self.session
        s.note_changes(task.id, list(found.paths))
        scope = phase_scope(s, s.workflow.phases[TASK_PHASE], task)
        outside = out_of_scope(found, scope)
        if outside:
            known = s.violations.setdefault(task.id, [])
            known.extend(path for path in outside if path not in known)

    def _verdict(self, task: WorkTask, result: Any) -> bool:
        """Whether ``task`` passed its check; a failure is counted, with its feedback."""
        s = self.session
        current = s.tasks.get(task.id) if s.tasks else None
        status = current.status if current is not None else "failed"
        outside = s.violations.pop(task.id, [])
        by = s.state.status_by.get("taskPassed", CHECK_PHASE)  # unknown in older states
        said = (
            s.state.status.get("taskPassed") is True
            and by == CHECK_PHASE
            and s.options.max_parallel == 1
        )
        passed = status == "passed" or (status == "in_progress" and said)
        if passed and not outside:
            s.state = rules.update_task(s.state, task.id, "passed")
            return True
        notes = []
        if status == "failed":
            notes.append(s.state.feedback.get(task.id, ""))
        elif not outside:
            notes.append(_text(result) or "the spec check gave no verdict")
        if outside:
            notes.append("changed files outside filesAllowed: " + ", ".join(outside))
        feedback = "; ".join(note for note in notes if note)
        s.state = rules.update_task(s.state, task.id, "failed", feedback)
        s.state = rules.count_failure(s.state, task.id)
        return False

    def _commit(self, task: WorkTask) -> None:
        """Commit a passed task's own files, once, when the workspace is a repository.

        Its files are the changes ``git status`` shows (ignored files are not) that its
        ``filesAllowed`` match, outside the workflow's notes.

        Raises:
            StopRun: ``commit_failed:<task>``: git refused.
        """
        s = self.session
        if not s.options.commit or task.id in s.commits:
            return
        root = s.workspace.root
        if not gitops.is_repository(root):
            return
        files = WriteScope(files_allowed=task.files_allowed)
        try:
            message = gitops.task_message(task.id, task.title)
            commit = gitops.find_commit(root, message, since=s.base_commit)  # before a crash
            if commit is None:
                paths = [
                    path
                    for path in gitops.changed_paths(root)
                    if not path.startswith(NOTES) and not out_of_scope(_one(path), files)
                ]
                commit = gitops.commit_task(root, task.id, task.title, paths)
        except ConfigError as exc:
            raise StopRun(with_detail("commit_failed", task.id), message=str(exc)) from exc
        if commit is not None:
            s.commits[task.id] = commit

    # -- one phase run -------------------------------------------------------------------

    async def _run_phase(
        self,
        phase: Phase,
        task: WorkTask | None,
        resumed: PhaseRun | None,
        attempt: int = 1,
        *,
        conclude: Callable[[Any, Changes], None] | None = None,
    ) -> tuple[Any, Changes]:
        """Run ``phase`` (for ``task``) with a fresh agent; return its result and changes.

        ``conclude`` records what the run's outcome means for the state; it is stored in
        the same checkpoint as the finished phase run.
        """
        s, ctx = self.session, self.ctx
        if resumed is not None and resumed.phase == phase.name:
            run, before = resumed, s.load_before(resumed)
        else:
            if s.runs >= s.options.max_iterations:
                raise StopRun(
                    stops.MAX_ITERATIONS,
                    message=f"{s.options.max_iterations} phase runs without reaching the end",
                )
            run = s.start_run(phase.name, task.id if task else None, attempt)
            s.state = rules.without_verdicts(s.state, phase.name, _verdict_fields(phase))
            before = snapshot(s.workspace.root)
            s.save_before(run, before)
            self._refresh_plan()
            self._save()
        step = _step(run, phase, task)
        self._windows[run.step_id] = set(self._active)
        ctx.events.emit(StepStarted(run_id=ctx.run_id, step_no=run.no, step=step))
        started = ctx.clock()
        token = CURRENT.set(run)
        looped = LOOP_SCOPE.set(run.step_id)  # a phase run compares only its own calls
        loop = asyncio.get_running_loop()

        def changed() -> None:  # a workspace tool changed a file: reading it again is fine
            current = CURRENT.get()
            if current is not None:
                loop.call_soon_threadsafe(ctx.gateway.forget_calls, current.step_id)

        s.on_change = changed
        try:
            agent = ExecutorAgent(
                ctx,
                progress=lambda: self._request(run, phase, task),
                log=_Log(s, run),
                max_turns=s.options.max_agent_turns,
                prompts=None,
                system=f"{self._system}\n\n{s.workflow.prompts[phase.name]}",
            )
            with spans.step(ctx, run.no, step):
                result = await agent(run.no, step)
        finally:
            LOOP_SCOPE.reset(looped)
            CURRENT.reset(token)
        found = self._own(changes(before, snapshot(s.workspace.root)), run, task)
        scope = phase_scope(self.session, phase, task)
        observation = {
            "phase": phase.name,
            "task": task.id if task else None,
            "attempt": run.attempt,
            "result": result,
            "changed": list(found.paths),
            "out_of_scope": out_of_scope(found, scope),
        }
        if conclude is not None:
            conclude(result, found)

        def ended() -> StoredState:
            s.end_run(run)
            self._refresh_plan()
            state = s.snapshot()
            assert self.outcome.plan is not None  # just refreshed
            return self.outcome.plan, state, ctx.approvals.to_dict()

        ctx.step_finished(run.no, step, observation, started=started, then=ended)
        return result, found

    def _own(self, found: Changes, run: PhaseRun, task: WorkTask | None) -> Changes:
        """``found`` without what other tasks' lanes, running meanwhile, may have written."""
        window = self._windows.pop(run.step_id, set())
        s = self.session
        others = [
            other
            for other in (s.tasks.tasks if s.tasks else ())
            if other.id in window and (task is None or other.id != task.id)
        ]
        if not others:
            return found
        theirs = WriteScope(files_allowed=tuple(g for t in others for g in t.files_allowed))

        def mine(paths: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(p for p in paths if out_of_scope(_one(p), theirs))

        return Changes(
            added=mine(found.added), modified=mine(found.modified), deleted=mine(found.deleted)
        )

    def _request(self, run: PhaseRun, phase: Phase, task: WorkTask | None) -> dict[str, Any]:
        """What the phase's agent sees (besides its step, tools and turns)."""
        s = self.session
        payload: dict[str, Any] = {
            "workflow": s.workflow.name,
            "phase": phase.name,
            "phase_type": phase.type,
            "description": phase.description,
            "design_path": s.design_path,
            "input_path": s.input_path,
            "writable": list(phase_scope(self.session, phase, task).globs),
        }
        if task is not None:
            current = s.tasks.get(task.id) if s.tasks else None
            payload["task"] = (current or task).to_json()
            payload["attempt"] = run.attempt
            payload["feedback"] = s.state.feedback.get(task.id) if run.attempt > 1 else None
            payload["changes"] = s.changed.get(task.id, [])
            if phase.name == TASK_PHASE:
                payload["design"] = self._design_for(task)
                return payload
        payload["status"] = dict(s.state.status)
        if s.tasks is not None:
            payload["tasks"] = [
                {"id": t.id, "title": t.title, "status": t.status, "dependsOn": list(t.depends_on)}
                for t in s.tasks.tasks
            ]
        payload["previous_phase"] = s.previous
        return payload

    def _design_for(self, task: WorkTask) -> str:
        """The sections of the design document that share the most words with the task."""
        s = self.session
        if s.design_path is None:
            return ""
        try:
            text = s.workspace.resolve(s.design_path).read_text(encoding="utf-8")
        except (OSError, UnicodeError, ValueError):
            return ""
        if len(text) <= DESIGN_CHARS:
            return text
        sections = re.split(r"\n(?=#)", text)
        words = set(_WORD.findall(f"{task.title} {task.summary}".lower()))
        ranked = sorted(
            range(len(sections)),
            key=lambda i: -len(words & set(_WORD.findall(sections[i].lower()))),
        )
        chosen: list[int] = []
        size = 0
        for index in ranked:
            if size + len(sections[index]) > DESIGN_CHARS:
                continue
            chosen.append(index)
            size += len(sections[index])
        return "\n".join(sections[i] for i in sorted(chosen)) or text[:DESIGN_CHARS]

    # -- checkpoints ---------------------------------------------------------------------

    def _refresh_plan(self) -> None:
        """The run's plan: one step per phase run, finished or in flight."""
        s = self.session
        finished = [entry.plan_step for entry in sorted(self.ctx.history, key=_no)]
        known = {step.id for step in finished}
        phases = s.workflow.phases
        flying = [
            _step(run, phases[run.phase], s.tasks.get(run.task) if run.task and s.tasks else None)
            for run in sorted(s.inflight.values(), key=lambda r: r.no)
            if run.step_id not in known
        ]
        self.outcome.plan = Plan(steps=tuple(finished + flying))

    def _save(self) -> None:
        self._refresh_plan()
        snapshot_state = self.session.snapshot()
        if self.ctx.journal is not None and self.outcome.plan is not None:
            self.ctx.journal.state_saved(
                self.outcome.plan, snapshot_state, approvals=self.ctx.approvals.to_dict()
            )

    def _answer(self) -> str:
        s = self.session
        tasks = s.tasks.tasks if s.tasks is not None else ()
        passed = sum(task.status == "passed" for task in tasks)
        return (
            f"workflow {s.workflow.name!r} reached {s.state.phase!r} after {s.runs} phase runs; "
            f"{passed} of {len(tasks)} tasks passed"
        )


def phase_scope(s: Session, phase: Phase, task: WorkTask | None) -> WriteScope:
    """What a run of ``phase`` (for ``task``) may write."""
    own = tuple(dict.fromkeys(phase.allowed_writes + ALWAYS_WRITABLE))
    if phase.type != "execute":
        return WriteScope(allowed_writes=own)
    if task is not None:
        return WriteScope(files_allowed=task.files_allowed, allowed_writes=own)
    if phase.name == TASK_PHASE or s.tasks is None:
        return WriteScope(allowed_writes=own)
    every = tuple(dict.fromkeys(g for t in s.tasks.tasks for g in t.files_allowed))
    return WriteScope(files_allowed=every, allowed_writes=own)  # e.g. code_fix


def scope_now(s: Session) -> WriteScope:
    """What the calling phase run may write (the workspace tools ask at every call)."""
    run = CURRENT.get()
    if run is None:
        return WriteScope()
    task = s.tasks.get(run.task) if run.task is not None and s.tasks else None
    return phase_scope(s, s.workflow.phases[run.phase], task)


class _Log:
    """The agent's turn log for one phase run; each turn is stored with its call."""

    def __init__(self, session: Session, run: PhaseRun) -> None:
        self._session, self._run = session, run

    def turns(self, step_id: str) -> list[dict[str, Any]]:
        return self._run.turns

    def finished(self, step_id: str) -> None:
        """Nothing: the runner ends the phase run after its snapshot."""

    def snapshot(self) -> Mapping[str, Any]:
        return self._session.snapshot()


def _step(run: PhaseRun, phase: Phase, task: WorkTask | None) -> Step:
    title = phase.name if task is None else f"{phase.name} {task.id}"
    if task is not None and run.attempt > 1:
        title += f" (attempt {run.attempt})"
    return Step(id=TaskId(run.step_id), title=title, instruction=phase.description or phase.name)


def _verdict_fields(phase: Phase) -> frozenset[str]:
    """The status fields ``phase``'s own transitions read (its verdict)."""
    return frozenset(
        path.removeprefix("status.")
        for transition in phase.transitions
        if transition.guard is not None
        for path in transition.guard.paths()
        if path.startswith("status.")
    )


def _may_overlap(left: tuple[str, ...], right: tuple[str, ...]) -> bool:
    """Whether some path could match a glob of each (a cautious test: prefixes only)."""
    return any(_prefixes_meet(a, b) for a in left for b in right)


def _prefixes_meet(a: str, b: str) -> bool:
    fixed_a, fixed_b = _fixed(a), _fixed(b)
    if fixed_a == a and fixed_b == b:
        return a == b
    if fixed_a == a:
        return a.startswith(fixed_b)
    if fixed_b == b:
        return b.startswith(fixed_a)
    return fixed_a.startswith(fixed_b) or fixed_b.startswith(fixed_a)


def _fixed(glob: str) -> str:
    """The part of ``glob`` before its first wildcard."""
    match = re.search(r"[*?\[]", glob)
    return glob if match is None else glob[: match.start()]


def _one(path: str) -> Changes:
    return Changes(added=(path,), modified=(), deleted=())


def _no(entry: HistoryEntry) -> int:
    return int(entry.step_no)


def _text(result: Any) -> str:
    if result is None:
        return ""
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
