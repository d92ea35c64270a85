"""bench/models.py in a small mode: one goal, a row per output mode, and the flags it adds.

The figures are the benchmark's business (docs/benchmarks.md); here the script runs as a user
runs it, and what must hold does: a row per mode asked for, every plan under the grammar
parsing and passing the policy, and a minimum plan size the budget cannot hold refused.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.models.conftest import require_local_extra

BENCH = ROOT / "bench" / "models.py"


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), *args],
        capture_output=True,
        text=True,
        timeout=800,
        cwd=ROOT,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_one_goal_gets_a_row_per_output_mode() -> None:
    require_local_extra()

    done = bench("--goals", "1", "--toolset", "sales", "--modes", "grammar", "--output-modes",
                 "json,prompt")  # fmt: skip

    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    rows = {
        line.split()[0]: line.split()
        for line in done.stdout.splitlines()
        if line.split() and line.split()[0] in ("grammar", "out:json", "out:prompt")
    }
    assert set(rows) == {"grammar", "out:json", "out:prompt"}, done.stdout
    # mode, seven timing columns, then parse, policy, right, prec
    assert rows["grammar"][8:10] == ["100.0%", "100.0%"], done.stdout
    for row in rows.values():
        assert len(row) == 12 and all(cell.endswith("%") or cell == "-" for cell in row[8:])


def test_a_minimum_plan_size_is_refused_where_the_budget_cannot_hold_it() -> None:
    from dataclasses import fields

    from taskdecomp import Budget

    done = bench("--goals", "1", "--min-plan-steps", "1", "--modes", "nonsense")

    assert done.returncode != 0
    assert "unknown modes ['nonsense']" in done.stderr
    if "min_plan_steps" not in {f.name for f in fields(Budget)}:
        done = bench("--goals", "1", "--toolset", "sales", "--min-plan-steps", "1")
        assert done.returncode != 0
        assert "--min-plan-steps 1 needs a Budget with min_plan_steps" in done.stderr
