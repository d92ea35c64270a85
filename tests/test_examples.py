"""The examples in examples/ run as the docs say."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import EXAMPLES


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
