"""What a new user reads at 80 columns: whole ids, states and words.

``runs`` keeps ids, states and stop reasons readable and shows enough of the goal to tell
runs apart.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from taskdecomp.cli import main
from tests.conftest import EXAMPLES, SALES_TOOLS
from tests.support import SEED_GOAL

SALES_SCRIPT = EXAMPLES / "sales_report" / "script.json"


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, _ = cli(capsys, *argv, "--json")
    assert code in (0, 1, 3), out
    result: dict[str, Any] = json.loads(out)
    return result


def cell(out: str, header: str, run_id: str) -> list[str]:
    """The lines of ``header``'s column in ``run_id``'s row of the ``runs`` table."""
    lines = out.splitlines()
    start = next(row for row in lines if row.startswith("id ")).index(header)
    first = lines.index(next(row for row in lines if row.startswith(run_id)))
    rows = [lines[first]]
    for row in lines[first + 1 :]:
        if not row.startswith(" "):
            break
        rows.append(row)
    return [text for row in rows if (text := row[start:].split("  ")[0].strip())]


@pytest.fixture
def sales_runs(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    """A run that succeeded and one stopped by the allowlist, both with the example's goal."""
    base = ("run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", f"scripted:{SALES_SCRIPT}")
    return [run_json(capsys, *base), run_json(capsys, *base, "--allow", "fetch_sales_data")]


def test_runs_at_80_columns_shows_whole_ids_states_stop_reasons_and_the_goal(
    sales_runs: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli(capsys, "runs")
    assert code == 0
    assert all(len(row.rstrip()) <= 80 for row in out.splitlines()), out
    assert sales_runs[1]["stop_reason"] == "invalid_plan:tool_not_allowed:fetch_refund_data"
    for result in sales_runs:
        [row] = [row for row in out.splitlines() if result["run_id"] in row]
        assert re.match(rf"{result['run_id']}  {result['status']}\b", row), row
        stop = cell(out, "stop reason", result["run_id"])
        assert "".join(stop) == result["stop_reason"], stop
        assert all(part.endswith((":", "_")) for part in stop[:-1]), stop
        goal = " ".join(cell(out, "goal", result["run_id"]))
        assert goal.endswith("…") and len(goal[:-1]) >= 30, goal
        assert SEED_GOAL.startswith(goal[:-1]), goal
