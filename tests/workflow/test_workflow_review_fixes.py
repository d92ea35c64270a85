"""What a review of the workflow strategy found wrong, each held by a test of the right way.

1. A task's commit takes what git sees: a git-ignored file or a scratch file made and
   deleted again does not fail the commit, nor end up in it.
2. Lanes running at once each have their own loop detection.
3. In parallel, one lane's ``taskPassed`` never passes another lane's task.
4. No write goes through a link: not at a write's temporary name, not in the runner's own
   folders (the run stops instead, with nothing outside deleted or overwritten).
5. A run killed in the windows around its checkpoints resumes without losing its task list
   or doing a phase run, or an attempt, again.
6. A check counts one failed attempt however often its agent says so.
7. A task passed before the run is never committed with the user's changes, and an agent's
   new tasks start pending.
8. A file named like a git pathspec (``:!nothing``) is committed as a file.
9. ``replace_in_file`` refuses a replacement whose new text holds the old one.
10. The runner's files are refused whatever their case.

Several tests make agents of lanes running at once wait for each other (:class:`Meeting`),
so what happens in between is the same at every run.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from taskdecomp import tool
from taskdecomp.events import Event, StepFinished, StepStarted
from taskdecomp.models import ScriptedModel
from taskdecomp.run import RunResult
from taskdecomp.store import open_store
from taskdecomp.store.base import Store
from taskdecomp.strategies.workflow.api import run_workflow, workflow_view
from taskdecomp.strategies.workflow.options import WorkflowOptions
from taskdecomp.tools import ToolSpec
from tests.clitools import EXE
from tests.workflow.scenario import (
    ADDED,
    FILES,
    TASKS,
    call,
    finish,
    first,
    git,
    make_workspace,
    rules,
)
from tests.workflow.test_workflow_resume import LEASE_SECONDS, calls_by_step, cli_json
from tests.workflow.test_workflow_run import model, run

ALL_COMMITS = ["T5: exports", "T4: div", "T3: mul", "T2: sub", "T1: add", "start"]
"""The scenario's commits, newest first."""

Rules = list[tuple[str, Any]]
"""Rules tried before the scenario's."""


def at(
    phase: str, task_id: str | None = None, *, attempt: int | None = None, turn: int | None = None
) -> str:
    """A rule's pattern: a request of ``phase`` (for ``task_id``, its ``attempt``), at the
    turn with ``turn`` turns left (30 at the first)."""
    pattern = f'"phase": "{phase}"'
    if task_id is not None:
        pattern += f'.*"task": {{"id": "{task_id}"'
    if attempt is not None:
        pattern += f'.*"attempt": {attempt}'
    if turn is not None:
        pattern += f".*{first(turn)}"
    return pattern


def with_tasks(tasks: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """A rule: the decomposition puts ``tasks`` instead of the scenario's."""
    return at("task_decomposition", turn=30), call("put_tasks", tasks=tasks)


def files_of(task_id: str, *globs: str) -> list[dict[str, Any]]:
    """The scenario's tasks, with ``task_id`` allowed ``globs`` instead of its file."""
    return [{**t, "filesAllowed": list(globs)} if t["id"] == task_id else t for t in TASKS]


def answers(scripted: ScriptedModel, tool_name: str, **args: Any) -> list[Any]:
    """What each call of ``tool_name`` with ``args`` was answered (each call once)."""
    found: dict[tuple[str, int], Any] = {}
    for request in scripted.calls:
        shown = json.loads(request.messages[-1]["content"])
        run = json.dumps(
            [shown["phase"], (shown.get("task") or {}).get("id"), shown.get("attempt")]
        )
        for index, turn in enumerate(shown.get("turns", [])):
            if turn["call"] == {"tool": tool_name, "args": args}:
                found[(run, index)] = turn["result"]
    return list(found.values())


def committed(ws: Path, subject: str) -> list[str]:
    """The files of the commit whose subject is ``subject``."""
    log = git(ws, "log", "--format=%H %s").splitlines()
    (commit,) = [line.split(" ")[0] for line in log if line.partition(" ")[2] == subject]
    return git(ws, "show", "--name-only", "--format=", commit).split()


def subjects(ws: Path) -> list[str]:
    """The workspace's commit subjects, newest first."""
    return git(ws, "log", "--format=%s").splitlines()


def phase_runs(result: RunResult) -> list[tuple[str, str | None, int]]:
    """The run's phase runs: phase, task, attempt."""
    return [
        (e.observation["phase"], e.observation["task"], e.observation["attempt"])
        for e in result.history
    ]


def tasks_table(store: Store, result: RunResult) -> dict[str, dict[str, Any]]:
    """The stored run's tasks (``workflow show``'s table) by id."""
    view = workflow_view(store.load_run(result.run_id))
    assert view is not None
    return {task["id"]: task for task in view["tasks"]}


class Meeting:
    """Makes agents of lanes running at once wait for each other.

    A moment is a name: ``started TITLE`` and ``ended TITLE`` come with each phase run
    (``TITLE`` as ``implement_task T2``; ``(attempt N)`` follows from the second attempt
    on), and ``say`` makes any other. ``wait_for`` blocks until its moment came.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._moments: defaultdict[str, threading.Event] = defaultdict(threading.Event)
        self._titles: dict[str, str] = {}

    def moment(self, name: str) -> threading.Event:
        with self._lock:
            return self._moments[name]

    def on_event(self, event: Event) -> None:
        if isinstance(event, StepStarted):
            self._titles[event.step.id] = event.step.title
            self.moment(f"started {event.step.title}").set()
        elif isinstance(event, StepFinished) and event.entry.step_id in self._titles:
            self.moment(f"ended {self._titles[event.entry.step_id]}").set()

    def tools(self) -> list[ToolSpec]:
        @tool
        def wait_for(moment: str) -> dict[str, bool]:
            """Wait until ``moment`` came (a minute at most)."""
            return {"ok": self.moment(moment).wait(timeout=60)}

        @tool
        def say(moment: str) -> dict[str, bool]:
            """Make ``moment`` come."""
            self.moment(moment).set()
            return {"ok": True}

        return [wait_for, say]


# -- 1. commits take what git sees -------------------------------------------------------


def ignored_file(ws: Path) -> Rules:
    """T1 writes calc/add.log too, which git ignores."""
    (ws / ".git" / "info" / "exclude").write_text("*.log\n")
    log = call("write_file", path="calc/add.log", content="trace\n")
    return [with_tasks(files_of("T1", "calc/add*")), (at("implement_task", "T1", turn=29), log)]


def deleted_scratch(ws: Path) -> Rules:
    """T2's first attempt writes a scratch file, never committed; its second deletes it."""
    scratch = "calc/sub_scratch.py"
    return [
        with_tasks(files_of("T2", "calc/sub*")),
        (
            at("implement_task", "T2", attempt=1, turn=29),
            call("write_file", path=scratch, content="x = 1\n"),
        ),
        (at("implement_task", "T2", attempt=2, turn=29), call("delete_file", path=scratch)),
    ]


@pytest.mark.parametrize(
    ("make", "task_id", "left"),
    [(ignored_file, "T1", "calc/add.log"), (deleted_scratch, "T2", None)],
    ids=["ignored-file", "deleted-scratch-file"],
)
def test_a_commit_takes_only_what_git_tracks(
    tmp_path: Path, make: Callable[[Path], Rules], task_id: str, left: str | None
) -> None:
    ws, design = make_workspace(tmp_path)
    result = run(ws, design, model(make(ws)))

    assert result.stop_reason == "success", result.message
    assert subjects(ws) == ALL_COMMITS
    title = next(t["title"] for t in TASKS if t["id"] == task_id)
    assert committed(ws, f"{task_id}: {title}") == [FILES[task_id][0]]
    if left is not None:  # kept, never committed
        assert (ws / left).is_file()
        assert git(ws, "log", "--all", "--format=%H", "--", left) == ""
    else:
        assert not (ws / "calc" / "sub_scratch.py").exists()
    assert git(ws, "status", "--porcelain", "--", "calc").strip() == ""


# -- 2. loop detection per lane ------------------------------------------------------------


def test_lanes_running_at_once_each_read_a_file_once(tmp_path: Path) -> None:
    ws, design = make_workspace(tmp_path)
    meeting = Meeting()
    read = call("read_file", path="README.md")
    extra = []
    for task_id, other in (("T1", "T2"), ("T2", "T1")):  # both started before either reads
        path, content = FILES[task_id]
        both = f"started implement_task {other}"
        extra += [
            (at("implement_task", task_id, attempt=1, turn=30), call("wait_for", moment=both)),
            (at("implement_task", task_id, attempt=1, turn=29), read),
            (
                at("implement_task", task_id, attempt=1, turn=28),
                call("write_file", path=path, content=content),
            ),
        ]
    scripted = model(extra)
    result = run(
        ws,
        design,
        scripted,
        tools=meeting.tools(),
        on_event=meeting.on_event,
        options=WorkflowOptions(min_tasks=3, max_parallel=2),
    )

    assert result.stop_reason == "success", result.message
    reads = answers(scripted, "read_file", path="README.md")
    assert len(reads) == 2 and all(answer["ok"] for answer in reads)
    for task_id in ("T1", "T2"):  # each lane waited for the other: they ran at once
        waited = answers(scripted, "wait_for", moment=f"started implement_task {task_id}")
        assert waited == [{"ok": True}]
    assert subjects(ws) == ALL_COMMITS


# -- 3. a lane's verdict is its own --------------------------------------------------------


def test_a_lanes_task_passed_does_not_pass_another_lanes_task(tmp_path: Path) -> None:
    ws, design = make_workspace(tmp_path)
    meeting = Meeting()
    t1_check, t2_check = (at("task_spec_check", t, attempt=1) for t in ("T1", "T2"))
    extra = [
        # T1's check passes it, as its prompt says, while T2's check is under way...
        (f"{t1_check}.*{first(30)}", call("wait_for", moment="started task_spec_check T2")),
        (f"{t1_check}.*{first(29)}", call("update_task", task_id="T1", status="passed")),
        (f"{t1_check}.*{first(28)}", call("set_status", fields={"taskPassed": True})),
        (f"{t1_check}.*{first(27)}", call("say", moment="T1 said taskPassed")),
        (f"{t1_check}.*{first(26)}", call("wait_for", moment="ended task_spec_check T2")),
        # ...which finds T2 wrong and says so, without calling update_task
        (f"{t2_check}.*{first(30)}", call("wait_for", moment="T1 said taskPassed")),
        (f"{t2_check}.*{first(29)}", finish("sub(3, 1) gives 4")),
    ]
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    scripted = model(extra)
    result = run(
        ws,
        design,
        scripted,
        tools=meeting.tools(),
        on_event=meeting.on_event,
        store=store,
        options=WorkflowOptions(min_tasks=3, max_parallel=2),
    )

    assert result.stop_reason == "success", result.message
    waits = ("started task_spec_check T2", "T1 said taskPassed", "ended task_spec_check T2")
    for moment in waits:  # in this order
        assert answers(scripted, "wait_for", moment=moment) == [{"ok": True}]
    tasks = tasks_table(store, result)
    assert (tasks["T1"]["attempts"], tasks["T2"]["attempts"]) == (0, 1)
    assert tasks["T2"]["feedback"] == "sub(3, 1) gives 4"
    runs = phase_runs(result)
    assert ("implement_task", "T2", 2) in runs and ("implement_task", "T1", 2) not in runs
    assert (ws / "calc" / "sub.py").read_text() == FILES["T2"][1]
    assert committed(ws, "T2: sub") == ["calc/sub.py"]


# -- 4. no write through a link ------------------------------------------------------------


def test_a_link_at_a_writes_temporary_name_is_not_followed(tmp_path: Path) -> None:
    ws, design = make_workspace(tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    os.symlink(outside, ws / "calc" / ".add.py.taskdecomp-tmp")
    result = run(ws, design, model())

    assert result.stop_reason == "success", result.message
    assert outside.read_text() == "precious\n"
    add = ws / "calc" / "add.py"
    assert not add.is_symlink() and add.read_text() == FILES["T1"][1]
    assert committed(ws, "T1: add") == ["calc/add.py"]


def victims(tmp_path: Path) -> dict[str, str]:
    """A folder outside the workspace, with a snapshot file's name among its files."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "p9.json").write_text("{}\n")
    (elsewhere / "settings.json").write_text('{"keep": true}\n')
    (elsewhere / "bashrc").write_text("export PATH=/usr/bin\n")
    return contents(elsewhere)


def contents(folder: Path) -> dict[str, str]:
    """Each file under ``folder`` (links not followed) and its text."""
    return {
        str(path.relative_to(folder)): path.read_text()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


def link_runner_folder(ws: Path, elsewhere: Path) -> Rules:
    """``.taskdecomp/run`` links outside before the run; so do the state files' temporary
    names (the current ones and the ones they had)."""
    (ws / ".taskdecomp").mkdir()
    os.symlink(elsewhere, ws / ".taskdecomp" / "run")
    for name in ("tasks.json", "status.json"):
        for temporary in (f".{name}.tmp", f".{name}.taskdecomp-tmp"):
            os.symlink(elsewhere / "bashrc", ws / ".taskdecomp" / temporary)
    return []


def link_notes_folder(ws: Path, elsewhere: Path) -> Rules:
    """A tool T1's agent calls swaps ``.taskdecomp`` for a link outside."""
    return [(at("implement_task", "T1", turn=29), call("relink"))]


@pytest.mark.parametrize(
    ("make", "link"),
    [(link_runner_folder, ".taskdecomp/run"), (link_notes_folder, ".taskdecomp")],
    ids=["runner-folder-linked-before", "notes-folder-linked-meanwhile"],
)
def test_the_runner_writes_nothing_through_a_link_in_its_folders(
    tmp_path: Path, make: Callable[[Path, Path], Rules], link: str
) -> None:
    ws, design = make_workspace(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    before = victims(tmp_path)

    @tool(side_effects="idempotent")
    def relink() -> dict[str, bool]:
        """Replace the workflow's notes folder by a link (a shell tool could)."""
        if not (ws / ".taskdecomp").is_symlink():
            shutil.rmtree(ws / ".taskdecomp")
            os.symlink(elsewhere, ws / ".taskdecomp")
        return {"ok": True}

    result = run(ws, design, model(make(ws, elsewhere)), tools=[relink])

    assert result.stop_reason == "out_of_scope_write:runner", result.message
    assert f"{str(ws / link)!r} is a link" in (result.message or "")
    assert contents(elsewhere) == before  # nothing deleted, overwritten or added
    assert (elsewhere / "bashrc").read_text() == "export PATH=/usr/bin\n"


# -- 5. resume windows ---------------------------------------------------------------------

KILL_AT = '''"""The command line, killed (SIGKILL) {window}."""

import os
import signal
import sys
from pathlib import Path

from taskdecomp.cli import main
from taskdecomp.durable import Journal
from taskdecomp.strategies.workflow.runner import Runner
from taskdecomp.strategies.workflow.session import Session

MARKER = Path({marker!r})
WINDOW = {window!r}
run, start_run = Runner.run, Session.start_run
step_done, finished = Journal.step_done, Journal.finished


def die():
    MARKER.touch()
    os.kill(os.getpid(), signal.SIGKILL)


async def run_or_die(self):
    if WINDOW == "as the runner starts":
        die()
    return await run(self)


def start_run_or_die(self, *args, **kwargs):
    if WINDOW == "before the first phase run":
        die()
    return start_run(self, *args, **kwargs)


def step_done_then_die(self, entry, **kwargs):
    step_done(self, entry, **kwargs)
    if WINDOW == "once a phase run of " + str(entry.observation["phase"]) + " is stored":
        die()


def finished_or_die(self, result, **kwargs):
    if WINDOW == "as it stores its stop " + str(result.stop_reason).partition(":")[0]:
        die()
    return finished(self, result, **kwargs)


Runner.run, Session.start_run = run_or_die, start_run_or_die
Journal.step_done, Journal.finished = step_done_then_die, finished_or_die
main(sys.argv[1:])
'''

PASSED_RUNS = [
    ("implement_task", "T1", 1, ["calc/add.py"]),
    ("task_spec_check", "T1", 1, []),
    ("completeness_verification", None, 1, []),
]
"""The phase runs of the ``tasks`` workflow over the scenario's task T1, never killed."""

FAILED_RUNS = [
    ("implement_task", "T1", 1, ["calc/add.py"]),
    ("task_spec_check", "T1", 1, []),
    ("implement_task", "T1", 2, []),
    ("task_spec_check", "T1", 2, []),
]
"""The same, when every check fails T1 and one retry is allowed."""

WINDOWS = {
    "first-checkpoint-as-the-runner-starts": ("as the runner starts", PASSED_RUNS),
    "first-checkpoint-before-the-first-phase-run": ("before the first phase run", PASSED_RUNS),
    "after-a-phase-step": (
        "once a phase run of completeness_verification is stored",
        PASSED_RUNS,
    ),
    "before-the-check": ("once a phase run of implement_task is stored", PASSED_RUNS),
    "at-task-failed": ("as it stores its stop task_failed", FAILED_RUNS),
}
"""Where the child is killed, and the phase runs the run has in the end."""


def start_killed(tmp_path: Path, capsys: pytest.CaptureFixture[str], window: str) -> str:
    """Run the ``tasks`` workflow over the scenario's T1 in a child killed ``window``;
    the run's id."""
    ws, _ = make_workspace(tmp_path)
    (tmp_path / "tasks.json").write_text(json.dumps({"schemaVersion": 1, "tasks": TASKS[:1]}))
    failing = window.endswith("task_failed")
    script = [(at("completeness_verification"), finish("complete"))]
    if failing:
        fail = call("update_task", task_id="T1", status="failed", feedback="still wrong")
        script.append((at("task_spec_check", "T1", turn=30), fail))
    entries = [{"match": m, "response": r} for m, r in script]
    (tmp_path / "script.json").write_text(json.dumps({"rules": [*entries, *rules()]}))
    killer = tmp_path / "kill_at.py"
    killer.write_text(KILL_AT.format(window=window, marker=str(tmp_path / "killed")))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    child = subprocess.run(
        [
            sys.executable, str(killer), "workflow", "run", "tasks", "--workspace", str(ws),
            "--tasks", str(tmp_path / "tasks.json"), "--model", f"scripted:{tmp_path}/script.json",
            "--max-task-retries", "1" if failing else "3", "--db", db, "--durability", "sync",
            "--json",
        ],
        env={**os.environ, "TASKDECOMP_LEASE_SECONDS": LEASE_SECONDS},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert child.returncode == -signal.SIGKILL, (child.returncode, child.stderr)
    assert (tmp_path / "killed").exists()
    (stored,) = cli_json(capsys, "runs", "--db", db)
    assert stored["status"] == "running"
    return str(stored["run_id"])


def resume_in_child(capsys: pytest.CaptureFixture[str], db: str, run_id: str) -> dict[str, Any]:
    """Resume the run in a child (its killed owner's lease is taken over at once); its result."""
    done = subprocess.run(
        [str(EXE), "resume", run_id, "--db", db, "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr  # ended: done, or stopped
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize(("window", "expected"), WINDOWS.values(), ids=WINDOWS.keys())
def test_a_run_killed_near_a_checkpoint_resumes_without_a_trace(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    window: str,
    expected: list[tuple[str, str | None, int, list[str]]],
) -> None:
    run_id = start_killed(tmp_path, capsys, window)
    (tmp_path / "tasks.json").unlink()  # the resume has only what the run stored
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    result = resume_in_child(capsys, db, run_id)

    view = cli_json(capsys, "workflow", "show", run_id, "--db", db)
    runs = [(p["phase"], p["task"], p["attempt"], p["changed"]) for p in view["phases"]]
    assert runs == expected, (result["stop_reason"], result["message"])
    stored = cli_json(capsys, "show", run_id, "--db", db)
    ws = tmp_path / "ws"
    (t1,) = view["tasks"]
    if expected is FAILED_RUNS:
        assert result["stop_reason"] == "task_failed:T1"
        assert "failed its spec check 2 times: still wrong" in result["message"]
        assert t1["attempts"] == 2
        calls = {1: ["write_file"], 2: ["update_task"], 3: ["write_file"], 4: ["update_task"]}
        assert calls_by_step(stored) == calls
        assert subjects(ws) == ["start"]
    else:
        assert (result["status"], result["stop_reason"]) == ("ok", "success"), result["message"]
        assert (t1["status"], t1["attempts"]) == ("passed", 0)
        assert calls_by_step(stored) == {1: ["write_file"], 2: ["update_task"]}
        assert subjects(ws) == ["T1: add", "start"]
        assert committed(ws, "T1: add") == ["calc/add.py"]


# -- 6. one failed attempt per check -------------------------------------------------------


def test_a_check_saying_failed_four_times_counts_one_attempt(tmp_path: Path) -> None:
    ws, design = make_workspace(tmp_path)
    check = at("task_spec_check", "T2", attempt=1)
    extra = [
        (
            f"{check}.*{first(30 - said)}",
            call("update_task", task_id="T2", status="failed", feedback=f"problem {said}"),
        )
        for said in range(4)
    ]
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    result = run(ws, design, model(extra), store=store)  # max_task_retries: 3

    assert result.stop_reason == "success", result.message
    tasks = tasks_table(store, result)
    assert (tasks["T2"]["attempts"], tasks["T2"]["feedback"]) == (1, "problem 3")
    implemented = [attempt for phase, task, attempt in phase_runs(result) if task == "T2"]
    assert implemented == [1, 1, 2, 2]  # implement and check, twice
    assert subjects(ws) == ALL_COMMITS


# -- 7. passed only by a check in this run -------------------------------------------------


def test_a_task_given_as_passed_is_not_committed(tmp_path: Path) -> None:
    ws, _ = make_workspace(tmp_path)
    mine = "# the user's unfinished work, never committed\n"
    (ws / "calc" / "add.py").write_text(mine)  # T1's file
    given = [{**TASKS[0], "status": "passed"}, TASKS[1]]
    (tmp_path / "tasks.json").write_text(json.dumps({"schemaVersion": 1, "tasks": given}))
    scripted = model([(at("completeness_verification"), finish("complete"))])
    result = asyncio.run(
        run_workflow(
            "tasks",
            workspace=ws,
            model=scripted,
            tasks=tmp_path / "tasks.json",
            options=WorkflowOptions(min_tasks=1),
        )
    )

    assert result.stop_reason == "success", result.message
    assert subjects(ws) == ["T2: sub", "start"]
    assert committed(ws, "T2: sub") == ["calc/sub.py"]
    assert (ws / "calc" / "add.py").read_text() == mine
    assert git(ws, "status", "--porcelain", "--", "calc").splitlines() == ["?? calc/add.py"]
    assert not any('"task": {"id": "T1"' in request.text() for request in scripted.calls)


def test_an_agents_new_tasks_start_pending(tmp_path: Path) -> None:
    ws, design = make_workspace(tmp_path)
    passed = [{**t, "status": "passed"} for t in TASKS]
    scripted = model(
        [
            with_tasks(passed),
            (at("completeness_verification") + '.*"id": "T5"', finish("complete")),
            (
                at("completeness_verification", turn=30),
                call("add_tasks", tasks=[{**ADDED[0], "status": "passed"}]),
            ),
        ]
    )
    result = run(ws, design, scripted)

    assert result.stop_reason == "success", result.message
    implemented = [task for phase, task, _ in phase_runs(result) if phase == "implement_task"]
    assert sorted(set(implemented)) == ["T1", "T2", "T3", "T4", "T5"]
    for path, content in FILES.values():
        assert (ws / path).read_text() == content
    assert subjects(ws) == ALL_COMMITS


# -- 8. paths are literal ------------------------------------------------------------------


def test_a_file_named_like_a_pathspec_is_committed_as_a_file(tmp_path: Path) -> None:
    ws, design = make_workspace(tmp_path)
    (ws / "notes.txt").write_text("the user's, never committed\n")
    write = call("write_file", path=":!nothing", content="x\n")
    scripted = model(
        [with_tasks(files_of("T1", ":*")), (at("implement_task", "T1", turn=30), write)]
    )
    result = run(ws, design, scripted)

    assert result.stop_reason == "success", result.message
    assert committed(ws, "T1: add") == [":!nothing"]
    assert git(ws, "status", "--porcelain", "--", "notes.txt").splitlines() == ["?? notes.txt"]


# -- 9. replacements a replay can recognise ------------------------------------------------


def test_a_replacement_holding_its_old_text_is_refused(tmp_path: Path) -> None:
    ws, design = make_workspace(tmp_path)
    wrap = call("replace_in_file", path="calc/add.py", old="a + b", new="(a + b)")
    scripted = model([(at("implement_task", "T1", turn=29), wrap)])
    result = run(ws, design, scripted)

    assert result.stop_reason == "success", result.message
    assert answers(scripted, "replace_in_file", **wrap["args"]) == [
        {
            "ok": False,
            "error": "the new text contains the old text; write the whole file with write_file",
        }
    ]
    assert (ws / "calc" / "add.py").read_text() == FILES["T1"][1]


# -- 10. the runner's files in any case ----------------------------------------------------


def test_the_runners_files_are_refused_in_any_case(tmp_path: Path) -> None:
    ws, design = make_workspace(tmp_path)
    writes = [
        call("write_file", path=".taskdecomp/RUN/p3.json", content="{}\n"),
        call("write_file", path=".TASKDECOMP/tasks.json", content="{}\n"),
    ]
    scripted = model(
        [
            with_tasks(files_of("T1", "calc/add.py", ".taskdecomp/RUN/**", ".TASKDECOMP/**")),
            (at("implement_task", "T1", turn=29), writes[0]),
            (at("implement_task", "T1", turn=28), writes[1]),
        ]
    )
    result = run(ws, design, scripted)

    assert result.stop_reason == "success", result.message
    for write in writes:
        (answer,) = answers(scripted, "write_file", **write["args"])
        assert answer == {
            "ok": False,
            "refused": f"{write['args']['path']!r} is not a file this phase may write",
        }
    assert not (ws / ".taskdecomp" / "RUN").exists()
    assert not (ws / ".TASKDECOMP").exists()
