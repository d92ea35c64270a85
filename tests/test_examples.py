"""The examples in examples/ run as the docs say."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.clitools import cli
from tests.conftest import EXAMPLES, SALES_TOOLS


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
