"""What the command shows while it works, and how it stops: a live status on a terminal, a
plain line per phase elsewhere, Ctrl-C at any moment, and a reader that goes away.

The model is scripted with a latency, so a model call takes seconds as a real one does. A call
that a deadline or Ctrl-C must cut takes ten minutes instead, so a command that waited for it
would not end before the test gives up on it; no test measures how long the command took.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from tests.cli.terminal import spawn, taskdecomp
from tests.clitools import EXE
from tests.conftest import ROOT, SALES_TOOLS
from tests.support import SEED_GOAL, seed_plan


def slow_script(tmp_path: Path, latency_ms: int = 3000) -> str:
    """Rules (not a list), so a resumed run gets the same answers."""
    script = {
        "rules": [{"match": "available_tools", "response": seed_plan()}],
        "default": "The April summary.",
        "latency_ms": latency_ms,
    }
    path = tmp_path / "slow.json"
    path.write_text(json.dumps(script))
    return f"scripted:{path}"


def run_argv(tmp_path: Path, *extra: str, latency_ms: int = 3000) -> list[str]:
    model = slow_script(tmp_path, latency_ms)
    return ["run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", model, *extra]


NEVER_MS = 600_000
"""A model latency far past any test's patience."""


def piped(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(EXE), *argv], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_a_terminal_shows_the_model_the_phase_and_the_seconds_while_it_waits(
    tmp_path: Path,
) -> None:
    term = taskdecomp(*run_argv(tmp_path))
    term.read_until(re.compile(r"model plan · \d+s · waiting for the answer · scripted:slow\.json"))
    term.read_until(re.compile(r"model plan · [23]s · "))  # the seconds go on
    term.read_until("model finalize · ")
    assert term.wait() == 0
    assert "stop_reason=success" in term.text


def test_a_pipe_gets_one_plain_line_per_phase_and_json_gets_none(tmp_path: Path) -> None:
    proc = piped(*run_argv(tmp_path, latency_ms=200))
    assert proc.returncode == 0, proc.stderr
    model = slow_script(tmp_path, 200).removeprefix("scripted:")
    lines = proc.stderr.splitlines()
    assert f"model plan started (scripted:{model})" in lines
    assert f"model finalize started (scripted:{model})" in lines
    assert "\x1b" not in proc.stderr and "waiting for the answer" not in proc.stderr

    proc = piped(*run_argv(tmp_path, "--json", latency_ms=200))
    assert proc.returncode == 0
    assert proc.stderr == ""
    assert json.loads(proc.stdout)["stop_reason"] == "success"


def test_the_deadline_during_a_model_call_says_the_call_failed(tmp_path: Path) -> None:
    proc = piped(*run_argv(tmp_path, "--max-seconds", "1", latency_ms=NEVER_MS))
    assert proc.returncode == 1, proc.stderr
    assert re.search(r"^model plan failed \(\d+\.\d\ds\)$", proc.stderr, re.MULTILINE), proc.stderr
    assert "stop_reason=max_seconds" in proc.stdout


def test_ctrl_c_in_a_terminal_stops_the_model_call_prints_the_run_and_how_to_resume(
    tmp_path: Path,
) -> None:
    term = taskdecomp(*run_argv(tmp_path, latency_ms=NEVER_MS))
    term.read_until("waiting for the answer")
    term.ctrl_c()
    code = term.wait(timeout=120)
    assert code == 130, term.text
    text = term.text
    assert "Traceback" not in text and "stop_reason=cancelled" in text
    run_id = re.search(r"run ([0-9a-f]{32}) is stored as cancelled", text)
    assert run_id is not None, text
    assert f"taskdecomp resume {run_id[1]}" in " ".join(text.split())

    # ... and the run goes on from the store (rules: the same answers again)
    fast = slow_script(tmp_path, latency_ms=0)
    proc = piped("resume", run_id[1], "--model", fast, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["answer"] == "The April summary."


def test_a_second_ctrl_c_in_a_terminal_exits_at_once(tmp_path: Path) -> None:
    term = taskdecomp(*run_argv(tmp_path, latency_ms=NEVER_MS))
    term.read_until("waiting for the answer")
    term.ctrl_c()
    term.ctrl_c()
    assert term.wait(timeout=120) == 130
    assert "Traceback" not in term.text


def console_script() -> str:
    """The program pip writes for the ``taskdecomp`` entry point in pyproject.toml."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, name = scripts["taskdecomp"].partition(":")
    return f"import sys\nfrom {module} import {name}\nsys.exit({name}())\n"


SLOW_IMPORT = """
import importlib.abc, os, sys, time
class SlowImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "taskdecomp":
            open(os.environ["IMPORT_MARK"], "w").close()
            time.sleep(600)
        return None
sys.meta_path.insert(0, SlowImport())
"""


def test_ctrl_c_while_the_package_imports_exits_130_without_a_traceback(tmp_path: Path) -> None:
    mark = tmp_path / "importing"
    program = SLOW_IMPORT + console_script()
    term = spawn([sys.executable, "-c", program, "runs"], env={"IMPORT_MARK": str(mark)})
    until = time.monotonic() + 120
    while not mark.exists() and time.monotonic() < until:
        time.sleep(0.02)
    assert mark.exists(), term.text
    term.ctrl_c()
    assert term.wait(timeout=120) == 130
    assert term.text.replace("^C", "").strip() == ""  # the terminal echoes ^C; nothing else


def closed_pipe_run(*argv: str) -> tuple[int, str]:
    """Run with stdout a pipe whose reader is gone (``| head -1`` after its line)."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        proc = subprocess.run(
            [str(EXE), *argv], stdout=writer, stderr=subprocess.PIPE, text=True, timeout=60
        )
    finally:
        os.close(writer)
    return proc.returncode, proc.stderr


def test_a_reader_that_goes_away_ends_the_command_quietly_with_0(tmp_path: Path) -> None:
    proc = piped(*run_argv(tmp_path, "--json", latency_ms=0))
    run_id = json.loads(proc.stdout)["run_id"]
    for argv in (["show", run_id], ["show", run_id, "--json"], ["runs"], ["tree"]):
        assert closed_pipe_run(*argv) == (0, ""), argv


def test_show_piped_into_head_exits_0(tmp_path: Path) -> None:
    proc = piped(*run_argv(tmp_path, "--json", latency_ms=0))
    run_id = json.loads(proc.stdout)["run_id"]
    shell: Any = subprocess.run(
        ["bash", "-c", f'set -o pipefail; "{EXE}" show {run_id} | head -1'],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (shell.returncode, shell.stderr) == (0, "")
    assert shell.stdout.startswith(f"run {run_id}")


def test_a_decomposition_says_how_many_nodes_of_its_budget_it_has_made() -> None:
    script = ROOT / "examples" / "decomposer" / "script.json"
    goal = "Launch a developer conference in Berlin"
    proc = piped("decompose", goal, "--model", f"scripted:{script}", "--max-depth", "2")
    assert proc.returncode == 1, proc.stderr  # one node of the example times out
    lines = proc.stderr.splitlines()
    assert "level 1: asking about 1 node (0/50 nodes so far)" in lines
    assert any(
        re.fullmatch(r"level 2: asking about \d+ nodes \(\d+/50 nodes so far\)", x) for x in lines
    )
