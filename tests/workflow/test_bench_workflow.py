"""bench/workflow.py in a fast mode: every run succeeds and every row is printed."""

from __future__ import annotations

import pytest
from bench.workflow import GROUPS, main

FAST = ["--latency-ms", "0", "--repeat", "1", "--tasks", "4"]


def _rows(out: str) -> list[list[str]]:
    """The table's rows: the group (its first 15 characters), then the other columns."""
    lines = out.splitlines()
    start = next(no for no, line in enumerate(lines) if line.startswith("group")) + 1
    rows = [line for line in lines[start:] if not line.startswith("FAILED")]
    return [[line[:15].strip(), *line[15:].split()] for line in rows]


def test_sequential_rows_take_four_model_calls_per_task_and_one_more(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*FAST, "--parallel", "1"]) == 0

    out = capsys.readouterr().out
    assert "4 tasks with disjoint files" in out
    assert "target: 17 model calls" in out
    rows = _rows(out)
    groups = [f"{kept}, {'git' if git else 'no git'}" for kept, git in GROUPS]
    assert [row[0] for row in rows] == groups
    assert all(row[1:3] == ["1", "17"] for row in rows)  # max_parallel, model calls
    assert "FAILED" not in out


def test_parallel_rows_succeed_in_every_group(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*FAST, "--parallel", "1", "2", "4"]) == 0

    rows = _rows(capsys.readouterr().out)
    assert [row[1] for row in rows] == ["1", "2", "4"] * len(GROUPS)
    assert all(row[-1] != "FAILED" for row in rows)
