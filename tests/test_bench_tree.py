"""bench/tree.py in its quick mode: its three tables parse and what must hold does.

The figures are the benchmark's business (docs/benchmarks.md); here the script runs as a user
runs it, and the counts the tree's shape fixes are checked: model calls per leaf and per
roll-up, the splits each mode asks for, fewer model calls as needed than upfront, the
ratio computed from the ideal, and flat plans stopping at the first hard task.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
from bench.tree import Shape, ideal_ms

from tests.conftest import ROOT

Table = dict[str, list[str]]
"""A table's rows by their first column (repeated keys get ``#2``)."""


@pytest.fixture(scope="module")
def output() -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "tree.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    return done.stdout


def table(out: str, number: int) -> Table:
    """The rows of table ``(number)``: the lines after its header, up to a blank line."""
    lines = out.splitlines()
    start = next(no for no, line in enumerate(lines) if line.startswith(f"({number})"))
    header = next(no for no in range(start, len(lines)) if lines[no].endswith(("target", "stop")))
    rows: Table = {}
    for line in lines[header + 1 :]:
        if not line.strip():
            break
        if line.startswith(("as needed:", "FAILED")):
            continue  # a summary under the table
        cells = line.split()
        key = cells[0] if cells[0] not in rows else f"{cells[0]}#2"
        rows[key] = cells[1:]
    return rows


def ms(cell: str) -> float:
    assert cell.endswith("ms"), cell
    return float(cell.removesuffix("ms"))


def test_the_quick_run_prints_three_tables_and_no_failure(output: str) -> None:
    assert output.startswith("tree, model 20 ms, tools 10 ms, SQLite store, ")
    assert "FAILED" not in output
    assert [table(output, n) != {} for n in (1, 2, 3)] == [True, True, True]


def test_the_critical_path_rows_take_two_turns_a_leaf_and_a_roll_up_an_inner_node(
    output: str,
) -> None:
    rows = table(output, 1)
    assert sorted(rows) == ["4", "8"]  # max_parallel
    for parallel, cells in rows.items():
        leaves, model, tools, wall, ideal, ratio = cells[:6]
        # 8 leaves x (call, finish) + 2 sections and the root rolled up; a call per leaf
        assert (leaves, model, tools) == ("8", "19", "8")
        expected = ideal_ms(Shape(sections=2, tasks=4, hard=0), _latencies(), int(parallel))
        assert ms(ideal) == expected
        assert float(ratio) == pytest.approx(ms(wall) / expected, abs=0.002)
        assert float(ratio) > 0.9  # nothing beats the ideal
    assert "ideal = ceil(leaves / max_parallel) x (2 model + 1 tool) + 2 roll-up" in output


def test_the_ideal_is_the_last_wave_of_leaves_then_its_roll_ups() -> None:
    shape = Shape(sections=4, tasks=10, hard=0)
    latencies = argparse.Namespace(model_ms=200, tool_ms=100)
    assert ideal_ms(shape, latencies, 8) == 5 * 500 + 2 * 200
    assert ideal_ms(shape, latencies, 40) == 500 + 2 * 200  # the critical path
    assert ideal_ms(Shape(sections=1, tasks=3, hard=0), latencies, 8) == 500 + 200


def test_as_needed_splits_only_the_hard_tasks_and_makes_fewer_model_calls(output: str) -> None:
    rows = table(output, 2)
    keys = ("model", "execute", "decompose", "rollup", "tools", "tokens", "nodes")
    counts = {mode: dict(zip(keys, map(int, rows[mode][:7]), strict=True)) for mode in rows}
    needed, upfront = counts["as-needed"], counts["upfront"]
    assert needed["model"] < upfront["model"]
    for mode in counts.values():
        assert mode["model"] == mode["execute"] + mode["decompose"] + mode["rollup"]
    # as needed: the goal, its 2 sections and the 2 hard tasks are split; upfront: every task
    assert (needed["decompose"], upfront["decompose"]) == (5, 11)
    assert (needed["nodes"], upfront["nodes"]) == (1 + 2 + 8 + 2 * 3, 1 + 2 + 8 + 8 * 3)
    # 6 easy tasks, the hard task whose call fails, 6 parts; upfront, the 24 parts only
    assert (needed["tools"], upfront["tools"]) == (13, 24)
    for mode in ("as-needed", "upfront"):
        assert rows[mode][-3:] == ["8", "2", "success"]  # every task done, both hard ones
    assert "target: fewer model calls ok" in output


def test_flat_plans_stop_at_the_first_hard_task_and_recover_none(output: str) -> None:
    rows = table(output, 3)
    for strategy in ("plan_execute", "replan"):
        hard, easy = rows[strategy], rows[f"{strategy}#2"]
        assert hard[0] == "2" and hard[-2:] == ["0/2", "tool_error:do_task"]
        assert easy[:2] == ["0", "2"] and easy[-3:] == ["8", "0/0", "success"]  # plan, answer
    assert rows["tree"][-3:] == ["8", "2/2", "success"]
    assert rows["tree#2"][-3:] == ["8", "0/0", "success"]


def _latencies() -> argparse.Namespace:
    return argparse.Namespace(model_ms=20, tool_ms=10)
