"""The replan strategy through the real command line: approvals across processes, kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.clitools import CHILD
from tests.conftest import SALES_TOOLS

TOOLSET = '''
import os, time
from pathlib import Path
from taskdecomp import tool

LOG = Path(os.environ["REPLAN_TEST_LOG"])


def _log(name, **args):
    with LOG.open("a") as f:
        f.write(name + " " + " ".join(f"{k}={v}" for k, v in sorted(args.items())) + "\\n")


def lookup(key: str) -> dict:
    """Look a key up."""
    _log("lookup", key=key)
    return {"key": key, "size": len(key)}


@tool(side_effects="unsafe", needs_approval=True)
def send(to: str) -> str:
    """Send a message (a human approves each one)."""
    _log("send", to=to)
    return "sent to " + to


@tool(needs_approval=True)
def publish(key: str) -> str:
    """Publish (a human approves); waits until the release file exists."""
    _log("publish", key=key)
    release = LOG.with_suffix(".release")
    while not release.exists():
        time.sleep(0.05)
    return "published " + key


def block(key: str) -> str:
    """Wait until the release file exists (the test kills the process meanwhile)."""
    _log("block", key=key)
    release = LOG.with_suffix(".release")
    while not release.exists():
        time.sleep(0.05)
    return "released"
'''


def step(step_id: str, tool: str, args: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "title": f"Run {tool}", "tool": tool, "args": args, **extra}


PLAN = {
    "kind": "plan",
    "steps": [
        step("s1", "lookup", {"key": "a"}, depends_on=[]),
        step("s2", "lookup", {"key": "bb"}, depends_on=[]),
    ],
}
RESPOND = {"kind": "respond", "response": "a has size 1 and bb has size 2."}


def rules_script(tmp_path: Path, *rules: tuple[str, Any], name: str = "script.json") -> str:
    path = tmp_path / name
    body = {"rules": [{"match": match, "response": response} for match, response in rules]}
    path.write_text(json.dumps(body))
    return f"scripted:{path}"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "tools.py").write_text(TOOLSET)
    # a lease far too long to expire: a resume after a kill -9 takes the run over because
    # its owner is a process of this host that is gone, at once
    return {
        **os.environ,
        "REPLAN_TEST_LOG": str(tmp_path / "calls.log"),
        "TASKDECOMP_LEASE_SECONDS": "600",
    }


def cli(env: dict[str, str], *argv: str, timeout: float = 120) -> tuple[int, str, str]:
    done = subprocess.run(
        [*CHILD, *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done.returncode, done.stdout, done.stderr


def calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def approve_then_kill(
    env: dict[str, str], tmp_path: Path, run_id: str, db: str, *, when: str
) -> None:
    """Approve ``run_id`` in a process that is killed (-9) once ``when`` is in the call log;
    then release the blocking tools."""
    child = subprocess.Popen(
        [*CHILD, "approve", run_id, "--db", db],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while when not in calls(tmp_path):
        assert time.monotonic() < deadline, f"the run never reached {when!r}"
        assert child.poll() is None, "the approve process ended early"
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    (tmp_path / "calls.release").touch()


def test_run_with_the_replan_strategy_prints_the_answer(tmp_path: Path) -> None:
    script = tmp_path / "sales.json"
    month = {"month": "2026-04"}
    tools = ["fetch_sales_data", "fetch_refund_data", "calculate_monthly_kpis"]
    plan = {"kind": "plan", "steps": [step(f"s{n}", t, month) for n, t in enumerate(tools, 1)]}
    script.write_text(json.dumps([plan, RESPOND, RESPOND, RESPOND]))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    args = ["run", "April 2026 sales", "--tools", str(SALES_TOOLS), "--model", f"scripted:{script}"]
    code, out, err = cli(dict(os.environ), *args, "--strategy", "replan", "--db", db)
    assert code == 0, err
    assert "stop_reason=success" in out and "a has size 1" in out
    assert "replan round 1: respond" in err


def test_replan_only_flags_are_refused_for_plan_execute(env: dict[str, str]) -> None:
    code, _, err = cli(env, "run", "x", "--tools", "t.py", "--approve-plan", "--model", "x")
    assert code == 2
    assert "--approve-plan works with --strategy replan only" in err


def test_approval_pause_exit_then_approve_from_a_new_process(
    tmp_path: Path, env: dict[str, str]
) -> None:
    model = rules_script(tmp_path, ("remaining_steps", RESPOND), ("max_plan_steps", PLAN))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    base = ["--tools", str(tmp_path / "tools.py"), "--model", model, "--db", db, "--json"]
    code, out, _ = cli(
        env, "run", "Look up a and bb", *base, "--strategy", "replan", "--approve-plan"
    )
    assert code == 3
    paused = json.loads(out)
    assert paused["status"] == "paused" and paused["stop_reason"] == "awaiting_approval"
    assert paused["approval"]["kind"] == "plan"
    assert [s["id"] for s in paused["approval"]["subject"]["plan"]] == ["s1", "s2"]
    assert calls(tmp_path) == []
    run_id = paused["run_id"]

    code, out, _ = cli(env, "show", run_id, "--db", db, "--json")
    assert code == 0 and json.loads(out)["status"] == "paused"

    code, out, err = cli(env, "approve", run_id, "--db", db, "--json")
    assert code == 0, err
    done = json.loads(out)
    assert done["stop_reason"] == "success" and done["answer"] == RESPOND["response"]
    assert sorted(calls(tmp_path)) == ["lookup key=a", "lookup key=bb"]

    code, _, err = cli(env, "approve", run_id, "--db", db)
    assert code == 2 and "is not waiting for approval" in err


def test_reject_ends_the_run(tmp_path: Path, env: dict[str, str]) -> None:
    model = rules_script(tmp_path, ("remaining_steps", RESPOND), ("max_plan_steps", PLAN))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    base = ["--tools", str(tmp_path / "tools.py"), "--model", model, "--db", db, "--json"]
    code, out, _ = cli(env, "run", "Look up", *base, "--strategy", "replan", "--approve-plan")
    run_id = json.loads(out)["run_id"]
    code, out, _ = cli(env, "reject", run_id, "--reason", "wrong keys", "--db", db, "--json")
    assert code == 1
    rejected = json.loads(out)
    assert rejected["stop_reason"] == "approval_rejected"
    assert rejected["message"] == "rejected: wrong keys"
    code, out, _ = cli(env, "show", run_id, "--db", db, "--json")
    assert json.loads(out)["stop_reason"] == "approval_rejected"
    assert calls(tmp_path) == []


def test_an_edited_plan_must_pass_the_boundary(tmp_path: Path, env: dict[str, str]) -> None:
    model = rules_script(tmp_path, ("remaining_steps", RESPOND), ("max_plan_steps", PLAN))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    base = ["--tools", str(tmp_path / "tools.py"), "--model", model, "--db", db, "--json"]
    code, out, _ = cli(
        env, "run", "Look up", *base, "--strategy", "replan", "--approve-plan", "--allow",
        "lookup,block",
    )  # fmt: skip
    run_id = json.loads(out)["run_id"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([step("x1", "send", {"to": "all"})]))
    code, _, err = cli(env, "approve", run_id, "--plan", str(bad), "--db", db)
    assert code == 2
    assert "invalid_plan:tool_not_allowed:send" in err and "still waits" in err
    code, out, _ = cli(env, "show", run_id, "--db", db, "--json")
    assert json.loads(out)["status"] == "paused"

    good = tmp_path / "good.json"
    good.write_text(json.dumps({"kind": "plan", "steps": [step("e1", "lookup", {"key": "zzz"})]}))
    code, out, err = cli(env, "approve", run_id, "--plan", str(good), "--db", db, "--json")
    assert code == 0, err
    assert calls(tmp_path) == ["lookup key=zzz"]
    assert [s["id"] for s in json.loads(out)["plan"]] == ["e1"]


def test_a_needs_approval_tool_pauses_plan_execute_and_runs_once(
    tmp_path: Path, env: dict[str, str]
) -> None:
    plan = {
        "kind": "plan",
        "steps": [
            step("s1", "lookup", {"key": "a"}),
            step("s2", "send", {"to": "ann"}),
            step("s3", "lookup", {"key": "b"}),
        ],
    }
    model = rules_script(tmp_path, ("history", "Sent."), ("max_plan_steps", plan))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    base = ["--tools", str(tmp_path / "tools.py"), "--model", model, "--db", db, "--json"]
    code, out, _ = cli(env, "run", "Send it", *base)
    assert code == 3
    paused = json.loads(out)
    assert paused["approval"]["subject"] == {"step_id": "s2", "tool": "send", "args": {"to": "ann"}}
    assert calls(tmp_path) == ["lookup key=a"]
    code, out, err = cli(env, "approve", paused["run_id"], "--db", db, "--json")
    assert code == 0, err
    assert json.loads(out)["answer"] == "Sent."
    assert calls(tmp_path) == ["lookup key=a", "send to=ann", "lookup key=b"]


def test_resume_after_kill_9_in_the_middle_of_the_loop(tmp_path: Path, env: dict[str, str]) -> None:
    second = {"kind": "plan", "steps": [step("s3", "block", {"key": "c"})]}
    model = rules_script(
        tmp_path,
        ('"id": "s3"', RESPOND),
        ("remaining_steps", second),
        ("max_plan_steps", PLAN),
    )
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    args = ["--tools", str(tmp_path / "tools.py"), "--model", model, "--db", db, "--json"]
    code, out, _ = cli(env, "run", "Look up", *args, "--strategy", "replan", "--approve-plan")
    assert code == 3
    run_id = json.loads(out)["run_id"]
    code, out, _ = cli(env, "approve", run_id, "--db", db, "--json")
    assert code == 3  # the revision changed the plan: asked once, for the new plan
    revised = json.loads(out)["approval"]
    assert revised["kind"] == "plan" and revised["subject"]["plan"][0]["id"] == "s3"
    approve_then_kill(env, tmp_path, run_id, db, when="block key=c")

    code, out, err = cli(env, "resume", run_id, "--db", db, "--json")
    assert code == 0, err  # no approval asked again after the crash
    result = json.loads(out)
    assert result["stop_reason"] == "success"
    log = calls(tmp_path)
    assert sorted(log[:2]) == ["lookup key=a", "lookup key=bb"]
    assert log[2:] == ["block key=c", "block key=c"]  # only the unfinished read-only step again
    assert [h["plan_step"]["id"] for h in result["history"]] == ["s1", "s2", "s3"]
    code, out, _ = cli(env, "show", run_id, "--db", db, "--json")
    stored = json.loads(out)
    assert stored["segments"] == 4 and stored["status"] == "ok"
    kinds = [e for e in stored["state"]["replan"]["steps"]]
    assert [k["id"] for k in kinds] == ["s1", "s2", "s3"]


def test_an_agent_call_that_needs_approval_pauses_and_runs_once(
    tmp_path: Path, env: dict[str, str]
) -> None:
    plan = {"kind": "plan", "steps": [{"id": "s1", "title": "Notify", "instruction": "Tell ann"}]}
    model = rules_script(
        tmp_path,
        ("remaining_steps", RESPOND),
        ('"turns": \\[\\]', {"kind": "call", "tool": "send", "args": {"to": "ann"}}),
        ("turns_left", {"kind": "finish", "result": "ann was told"}),
        ("max_plan_steps", plan),
    )
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    base = ["--tools", str(tmp_path / "tools.py"), "--model", model, "--db", db, "--json"]
    code, out, _ = cli(env, "run", "Tell ann", *base, "--strategy", "replan")
    assert code == 3
    paused = json.loads(out)
    assert paused["approval"]["subject"] == {
        "step_id": "s1",
        "tool": "send",
        "args": {"to": "ann"},
    }
    assert calls(tmp_path) == []
    code, out, err = cli(env, "approve", paused["run_id"], "--db", db, "--json")
    assert code == 0, err
    done = json.loads(out)
    assert done["history"][0]["observation"] == "ann was told"
    assert calls(tmp_path) == ["send to=ann"]


def test_an_approved_call_is_not_asked_again_after_a_crash(
    tmp_path: Path, env: dict[str, str]
) -> None:
    plan = {
        "kind": "plan",
        "steps": [
            step("s1", "lookup", {"key": "a"}),
            step("s2", "publish", {"key": "b"}),
            step("s3", "lookup", {"key": "c"}),
        ],
    }
    model = rules_script(tmp_path, ("history", "Published."), ("max_plan_steps", plan))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    base = ["--tools", str(tmp_path / "tools.py"), "--model", model, "--db", db, "--json"]
    code, out, _ = cli(env, "run", "Publish b", *base)
    assert code == 3
    run_id = json.loads(out)["run_id"]
    approve_then_kill(env, tmp_path, run_id, db, when="publish key=b")
    code, out, err = cli(env, "resume", run_id, "--db", db, "--json")
    assert code == 0, err  # the approval was stored when it was given
    assert json.loads(out)["answer"] == "Published."
    assert calls(tmp_path) == ["lookup key=a", "publish key=b", "publish key=b", "lookup key=c"]
