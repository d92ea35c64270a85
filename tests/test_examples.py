"""The examples in examples/ run as the docs say."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest

from tests.clitools import cli
from tests.conftest import EXAMPLES, ROOT, SALES_TOOLS
from tests.store.conftest import pg_url  # noqa: F401  (a fixture: a fresh PostgreSQL schema)


def test_run_decomposer_example_shows_both_modes() -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "run_decomposer.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == (
        "whole plan: Plan #1 got 15 subtasks; node 6 was not processed because the model did "
        "not answer."
    )
    assert lines[1] == "one node:   Plan #1 got 3 subtasks."
    assert "    [19] Volunteers (leaf)" in lines


def test_the_replan_example_runs_two_waves_and_answers(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(
        capsys,
        "run",
        "Prepare an April 2026 monthly sales summary for manager_id=42 in USD.",
        "--tools",
        str(SALES_TOOLS),
        "--strategy",
        "replan",
        "--model",
        f"scripted:{EXAMPLES / 'replan' / 'sales.json'}",
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["stop_reason"] == "success" and data["usage"]["llm_calls"] == 3
    kpis = next(h for h in data["history"] if h["plan_step"]["id"] == "s4")
    assert kpis["observation"]["net_sales_usd"] == 26825.0  # computed from the $ref'd month
    assert "$26,825" in data["answer"]


TREE = EXAMPLES / "tree"
TREE_GOAL = "Launch a developer conference in Berlin"


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_tree_example_splits_where_asked_and_where_a_call_failed(
    backend: str, request: pytest.FixtureRequest
) -> None:
    db = [] if backend == "sqlite" else ["--db", request.getfixturevalue("pg_url")]
    proc = subprocess.run(
        [sys.executable, str(TREE / "run_tree.py"), *db],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "as needed: success, 20 model calls, 7 tool calls"
    assert lines[1].startswith(
        f"[1] {TREE_GOAL}: ok (split: the executor asked to split the task: A conference"
    )
    assert lines[2] == (
        "  [2] Book the venue: ok -> Booked bcc Hall B (350 seats) for 2027-06-10, booking "
        "BV-bcc-hall-b-2027-06-10."
    )
    assert lines[3].startswith("  [3] Line up the speakers: ok (split: the executor asked")
    assert (
        lines[4]
        == "    [5] Invite a keynote speaker: ok -> Grace Example accepted the opening keynote."
    )
    assert lines[6] == (
        "  [4] Open ticket sales: ok (split: an attempt failed (tool_error:open_ticket_sales): "
        "ValueError: the ticket shop opens one tier per call, got 2: ['early-bird', 'regular'])"
    )
    assert lines[7:9] == [
        "    [7] Early-bird tickets: ok -> 150 early-bird tickets on sale at 149 EUR.",
        "    [8] Regular tickets: ok -> 200 regular tickets on sale at 249 EUR.",
    ]
    assert lines[9].startswith("answer: The conference is set for 2027-06-10 at bcc Hall B")
    # upfront: no attempt is wasted, the decomposer splits what it did not mark a leaf
    assert lines[10] == "upfront: success, 17 model calls, 6 tool calls"
    assert lines[11] == (
        "node 3 alone: success, 5 model calls, 2 tool calls: Grace Example gives the opening "
        "keynote; the call for papers is open until 2027-03-01."
    )


def readme_tree_command() -> list[str]:
    """The command of the README's "Execute a plan tree" section, its paths made absolute."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Execute a plan tree\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, flags=re.DOTALL)
    argv = shlex.split(block.replace("\\\n", " "))
    assert argv[0] == "taskdecomp", block
    return [arg.replace("examples/", f"{EXAMPLES}/") for arg in argv[1:]]


def test_the_readme_tree_command_runs_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    argv = readme_tree_command()
    assert argv[:2] == ["run", TREE_GOAL] and argv[argv.index("--strategy") + 1] == "tree"
    code, out, err = cli(capsys, *argv, "--json")
    assert code == 0, err
    data = json.loads(out)
    # what the README says: 20 model calls, 7 tool calls, one of them refused by the shop
    assert (data["stop_reason"], data["usage"]["llm_calls"]) == ("success", 20)
    assert data["usage"]["tool_calls"] == 7
    calls = [(entry["step_id"], entry["tool"], entry["ok"]) for entry in data["trace"]]
    assert ("node-4", "open_ticket_sales", False) in calls  # both tiers at once: refused
    assert sorted(c for c in calls if c[1] == "open_ticket_sales" and c[2]) == [
        ("node-7", "open_ticket_sales", True),
        ("node-8", "open_ticket_sales", True),
    ]
    assert "350 tickets are on sale" in data["answer"]


def local_example_command() -> list[str]:
    """The command of the embedded model's example (docs/local-model.md, linked from the
    README), its paths made absolute."""
    text = (ROOT / "docs" / "local-model.md").read_text()
    section = text.split("\n## The example\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, flags=re.DOTALL)
    argv = shlex.split(block.replace("\\\n", " "))
    assert argv[0] == "taskdecomp" and "--model" not in argv, block
    return [arg.replace("examples/", f"{EXAMPLES}/") for arg in argv[1:]]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_embedded_model_example_runs_as_written() -> None:
    from tests.clitools import EXE
    from tests.models.conftest import require_local_extra

    require_local_extra()
    # as the docs run it: no model named, no deadline given (the embedded model's applies)
    proc = subprocess.run(
        [str(EXE), *local_example_command(), "--json"],
        capture_output=True,
        text=True,
        timeout=800,
        check=False,
    )
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    data = json.loads(proc.stdout)
    assert data["stop_reason"] == "success" and data["answer"]
    assert data["usage"]["llm_calls"] == 2 and data["usage"]["tool_calls"] >= 3
    assert all(step["args"].get("month", "2026-04") == "2026-04" for step in data["plan"])
