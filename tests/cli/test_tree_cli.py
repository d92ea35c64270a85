"""The ``tree`` strategy through the real command line, on a real store.

``run GOAL --strategy tree`` and ``run --plan ID [--node ID]`` with scripted models whose
rules answer the executor, the decomposer and the roll-ups by phase; ``show`` drawing the
run's tree and ``show --json`` carrying it; approvals of splits; the flags' usage errors;
the live progress in a pipe and in a terminal.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from taskdecomp.store import open_store
from taskdecomp.store.trees import TreeRepository
from taskdecomp.tree import NewNode
from tests.cli.terminal import taskdecomp
from tests.clitools import EXE, cli
from tests.conftest import EXAMPLES
from tests.store.conftest import pg_url  # noqa: F401  # the fixture: a fresh PostgreSQL schema

GOAL = "Launch a conference"
CONFERENCE = "Launch a developer conference in Berlin"
DECOMPOSER = EXAMPLES / "decomposer" / "script.json"
RUN_ID = re.compile(r"\brun ([0-9a-f]{32})\b")

TOOLS = '''
import time


def lookup(key: str) -> dict:
    """Look a key up."""
    return {"key": key, "size": len(key)}


def book(venue: str) -> str:
    """Book a venue."""
    raise RuntimeError(venue + " is taken")


def wait(seconds: float) -> str:
    """Wait a while."""
    time.sleep(seconds)
    return "waited"
'''


def task(title: str) -> str:
    """A rule's regex for the executor working on the task called ``title``."""
    return f'"step": {{"id": "[^"]*", "title": "{re.escape(title)}"'


def target(name: str) -> str:
    """A rule's regex for the decomposer splitting the node called ``name``."""
    return f'"target_task": {{"id": \\d+, "name": "{re.escape(name)}"'


def finish(result: str) -> dict[str, Any]:
    return {"kind": "finish", "result": result}


def call(tool: str, **args: Any) -> dict[str, Any]:
    return {"kind": "call", "tool": tool, "args": args}


def children(*names: str) -> dict[str, Any]:
    return {"children": [{"name": n, "instruction": f"Do {n}.", "leaf": True} for n in names]}


SPLIT_ROOT = [
    ("execute", task(GOAL), {"kind": "decompose", "reason": "three jobs in one"}),
    ("decompose", target(GOAL), children("Venue", "Speakers")),
    ("execute", task("Venue"), finish("Venue booked")),
    ("execute", task("Speakers"), finish("Speakers invited")),
    ("rollup", ".", "Conference ready: venue booked, speakers invited"),
]
"""The root asks to be split; its two children finish; the roll-up answers."""


def script(tmp_path: Path, rules: list[tuple[str, str, Any]], **extra: Any) -> str:
    """A scripted model of ``(phase, regex, response)`` rules; no rule matched: it fails."""
    body = {"rules": [{"phase": p, "match": m, "response": r} for p, m, r in rules], **extra}
    path = tmp_path / f"script{len(list(tmp_path.glob('script*.json')))}.json"
    path.write_text(json.dumps(body))
    return f"scripted:{path}"


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """A console wide enough that no node's line wraps."""
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def tools(tmp_path: Path) -> str:
    path = tmp_path / "tools.py"
    path.write_text(TOOLS)
    return str(path)


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


def show_json(capsys: pytest.CaptureFixture[str], run_id: str, db: str) -> dict[str, Any]:
    code, out, err = cli(capsys, "show", run_id, "--json", "--db", db)
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def nodes(shown: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The run's tree nodes by name."""
    return {node["name"]: node for node in shown["tree"]["nodes"]}


def run_id_of(out: str) -> str:
    [found] = set(RUN_ID.findall(out))
    return found


# -- a goal ---------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def any_db(request: pytest.FixtureRequest, db: str) -> str:
    return db if request.param == "sqlite" else str(request.getfixturevalue("pg_url"))


def test_a_goal_becomes_a_tree_split_as_needed_drawn_with_statuses(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tools: str, any_db: str
) -> None:
    model = script(tmp_path, SPLIT_ROOT)
    argv = ("run", GOAL, "--strategy", "tree", "--tools", tools, "--model", model)
    code, out, err = cli(capsys, *argv, "--db", any_db)
    assert code == 0, err
    assert "ok stop_reason=success" in out
    assert "✓ [1] Launch a conference  ok: Conference ready: venue booked, speakers invited" in out
    assert "split: the executor asked to split the task: three jobs in one" in out
    assert "✓ [2] Venue  ok: Venue booked" in out and "✓ [3] Speakers  ok: Speakers" in out
    assert "node-2" not in out  # the tree replaces the table of steps
    lines = err.splitlines()
    assert "node 1 'Launch a conference': running" in lines
    assert "agent node-1 turn 1: decompose" in lines
    split = "node 1 'Launch a conference': split into 2 subtasks (2, 3): "
    assert any(line.startswith(split) and "three jobs in one" in line for line in lines), err
    assert "node 2 'Venue': ok: Venue booked" in lines
    run_id = run_id_of(out)

    shown = show_json(capsys, run_id, any_db)
    tree = shown["tree"]
    assert tree["plan_id"] == 1 and tree["root"] == 1 and tree["title"] == GOAL
    assert [(n["id"], n["parent_id"], n["status"]) for n in tree["nodes"]] == [
        (1, None, "ok"),
        (2, 1, "ok"),
        (3, 1, "ok"),
    ]
    assert nodes(shown)["Speakers"]["result"] == "Speakers invited"
    assert "three jobs in one" in nodes(shown)[GOAL]["split"]
    assert shown["answer"] == "Conference ready: venue booked, speakers invited"

    code, out, _ = cli(capsys, "show", run_id, "--db", any_db)  # for people: the same tree
    assert code == 0
    assert f"run {run_id} ok stop_reason=success" in out
    assert "plan #1 Launch a conference" in out and "✓ [3] Speakers  ok: Speakers invited" in out

    code, out, _ = cli(capsys, "tree", "1", "--json", "--db", any_db)  # the stored tree grew
    assert [n["name"] for n in json.loads(out)["nodes"]] == [GOAL, "Venue", "Speakers"]
    assert "status" not in out  # statuses live in the run, not in the tree


def test_show_of_another_strategy_has_no_tree(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tools: str, db: str
) -> None:
    steps = [
        {"id": f"s{n}", "title": "Look", "tool": "lookup", "args": {"key": k}}
        for n, k in enumerate("abc", 1)
    ]
    plan = {"kind": "plan", "steps": steps}
    model = script(tmp_path, [("plan", ".", plan), ("finalize", ".", "a is 1 long")])
    code, out, err = cli(capsys, "run", "Look a up", "--tools", tools, "--model", model, "--db", db)
    assert code == 0, err
    assert "✓" not in out and "plan #" not in out
    shown = show_json(capsys, run_id_of(out), db)
    assert "tree" not in shown and shown["answer"] == "a is 1 long"


# -- a stored tree --------------------------------------------------------------------------

EVERY_TASK = [
    ("execute", ".", finish("done")),
    ("rollup", ".", "all done"),
]
"""Every leaf finishes, every roll-up answers; the decomposer has no answer."""


def decompose_conference(capsys: pytest.CaptureFixture[str], db: str) -> str:
    """Store the 16-node conference plan (plan 1); what it printed on stderr."""
    model = f"scripted:{DECOMPOSER}"
    code, out, err = cli(capsys, "decompose", CONFERENCE, "--model", model, "--db", db)
    assert code == 1, err  # its Logistics node timed out: a leaf of the stored tree
    assert "plan #1" in out
    return err


def test_decompose_then_run_the_stored_tree_as_it_is(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tools: str, db: str
) -> None:
    hint = f"execute it with: taskdecomp run --plan 1 --tools TOOLS --db {db}"
    assert hint in decompose_conference(capsys, db).splitlines()
    assert hint in cli(capsys, "tree", "1", "--db", db)[2].splitlines()
    code, out, err = cli(capsys, "tree", "1", "--json", "--db", db)
    assert code == 0 and "execute it with" not in out + err  # the hint is for people
    code, out, err = cli(capsys, "decompose", "x", "--no-auto", "--json", "--db", db)
    assert code == 0 and "execute it with" not in out + err
    assert json.loads(out)["id"] == 2
    model = script(tmp_path, EVERY_TASK)
    argv = ("run", "--plan", "1", "--decompose", "none", "--tools", tools, "--model", model)
    code, out, err = cli(capsys, *argv, "--db", db)
    assert code == 0, err
    assert "model decompose" not in err  # not asked: the tree ran as it was stored
    shown = show_json(capsys, run_id_of(out), db)
    assert shown["goal"] == CONFERENCE and shown["config"]["strategy"] == "tree"
    assert shown["config"]["tree"]["plan_id"] == 1
    assert shown["config"]["tree"]["decompose"] == "none"
    tree = shown["tree"]
    assert len(tree["nodes"]) == 16 and tree["root"] is None
    assert {n["status"] for n in tree["nodes"]} == {"ok"}
    leaves = [n for n in tree["nodes"] if n["leaf"]]
    assert len(leaves) == 11 and {n["result"] for n in leaves} == {"done"}
    assert nodes(shown)["Logistics"]["leaf"]  # a node the decomposer never split
    assert shown["answer"] == "all done"


def test_one_subtree_of_a_stored_tree(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tools: str, db: str
) -> None:
    decompose_conference(capsys, db)
    model = script(tmp_path, EVERY_TASK)
    argv = ("run", "--plan", "1", "--node", "2", "--tools", tools, "--model", model)
    code, out, err = cli(capsys, *argv, "--strategy", "tree", "--db", db)
    assert code == 0, err
    assert "plan #1 Launch a developer conference in Berlin" in out
    assert "✓ [2] Venue  ok: all done" in out and "Speakers" not in out
    shown = show_json(capsys, run_id_of(out), db)
    assert shown["goal"] == "Venue"
    assert [(n["name"], n["depth"]) for n in shown["tree"]["nodes"]] == [
        ("Venue", 0),
        ("Shortlist venues", 1),
        ("Visit and negotiate", 1),
        ("Sign the contract", 1),
    ]
    assert shown["usage"]["llm_calls"] == 4  # three leaves and one roll-up: nothing else ran


# -- failures ------------------------------------------------------------------------------


def test_a_failing_tool_and_an_agent_out_of_turns_fail_the_tree_at_its_depth(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tools: str, db: str
) -> None:
    rules = [
        ("execute", task(GOAL), {"kind": "decompose", "reason": "two jobs"}),
        ("decompose", target(GOAL), children("Venue", "Speakers")),
        ("execute", task("Venue"), call("book", venue="Hall 7")),
        ("execute", task("Speakers") + r'.*"turns": \[\]', call("lookup", key="a")),
        ("execute", task("Speakers"), call("lookup", key="b")),
    ]
    argv = ("run", GOAL, "--strategy", "tree", "--tools", tools, "--model", script(tmp_path, rules))
    flags = ("--max-depth", "1", "--node-retries", "0", "--no-redecompose")
    code, out, err = cli(capsys, *argv, *flags, "--max-agent-turns", "2", "--db", db)
    assert code == 1, err
    assert "stopped stop_reason=node_failed:" in out
    assert "✗ [2] Venue  failed: tool_error:book" in out
    assert "Hall 7 is taken" in out
    assert "✗ [3] Speakers  failed: max_agent_turns:node-3" in out
    assert "✗ [1] Launch a conference  failed: node_failed:" in out
    assert "node 2 'Venue': failed (tool_error:book)" in err.splitlines()
    shown = show_json(capsys, run_id_of(out), db)
    assert shown["stop_reason"] in ("node_failed:2", "node_failed:3")
    assert shown["config"]["tree"] == {
        **shown["config"]["tree"],
        "max_depth": 1,
        "node_retries": 0,
        "redecompose": False,
        "max_agent_turns": 2,
    }
    venue, speakers = nodes(shown)["Venue"], nodes(shown)["Speakers"]
    assert venue["status"] == speakers["status"] == "failed"
    assert venue["reason"] == "tool_error:book" and venue["attempts"] == 1
    assert speakers["reason"] == "max_agent_turns:node-3"
    assert len([t for t in shown["trace"] if t["tool"] == "lookup"]) == 2  # two turns, no more


def test_a_failed_leaf_is_split_as_needed_and_its_children_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tools: str, db: str
) -> None:
    rules = [
        ("execute", task("Venue"), call("book", venue="Hall 7")),
        ("decompose", target("Venue"), children("Shortlist", "Negotiate")),
        ("execute", task("Shortlist"), finish("three halls")),
        ("execute", task("Negotiate"), finish("Hall 9 signed")),
        ("rollup", ".", "Hall 9 is booked"),
    ]
    model = script(tmp_path, rules)
    code, out, err = cli(
        capsys, "run", "Venue", "--strategy", "tree", "--tools", tools, "--model", model, "--db", db
    )
    assert code == 0, err
    assert (
        "node 1 'Venue': split into 2 subtasks (2, 3): an attempt failed (tool_error:book)" in err
    )
    assert "✓ [1] Venue  ok: Hall 9 is booked  split: an attempt failed (tool_error:book)" in out
    assert "✓ [3] Negotiate  ok: Hall 9 signed" in out


def test_a_run_out_of_time_resumes_and_draws_its_tree(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tools: str, db: str
) -> None:
    rules = [
        ("execute", task(GOAL), {"kind": "decompose", "reason": "two jobs"}),
        ("decompose", target(GOAL), children("Venue", "Speakers")),
        ("execute", task("Venue"), finish("Venue booked")),
        ("execute", task("Speakers") + r'.*"turns": \[\]', call("wait", seconds=3)),
        ("execute", task("Speakers"), finish("Speakers invited")),
        ("rollup", ".", "ready"),
    ]
    argv = ("run", GOAL, "--strategy", "tree", "--tools", tools, "--model", script(tmp_path, rules))
    code, out, err = cli(capsys, *argv, "--max-seconds", "1", "--db", db)
    assert code == 1, err
    assert "stopped stop_reason=max_seconds" in out
    assert "✓ [2] Venue  ok: Venue booked" in out
    assert "[3] Speakers" in out and "✓ [3]" not in out  # cut off by the deadline
    run_id = run_id_of(out)
    assert f"taskdecomp resume {run_id} --max-seconds SECONDS" in " ".join(err.split())

    code, out, err = cli(capsys, "resume", run_id, "--max-seconds", "60", "--db", db)
    assert code == 0, err
    assert (
        "✓ [3] Speakers  ok: Speakers invited" in out
        and "✓ [1] Launch a conference  ok: ready" in out
    )
    assert "node 2 'Venue'" not in err  # finished before: not run again
    code, out, _ = cli(capsys, "resume", run_id, "--db", db)  # ended: the tree, as stored
    assert code == 0 and "nothing to resume" in out + _ and "✓ [3] Speakers" in out


# -- approvals ------------------------------------------------------------------------------


def test_a_split_waits_for_approval_is_shown_and_approve_continues(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tools: str, db: str
) -> None:
    model = script(tmp_path, SPLIT_ROOT)
    argv = ("run", GOAL, "--strategy", "tree", "--tools", tools, "--model", model)
    code, out, err = cli(capsys, *argv, "--approve-decompositions", "--db", db)
    assert code == 3, err
    run_id = run_id_of(out)
    waits = (
        "waiting for approval: the split of node 1 'Launch a conference' into nodes 2, 3 "
        "(pending in the tree above)"
    )
    code, shown, _ = cli(capsys, "show", run_id, "--db", db)
    for printed in (out, shown):
        assert "◆ [1] Launch a conference  decomposed" in printed
        assert "· [2] Venue  pending" in printed and "· [3] Speakers  pending" in printed
        assert waits in printed and f"taskdecomp approve {run_id}" in printed
        assert '"plan"' not in printed  # not the approval's JSON
    data = show_json(capsys, run_id, db)
    assert data["status"] == "paused" and data["stop_reason"] == "awaiting_approval"
    assert [n["status"] for n in data["tree"]["nodes"]] == ["decomposed", "pending", "pending"]

    code, out, err = cli(capsys, "approve", run_id, "--db", db)
    assert code == 0, err
    assert "✓ [2] Venue  ok: Venue booked" in out and "waiting for approval" not in out
    assert "node 3 'Speakers': ok: Speakers invited" in err.splitlines()
    data = show_json(capsys, run_id, db)
    assert data["status"] == "ok" and {n["status"] for n in data["tree"]["nodes"]} == {"ok"}


def test_a_rejected_split_ends_the_run_with_its_tree(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tools: str, db: str
) -> None:
    model = script(tmp_path, SPLIT_ROOT)
    argv = ("run", GOAL, "--strategy", "tree", "--tools", tools, "--model", model)
    code, out, _ = cli(capsys, *argv, "--approve-decompositions", "--db", db)
    assert code == 3
    run_id = run_id_of(out)
    code, out, _ = cli(capsys, "reject", run_id, "--reason", "too many jobs", "--db", db)
    assert code == 1
    assert "stopped stop_reason=approval_rejected" in out
    # the rejected children left the stored tree; the node whose split it was failed
    assert "[1] Launch a conference  failed: approval_rejected" in out and "Venue" not in out


# -- flags and usage ------------------------------------------------------------------------


def test_upfront_grows_the_tree_before_it_runs_and_the_environment_bounds_it(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    tools: str,
    db: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rules = [
        ("decompose", target(GOAL), {"children": [{"name": "Venue"}, {"name": "Speakers"}]}),
        ("decompose", target("Venue"), children("Shortlist", "Negotiate")),
        ("decompose", target("Speakers"), children("Invite", "Confirm")),
        ("execute", ".", finish("done")),
        ("rollup", ".", "rolled up"),
    ]
    monkeypatch.setenv("DECOMP_MAX_DEPTH", "1")  # the decomposer's depth: one level only
    argv = ("run", GOAL, "--strategy", "tree", "--tools", tools, "--model", script(tmp_path, rules))
    code, out, err = cli(capsys, *argv, "--decompose", "upfront", "--db", db)
    assert code == 0, err
    assert "split into" not in err  # grown before the run, not as needed
    shown = show_json(capsys, run_id_of(out), db)
    assert shown["config"]["tree"]["max_depth"] == 1
    assert [n["name"] for n in shown["tree"]["nodes"]] == [GOAL, "Venue", "Speakers"]

    code, out, err = cli(capsys, *argv, "--decompose", "upfront", "--max-depth", "2", "--db", db)
    assert code == 0, err  # the flag wins over the environment
    shown = show_json(capsys, run_id_of(out), db)
    assert [n["name"] for n in shown["tree"]["nodes"]] == [
        GOAL,
        "Venue",
        "Shortlist",
        "Negotiate",
        "Speakers",
        "Invite",
        "Confirm",
    ]
    assert {n["status"] for n in shown["tree"]["nodes"]} == {"ok"}

    monkeypatch.setenv("DECOMP_TOTAL_NODE_BUDGET", "0")
    code, _, err = cli(capsys, *argv, "--db", db)
    assert code == 2
    assert "DECOMP_TOTAL_NODE_BUDGET=0" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--plan", "1", "--strategy", "replan"],
            "--plan executes a stored plan tree, which "
            "only --strategy tree does; drop --strategy replan",
        ),
        (["--node", "2"], "--node needs --plan"),
        (["a goal", "--plan", "1"], "give either GOAL (the root of a new plan tree) or --plan ID"),
        (["--goal-file", "goal.txt", "--plan", "1"], "give either GOAL"),
        ([], "Missing argument 'GOAL'"),
        (["--plan", "41"], "no plan tree has id 41"),
        (["--plan", "1", "--node", "99"], "plan 1 has no node 99"),
        (["g", "--decompose", "upfront"], "--decompose works with --strategy tree only"),
        (
            ["g", "--node-retries", "0", "--strategy", "replan"],
            "--node-retries works with --strategy tree only",
        ),
        (["g", "--no-redecompose"], "--no-redecompose works with --strategy tree only"),
        (["g", "--approve-decompositions"], "--approve-decompositions works with --strategy tree"),
        (["g", "--max-nodes", "5"], "--max-nodes works with --strategy tree only"),
        (["g", "--max-agent-turns", "3"], "--max-agent-turns works with --strategy replan or tree"),
        (["--plan", "1", "--approve-plan"], "--approve-plan works with --strategy replan only"),
        (["g", "--strategy", "tree", "--decompose", "later"], "'later' is not one of"),
        (["g", "--strategy", "tree", "--max-depth", "0"], "--max-depth"),
    ],
)
def test_usage_errors_say_what_to_do_in_one_line(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    tools: str,
    db: str,
    argv: list[str],
    message: str,
) -> None:
    (tmp_path / "goal.txt").write_text("a goal")
    store = open_store(db)
    TreeRepository(store).create_plan("stored", [NewNode(name="stored")])
    store.close()
    model = script(tmp_path, EVERY_TASK)
    code, _, err = cli(capsys, "run", *argv, "--tools", tools, "--model", model, "--db", db)
    assert code == 2, err
    assert message in err and err.count("\n") == 1
    code, out, _ = cli(capsys, "runs", "--json", "--db", db)
    assert json.loads(out) == []  # nothing ran


def test_accepted_flags_reach_the_stored_options(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tools: str, db: str
) -> None:
    model = script(tmp_path, [("execute", ".", finish("done"))])
    argv = ("run", "g", "--strategy", "tree", "--tools", tools, "--model", model, "--json")
    flags = ("--node-retries", "3", "--max-nodes", "7", "--redecompose", "--approve-decompositions")
    code, out, err = cli(capsys, *argv, *flags, "--option", "max_children=2", "--db", db)
    assert code == 0, err
    assert err == ""  # --json: nothing on stderr, the result alone on stdout
    result = json.loads(out)
    options = show_json(capsys, result["run_id"], db)["config"]["tree"]
    assert options == {
        "plan_id": None,
        "node_id": None,
        "decompose": "as-needed",
        "max_depth": 3,
        "max_nodes": 7,
        "max_children": 2,
        "node_retries": 3,
        "redecompose": True,
        "approve_decompositions": True,
        "max_agent_turns": 20,
    }


# -- progress -------------------------------------------------------------------------------


def test_a_terminal_shows_the_running_node_while_its_tool_works(
    tmp_path: Path, tools: str, db: str
) -> None:
    rules = [
        ("execute", task("Wait") + r'.*"turns": \[\]', call("wait", seconds=3)),
        ("execute", task("Wait"), finish("waited 3 s")),
    ]
    term = taskdecomp(
        "run",
        "Wait",
        "--strategy",
        "tree",
        "--tools",
        tools,
        "--model",
        script(tmp_path, rules),
        "--db",
        db,
    )
    term.read_until(re.compile(r"node 1 · \d+s · Wait"))
    assert term.wait() == 0
    text = term.text
    assert "node 1 'Wait': running" in text and "node 1 'Wait': ok: waited 3 s" in text
    assert "✓ [1] Wait  ok: waited 3 s" in text


def test_json_mode_prints_json_alone(tmp_path: Path, tools: str, db: str) -> None:
    model = script(tmp_path, SPLIT_ROOT)
    argv = ["run", GOAL, "--strategy", "tree", "--tools", tools, "--model", model, "--json"]
    done = subprocess.run(
        [str(EXE), *argv, "--db", db], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    result = json.loads(done.stdout)
    assert result["answer"] == "Conference ready: venue booked, speakers invited"
