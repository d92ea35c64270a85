"""``tree`` runs killed with SIGKILL and resumed from a new process, on SQLite and PostgreSQL.

A stored plan, "Ship the release", has three tasks: "Gather notes" (a read), "Build
artifacts" (which the executor asks to split: "Compile code" with an idempotent write and
"Package build" with a read), and "Publish release" (an ``unsafe`` charge, after the build).
Run as needed, or split upfront ("Publish release" then becomes "Upload files" and
"Announce release"), it ends with the root's roll-up, "Release shipped".

A child process (``tree_crash/child.py``) runs it and kills itself at a chosen point:
inside a leaf's tool call, right after a split was written, inside and right after a
roll-up, inside, between the writes of and right after the upfront decomposition, at and
before the unsafe call, while an approved split runs, inside and right after a second split
of a task whose subtask failed (its children then replace the old ones in the stored tree),
as a failed task fails its parent, and at event counts drawn from a seeded RNG. Another new
process then resumes it (the library's ``resume_sync`` in the test process, which never ran
the run, or ``taskdecomp resume`` on the command line). The tools write every call to a
ledger and the model writes every call down by phase and node, so the test sees what the
resume did again: what the store had finished at the kill is never run again, a split on
record is never asked for again nor its node carried out as a leaf, the ``unsafe`` call
happens at most once, a split waits for approval and the node budget holds whatever the
kill cut off, and the run ends ``ok`` with the root's roll-up as its answer (or, the unsafe
call in doubt, stops for a human; or, a task failed for good, stops naming it). Runs
checkpoint ``sync`` unless a test says ``async`` (the default, which queues checkpoints: a
split must still be on record before the decomposer writes its children).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from taskdecomp import resume_sync
from taskdecomp.run import RunId
from taskdecomp.store import open_store
from taskdecomp.store.trees import TreeRepository
from taskdecomp.strategies.tree.state import TreeState
from taskdecomp.strategies.tree.view import run_tree
from taskdecomp.tree import NewNode, NodeId, PlanTree, PlanTreeId
from tests.store.conftest import pg_url  # noqa: F401  (a fixture, used by name)
from tests.strategies.tree_crash.model import LoggedModel

HERE = Path(__file__).parent / "tree_crash"
SEED = 20260502
TIMEOUT = 120

ROOT = "Ship the release"
NOTES, BUILD, PUBLISH = "Gather notes", "Build artifacts", "Publish release"
COMPILE, PACKAGE = "Compile code", "Package build"
COMPILE2, PACKAGE2 = "Compile again", "Package again"
UPLOAD, ANNOUNCE = "Upload files", "Announce release"
ANSWER = "Release shipped"
LEAVES = {
    NOTES: ("look", "notes"),
    COMPILE: ("put", "compile"),
    PACKAGE: ("look", "package"),
    PUBLISH: ("charge", "publish"),
    UPLOAD: ("look", "upload"),
    ANNOUNCE: ("look", "announce"),
    COMPILE2: ("look", "compile2"),
    PACKAGE2: ("look", "package2"),
}
"""Each leaf's one tool call: the tool and its key."""
SPLITS = {BUILD: (COMPILE, PACKAGE), PUBLISH: (UPLOAD, ANNOUNCE)}
"""The decomposer's children for each task it is asked about (once)."""
RESPLIT = (COMPILE2, PACKAGE2)
"""Its children for "Build artifacts" when it has children already (a re-split)."""
ROLLUPS = {ROOT: ANSWER, BUILD: "built: compile done, package done", PUBLISH: "published"}


def script(
    *, broken: bool = False, resplit: dict[str, Any] | None = None, whole: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Answers by phase: the executor's per leaf, the decomposer's and the roll-ups.

    ``broken``: "Package build" calls a tool that fails; it cannot be split, fails after
    its retry, and "Build artifacts" is split again (``RESPLIT``, or the answer ``resplit``).
    ``whole``: tasks the decomposer leaves as they are (no children).
    """
    asks = {"kind": "decompose", "reason": "two separate jobs"}
    atomic = {"should_stop": True, "reason": "one command", "children": []}
    rules: list[dict[str, Any]] = [
        {"phase": "execute", "match": f'"title": "{BUILD}"', "response": asks}
    ]
    for name in whole:  # the first rule that matches answers
        target = f'"target_task": {{"id": \\d+, "name": "{name}"'
        rules.append({"phase": "decompose", "match": target, "response": atomic})
    for name, (tool, key) in LEAVES.items():
        key = "fail-package" if broken and name == PACKAGE else key
        call = {"kind": "call", "tool": tool, "args": {"key": key}}
        first = f'"title": "{name}".*"turns": \\[\\]'
        rules.append({"phase": "execute", "match": first, "response": call})
        finish = {"kind": "finish", "result": f"{key} done"}
        rules.append({"phase": "execute", "match": f'"title": "{name}"', "response": finish})
    answers = {  # the task's name, and what follows it in the request
        f'"{BUILD}"[^}}]*"existing_children": \\[\\]': SPLITS[BUILD],
        f'"{BUILD}"': RESPLIT,
        f'"{PUBLISH}"': SPLITS[PUBLISH],
    }
    for task, kids in answers.items():
        children = [{"name": kid, "instruction": f"{kid}.", "leaf": True} for kid in kids]
        target = f'"target_task": {{"id": \\d+, "name": {task}'
        answer = {"should_stop": False, "children": children}
        if kids == RESPLIT and resplit is not None:
            answer = resplit
        rules.append({"phase": "decompose", "match": target, "response": answer})
    for name in (PACKAGE, ROOT):  # the root is split again only when "Build" fails
        target = f'"target_task": {{"id": \\d+, "name": "{name}"'
        rules.append({"phase": "decompose", "match": target, "response": atomic})
    for name, text in ROLLUPS.items():
        rules.append({"phase": "rollup", "match": f'"task": {{"name": "{name}"', "response": text})
    return {"rules": rules}


def store_plan(url: str) -> PlanTree:
    """The plan as a user stored it: a root and its three tasks, the last after the build."""
    store = open_store(url)
    try:
        trees = TreeRepository(store)
        tree = trees.create_plan(ROOT, [NewNode(name=ROOT, instruction="Ship it.")])
        root = tree.nodes[0].id
        tasks = [
            NewNode(name=NOTES, instruction="Collect the notes.", leaf=True),
            NewNode(name=BUILD, instruction="Build everything."),
        ]
        build = trees.write_children(tree.id, root, tasks)[1]
        publish = NewNode(name=PUBLISH, instruction="Publish.", dependencies=(build.id,))
        trees.create_task(tree.id, root, publish)
        return trees.get_plan_tree(tree.id)
    finally:
        store.close()


def lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


@dataclass
class Seen:
    """What the store, the ledger and the model's log held at one moment."""

    status: str
    state: TreeState
    tree: PlanTree
    ledger: list[dict[str, Any]]
    calls: list[dict[str, Any]]

    def node(self, name: str) -> NodeId | None:
        return next((n.id for n in self.tree.nodes if n.name == name), None)

    def status_of(self, name: str) -> str:
        node = self.node(name)
        record = self.state.nodes.get(str(node)) if node is not None else None
        return record.status if record is not None else "pending"

    def split(self, name: str) -> bool:
        """Whether children of ``name`` (written by a split) are in the stored tree."""
        node = self.node(name)
        return node is not None and bool(self.tree.children(node))

    def pending(self, name: str) -> bool:
        """Whether a split of ``name`` is on record and its answer is not (asked, then died)."""
        node = self.node(name)
        split = self.state.asking.get(str(node))
        if node is None or split is None:
            return False
        return all(kid.position < split.first_position for kid in self.tree.children(node))


@dataclass
class Case:
    """One run of the plan: its store, its files and the processes that work on it."""

    url: str
    folder: Path
    run_id: str
    plan: PlanTree
    durability: str

    @property
    def ledger(self) -> Path:
        return self.folder / "ledger.jsonl"

    @property
    def calls(self) -> Path:
        return self.folder / "calls.jsonl"

    @property
    def events(self) -> Path:
        return self.folder / "events.jsonl"

    def env(self, kill: str) -> dict[str, str]:
        return {
            **os.environ,
            "TREE_CRASH_LEDGER": str(self.ledger),
            "TREE_CRASH_CALLS": str(self.calls),
            "TREE_CRASH_EVENTS": str(self.events),
            "TREE_CRASH_AT": kill,
            "TREE_CRASH_DURABILITY": self.durability,
            # far too long to expire: a resume takes a killed run over because its owner
            # is a process of this host that is gone
            "TASKDECOMP_LEASE_SECONDS": "600",
        }

    def child(self, kill: str, mode: str, *argv: str) -> subprocess.CompletedProcess[str]:
        """``child.py MODE URL RUN_ID ARGV`` in a new process, dying at ``kill``."""
        return subprocess.run(
            [sys.executable, str(HERE / "child.py"), mode, self.url, self.run_id, *argv],
            env=self.env(kill),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )

    def start(
        self,
        kill: str = "",
        *,
        broken: bool = False,
        resplit: dict[str, Any] | None = None,
        whole: tuple[str, ...] = (),
        **options: Any,
    ) -> subprocess.CompletedProcess[str]:
        """Run the plan in a new process with these ``TreeOptions``, dying at ``kill``."""
        path = self.folder / "script.json"
        path.write_text(json.dumps(script(broken=broken, resplit=resplit, whole=whole)))
        plan, given = str(self.plan.id), json.dumps(options)
        return self.child(kill, "run", str(path), plan, given)

    def go_on(self, mode: str = "resume", kill: str = "") -> dict[str, Any]:
        """Resume (or approve) in a new child process; its result."""
        done = self.child(kill, mode)
        assert done.returncode == 0, done.stderr
        result: dict[str, Any] = json.loads(done.stdout)
        return result

    def resume_here(self) -> dict[str, Any]:
        """Resume in this process (which never ran the run) with ``resume_sync``."""
        store = open_store(self.url)
        try:
            with pytest.MonkeyPatch.context() as patch:
                for name, value in self.env("").items():
                    patch.setenv(name, value)
                model = LoggedModel(str(self.folder / "script.json"))
                result = resume_sync(self.run_id, store=store, model=model)
        finally:
            store.close()
        return result.to_dict()

    def cli_resume(self) -> tuple[int, dict[str, Any]]:
        """``taskdecomp resume RUN_ID --db URL --json``, with the ``logged`` model known."""
        code = (
            "import sys; sys.path.insert(0, sys.argv.pop(1)); import model; model.register(); "
            "from taskdecomp.cli import main; main(sys.argv[1:])"
        )
        argv = ["resume", self.run_id, "--db", self.url, "--json"]
        done = subprocess.run(
            [sys.executable, "-c", code, str(HERE), *argv],
            env=self.env(""),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode in (0, 1), done.stderr
        return done.returncode, json.loads(done.stdout)

    def seen(self) -> Seen:
        store = open_store(self.url)
        try:
            stored = store.load_run(RunId(self.run_id))
            tree = TreeRepository(store).get_plan_tree(PlanTreeId(self.plan.id))
            return Seen(
                status=stored.summary.status,
                state=TreeState.from_stored(stored),
                tree=tree,
                ledger=lines(self.ledger),
                calls=lines(self.calls),
            )
        finally:
            store.close()

    def view(self) -> dict[str, Any]:
        """The run's tree as ``taskdecomp show --json`` draws it."""
        store = open_store(self.url)
        try:
            view = run_tree(store, store.load_run(RunId(self.run_id)))
        finally:
            store.close()
        assert view is not None
        return view


Cases = Callable[..., Case]


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    found: str = request.getfixturevalue("pg_url")
    return found


@pytest.fixture
def cases(url: str, tmp_path: Path) -> Iterator[Cases]:
    """Makes a new run of a newly stored plan, in one store (``sync`` unless told)."""
    made = 0

    def make(durability: str = "sync") -> Case:
        nonlocal made
        made += 1
        folder = tmp_path / f"case{made}"
        folder.mkdir()
        return Case(url, folder, f"tree{made}", store_plan(url), durability)

    yield make


def node(case: Case, name: str) -> NodeId:
    """The id of stored node ``name`` (one of the plan's own nodes)."""
    return next(n.id for n in case.plan.nodes if n.name == name)


def new(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[dict[str, Any]]:
    assert after[: len(before)] == before  # the files only grow
    return after[len(before) :]


def once_each(seen: Seen) -> bool:
    """Whether every tool call after the notes' was made once (the notes run beside the
    build: whether their read was done when the process died depends on the threads)."""
    runs = Counter(c["key"] for c in seen.ledger if c["key"] != "notes")
    return all(n == 1 for n in runs.values())


def asked(seen: Seen) -> Counter[tuple[str, str]]:
    """Model calls by phase and node."""
    return Counter((c["phase"], c["node"]) for c in seen.calls)


# -- what every resume must keep --------------------------------------------------------


def check_resumed(at_kill: Seen, end: Seen, *, resplit: tuple[str, ...] = ()) -> None:
    """Nothing the store had finished at the kill ran again, no split was asked twice.

    ``resplit``: nodes with children at the kill that the resumed run may split again, once
    (the first time: a child of theirs fails after the kill).
    """
    tools_again = new(at_kill.ledger, end.ledger)
    calls_again = new(at_kill.calls, end.calls)
    for name, (_, key) in LEAVES.items():
        if at_kill.status_of(name) == "ok":
            assert [c for c in tools_again if c["key"] == key] == [], (name, tools_again)
    for name in (ROOT, *LEAVES, *SPLITS):
        again = [c["phase"] for c in calls_again if c["node"] == name]
        if at_kill.status_of(name) == "ok":
            assert again == [], (name, calls_again)
        if at_kill.split(name):  # it has children on record: never carried out as a leaf
            assert "execute" not in again, (name, calls_again)
        # a split on record with its answer is never asked for again; one whose answer
        # died with the process is asked once more
        limit = 1 if at_kill.pending(name) or not at_kill.split(name) or name in resplit else 0
        assert again.count("decompose") <= limit, (name, calls_again)
    charged = [c for c in end.ledger if c["tool"] == "charge"]
    assert len(charged) <= 1, charged
    for key in {c["key"] for c in end.ledger if c["tool"] == "put"}:
        keys = {c["idem"] for c in end.ledger if c["key"] == key}
        assert len(keys) == 1 and None not in keys, keys  # one key, whatever the attempts


def check_ok(case: Case, result: dict[str, Any], *, upfront: bool = False) -> None:
    """The run ended well: every leaf's tool ran, every node is ``ok``, the root answered."""
    assert result["status"] == "ok" and result["stop_reason"] == "success", result
    assert result["answer"] == ANSWER
    leaves = [NOTES, COMPILE, PACKAGE, *((UPLOAD, ANNOUNCE) if upfront else (PUBLISH,))]
    assert {c["key"] for c in case.seen().ledger} == {LEAVES[name][1] for name in leaves}
    view = case.view()
    names = [ROOT, NOTES, BUILD, COMPILE, PACKAGE, PUBLISH, *leaves]
    assert {n["name"]: n["status"] for n in view["nodes"]} == dict.fromkeys(names, "ok")
    assert next(n for n in view["nodes"] if n["name"] == ROOT)["result"] == ANSWER


def killed(case: Case, kill: str, **how: Any) -> Seen:
    """Start the run in a child that dies at ``kill``; what the store and the logs hold."""
    done = case.start(kill, **how)
    assert done.returncode == -signal.SIGKILL, (kill, done.returncode, done.stderr)
    at_kill = case.seen()
    assert at_kill.status == "running"  # nothing ended it: its process died
    return at_kill


def kill_and_resume(case: Case, kill: str, *, decompose: str = "as-needed") -> tuple[Seen, Seen]:
    at_kill = killed(case, kill, decompose=decompose)
    check_ok(case, case.resume_here(), upfront=decompose == "upfront")
    end = case.seen()
    check_resumed(at_kill, end)
    return at_kill, end


# -- chosen kill points -----------------------------------------------------------------


@pytest.mark.parametrize("key", ["package", "compile"], ids=["read_only", "idempotent"])
def test_killed_inside_a_leafs_tool_call(cases: Cases, key: str) -> None:
    case = cases()
    at_kill, end = kill_and_resume(case, f"tool:{key}")
    leaf = next(name for name, (_, k) in LEAVES.items() if k == key)
    assert at_kill.split(BUILD) and at_kill.status_of(leaf) != "ok"
    assert [c["key"] for c in at_kill.ledger].count(key) == 1
    keys = Counter(c["key"] for c in end.ledger)
    assert keys[key] == 2  # the call in flight ran again (an idempotent one with its key)
    assert keys["publish"] == 1
    assert asked(end)[("decompose", BUILD)] == 1


def test_killed_right_after_a_split_was_written(cases: Cases) -> None:
    case = cases()
    at_kill, end = kill_and_resume(case, f"event:NodeDecomposed:{node(case, BUILD)}")
    assert at_kill.split(BUILD)
    assert at_kill.status_of(COMPILE) == at_kill.status_of(PACKAGE) == "pending"
    assert asked(end)[("decompose", BUILD)] == 1 and asked(end)[("execute", BUILD)] == 1
    assert once_each(end), end.ledger


def test_killed_inside_a_rollup(cases: Cases) -> None:
    case = cases()
    at_kill, end = kill_and_resume(case, f"model:rollup:{BUILD}")
    assert at_kill.status_of(COMPILE) == at_kill.status_of(PACKAGE) == "ok"
    calls = asked(end)
    assert calls[("rollup", BUILD)] == 2  # the one in flight was asked again
    assert calls[("decompose", BUILD)] == 1
    assert calls[("execute", COMPILE)] == calls[("execute", PACKAGE)] == 2  # call, finish
    assert once_each(end), end.ledger


def test_killed_right_after_a_rollup_answered(cases: Cases) -> None:
    case = cases()
    at_kill, end = kill_and_resume(case, "event:ModelCalled:rollup")
    assert at_kill.status_of(BUILD) != "ok"  # its answer died with the process
    assert at_kill.status_of(COMPILE) == at_kill.status_of(PACKAGE) == "ok"
    assert asked(end)[("rollup", BUILD)] == 2 and asked(end)[("decompose", BUILD)] == 1
    assert once_each(end), end.ledger


def test_killed_inside_the_upfront_decomposition(cases: Cases) -> None:
    case = cases()
    at_kill, end = kill_and_resume(case, f"model:decompose:{PUBLISH}", decompose="upfront")
    # the level's answers are written together once all came: none was
    assert not at_kill.split(BUILD) and not at_kill.split(PUBLISH)
    assert at_kill.ledger == []  # nothing runs before the tree is grown
    before, calls = asked(at_kill), asked(end)
    assert before[("decompose", PUBLISH)] == 1
    for task in (BUILD, PUBLISH):  # the answers died with the process: asked once more
        assert calls[("decompose", task)] == before[("decompose", task)] + 1
    assert calls[("execute", PUBLISH)] == calls[("execute", BUILD)] == 0
    assert once_each(end), end.ledger


def test_killed_between_the_writes_of_the_upfront_decomposition(cases: Cases) -> None:
    case = cases()
    at_kill, end = kill_and_resume(case, f"write:{BUILD}", decompose="upfront")
    assert at_kill.split(BUILD) and not at_kill.split(PUBLISH)
    assert not at_kill.state.upfront and at_kill.ledger == []
    calls = asked(end)
    assert calls[("decompose", BUILD)] == 1  # its children were written: not asked again
    assert calls[("decompose", PUBLISH)] == 2  # its answer, not written yet, was lost
    assert calls[("execute", PUBLISH)] == calls[("execute", BUILD)] == 0
    assert [n.name for n in end.tree.children(node(case, BUILD))] == [COMPILE, PACKAGE]
    assert once_each(end), end.ledger


def test_an_unsafe_call_in_doubt_stops_the_resumed_run(cases: Cases) -> None:
    case = cases()
    at_kill = killed(case, "tool:publish")  # it took effect; its result was never stored
    assert at_kill.status_of(BUILD) == "ok"
    code, result = case.cli_resume()
    assert code == 1, result
    step = f"node-{node(case, PUBLISH)}"
    assert result["stop_reason"] == f"interrupted_unknown_outcome:{step}", result
    end = case.seen()
    assert end.status == "stopped"
    assert [c["key"] for c in end.ledger if c["tool"] == "charge"] == ["publish"]
    assert new(at_kill.calls, end.calls) == []  # stopped before asking anything
    check_resumed(at_kill, end)


def test_a_kill_before_the_unsafe_call_leaves_nothing_in_doubt(cases: Cases) -> None:
    case = cases()
    at_kill = killed(case, "event:AgentTurn:charge")  # chosen by the agent, not yet called
    assert at_kill.status_of(BUILD) == "ok"
    assert "publish" not in {c["key"] for c in at_kill.ledger}
    code, result = case.cli_resume()
    assert code == 0, result
    check_ok(case, result)
    end = case.seen()
    check_resumed(at_kill, end)
    assert [c["key"] for c in end.ledger if c["tool"] == "charge"] == ["publish"]


def test_a_run_paused_for_a_split_survives_a_restart_and_a_kill(cases: Cases) -> None:
    case = cases()
    paused = json.loads(case.start(approve_decompositions=True).stdout)
    assert paused["status"] == "paused" and paused["stop_reason"] == "awaiting_approval"
    waiting = [step["title"] for step in paused["approval"]["subject"]["plan"]]
    assert waiting == [COMPILE, PACKAGE]
    at_pause = case.seen()
    assert at_pause.status == "paused" and at_pause.status_of(BUILD) == "decomposed"
    assert {c["key"] for c in at_pause.ledger} <= {"notes"}  # the split's children wait
    assert {c["node"] for c in at_pause.calls}.isdisjoint({COMPILE, PACKAGE})
    # approved from a new process, which is killed once the build is done
    approving = case.child(f"event:NodeStarted:{node(case, PUBLISH)}", "approve")
    assert approving.returncode == -signal.SIGKILL, approving.stderr
    at_kill = case.seen()
    assert at_kill.status == "running" and at_kill.status_of(BUILD) == "ok"
    result = case.go_on()  # the approval was stored when it was given: not asked again
    check_ok(case, result)
    end = case.seen()
    check_resumed(at_kill, end)
    assert once_each(end), end.ledger


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_a_split_cut_off_from_its_checkpoint_still_waits_for_approval(
    cases: Cases, durability: str
) -> None:
    case = cases(durability)
    at_kill = killed(case, f"event:NodeDecomposed:{node(case, BUILD)}", approve_decompositions=True)
    assert at_kill.split(BUILD) and not at_kill.pending(BUILD)
    paused = case.resume_here()
    assert paused["stop_reason"] == "awaiting_approval", paused  # not run unapproved
    waiting = [step["title"] for step in paused["approval"]["subject"]["plan"]]
    assert waiting == [COMPILE, PACKAGE]
    at_pause = case.seen()
    assert {c["key"] for c in at_pause.ledger} <= {"notes"}
    assert {c["node"] for c in at_pause.calls}.isdisjoint({COMPILE, PACKAGE})
    check_ok(case, case.go_on("approve"))
    check_resumed(at_kill, case.seen())


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_killed_inside_a_re_split_asks_the_decomposer_again_not_the_executor(
    cases: Cases, durability: str
) -> None:
    case = cases(durability)
    # "Package build" fails twice and cannot be split; "Build artifacts" is split again
    at_kill = killed(case, f"model:decompose:{BUILD}:2", broken=True)
    # the re-split is on record before the decomposer is asked, whatever the durability
    assert at_kill.pending(BUILD) and at_kill.status_of(PACKAGE) == "failed"
    result = case.resume_here()
    end = case.seen()
    check_resumed(at_kill, end)
    assert result["stop_reason"] == "success" and result["answer"] == ANSWER, result
    calls = asked(end)
    assert calls[("execute", BUILD)] == 1  # it asked to be split once, before the kill
    assert calls[("decompose", BUILD)] == 3  # split, re-split (died), re-split again
    keys = Counter(c["key"] for c in end.ledger if c["key"] != "notes")
    assert keys == {  # "Package build" was tried twice (a retry is an attempt of its own)
        "compile": 1,
        "fail-package": 2,
        "compile2": 1,
        "package2": 1,
        "publish": 1,
    }
    again = {c["key"] for c in new(at_kill.ledger, end.ledger)}
    assert again == {"compile2", "package2", "publish"}  # the failed node was not run again
    view = {n["name"]: n["status"] for n in case.view()["nodes"]}
    assert view == dict.fromkeys([ROOT, NOTES, BUILD, COMPILE2, PACKAGE2, PUBLISH], "ok")


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_killed_right_after_a_re_split_was_written_its_children_replace_the_old(
    cases: Cases, durability: str
) -> None:
    case = cases(durability)
    at_kill = killed(case, f"write:{BUILD}:2", broken=True)  # written, not yet looked at
    build = at_kill.node(BUILD)
    assert build is not None
    assert [kid.name for kid in at_kill.tree.children(build)] == [COMPILE, PACKAGE, *RESPLIT]
    result = case.resume_here()
    end = case.seen()
    check_resumed(at_kill, end)
    assert result["stop_reason"] == "success" and result["answer"] == ANSWER, result
    assert asked(end)[("decompose", BUILD)] == 2  # the re-split on record: not asked again
    assert [kid.name for kid in end.tree.children(build)] == list(RESPLIT)  # the old are gone
    assert {c["key"] for c in new(at_kill.ledger, end.ledger)} == {
        "compile2",
        "package2",
        "publish",
    }
    view = {n["name"]: n["status"] for n in case.view()["nodes"]}
    assert view == dict.fromkeys([ROOT, NOTES, BUILD, COMPILE2, PACKAGE2, PUBLISH], "ok")


def test_a_kill_right_after_the_upfront_decomposition_asks_about_no_node_again(
    cases: Cases,
) -> None:
    case = cases("async")  # checkpoints queued: the end of the growth must be on disk
    # "Publish release" is left whole: nothing in the stored tree says it was asked about
    kill = f"event:NodeStarted:{node(case, ROOT)}"  # the first node, once the tree is grown
    at_kill = killed(case, kill, decompose="upfront", whole=(PUBLISH,))
    assert at_kill.state.upfront and at_kill.ledger == []
    assert at_kill.split(BUILD) and not at_kill.split(PUBLISH)
    result = case.resume_here()
    assert result["stop_reason"] == "success" and result["answer"] == ANSWER, result
    end = case.seen()
    check_resumed(at_kill, end)
    calls = asked(end)
    assert calls[("decompose", BUILD)] == calls[("decompose", PUBLISH)] == 1
    assert calls[("execute", PUBLISH)] == 2  # a leaf: its call, then its finish
    assert {c["key"] for c in end.ledger} == {"notes", "compile", "package", "publish"}


def test_the_node_budget_holds_across_a_kill_in_the_upfront_decomposition(cases: Cases) -> None:
    case = cases("async")  # checkpoints queued: the tree grows before they are on disk
    # three nodes for the run: "Build artifacts" takes two, "Publish release" gets one; the
    # resumed run counts the two the dead process wrote (and never checkpointed)
    at_kill = killed(case, f"write:{BUILD}", decompose="upfront", max_nodes=3)
    assert at_kill.split(BUILD) and not at_kill.split(PUBLISH)
    assert at_kill.state.known == [n.id for n in case.plan.nodes]
    result = case.resume_here()
    assert result["stop_reason"] == "success" and result["answer"] == ANSWER, result
    end = case.seen()
    check_resumed(at_kill, end)
    added = [n.name for n in end.tree.nodes if n not in case.plan.nodes]
    assert added == [COMPILE, PACKAGE, UPLOAD], added
    assert {c["key"] for c in end.ledger} == {"notes", "compile", "package", "upload"}


FAILS = {
    "not_split_again": ({"redecompose": False}, 1),
    "split_again_into_nothing": ({"resplit": {"should_stop": True, "children": []}}, 2),
    "split_again_into_a_cycle": ({}, 2),
}
"""How "Build artifacts" fails once "Package build" did: options, and the splits it gets."""


@pytest.mark.parametrize("how", list(FAILS))
def test_a_resumed_run_that_fails_names_the_node_that_failed_before_the_kill(
    cases: Cases, how: str
) -> None:
    case = cases()
    options, splits = FAILS[how]
    kill = f"event:NodeFinished:{node(case, BUILD)}"  # its failure, not yet on record
    if how == "split_again_into_a_cycle":  # new children that would wait for "Publish"
        kids = [{"name": k, "dependencies": [node(case, PUBLISH)], "leaf": True} for k in RESPLIT]
        options = {"resplit": {"should_stop": False, "children": kids}}
        kill = f"write:{BUILD}:2"  # written, not yet looked at
    # "Package build" fails (tried twice) before the kill; "Build artifacts" after it
    at_kill = killed(case, kill, broken=True, **options)
    assert at_kill.status_of(PACKAGE) == "failed" and at_kill.status_of(BUILD) != "failed"
    assert asked(at_kill)[("decompose", BUILD)] == splits
    result = case.resume_here()
    package = at_kill.node(PACKAGE)
    assert result["status"] == "stopped" and result["stop_reason"] == f"node_failed:{package}"
    end = case.seen()
    resplit = () if how == "not_split_again" else (ROOT,)
    check_resumed(at_kill, end, resplit=resplit)
    assert asked(end)[("decompose", BUILD)] == splits  # a split tried is not asked again
    assert asked(end)[("decompose", ROOT)] == len(resplit)
    assert new(at_kill.ledger, end.ledger) == []  # nothing ran again, "Publish" never ran
    assert end.status_of(BUILD) == "failed" and end.status_of(ROOT) == "failed"
    view = {n["name"] for n in case.view()["nodes"]}
    assert view == {ROOT, NOTES, BUILD, COMPILE, PACKAGE, PUBLISH}  # the children it had


def test_a_node_that_kept_its_children_is_not_held_for_approval_after_a_kill(
    cases: Cases,
) -> None:
    case = cases()
    nothing = {"should_stop": True, "children": []}
    paused = json.loads(
        case.start(broken=True, resplit=nothing, approve_decompositions=True).stdout
    )
    assert paused["stop_reason"] == "awaiting_approval", paused  # "Build"'s split
    # approved; "Package build" fails, "Build artifacts" and then the root are split again
    # into nothing, and the process dies as the root fails
    approving = case.child(f"event:NodeFinished:{node(case, ROOT)}", "approve")
    assert approving.returncode == -signal.SIGKILL, approving.stderr
    at_kill = case.seen()
    assert at_kill.status_of(BUILD) == "failed" and at_kill.status_of(ROOT) != "failed"
    result = case.resume_here()  # the root's own children were never split off: no approval
    package = at_kill.node(PACKAGE)
    assert result["stop_reason"] == f"node_failed:{package}", result
    end = case.seen()
    check_resumed(at_kill, end)
    calls = asked(end)
    assert calls[("decompose", BUILD)] == 2 and calls[("decompose", ROOT)] == 1
    assert new(at_kill.ledger, end.ledger) == []


# -- kill points from a seeded RNG ------------------------------------------------------


def test_killed_at_random_events_and_resumed(cases: Cases) -> None:
    reference = cases()
    done = reference.start()
    assert done.returncode == 0 and json.loads(done.stdout)["answer"] == ANSWER, done.stderr
    total = len(lines(reference.events))
    rng = random.Random(SEED)
    outcomes: Counter[str] = Counter()
    for index, count in enumerate(sorted(rng.sample(range(2, total - 2), 3))):
        case = cases("sync" if index % 2 else "async")
        at_kill = killed(case, f"count:{count}")
        assert len(lines(case.events)) == count
        result = case.resume_here()
        end = case.seen()
        check_resumed(at_kill, end)
        if result["status"] == "ok":
            check_ok(case, result)
        else:  # the kill fell inside the unsafe call: it is not made again
            step = f"node-{node(case, PUBLISH)}"
            assert result["stop_reason"] == f"interrupted_unknown_outcome:{step}", result
        outcomes[result["stop_reason"].partition(":")[0]] += 1
    assert outcomes["success"] >= 2, outcomes
