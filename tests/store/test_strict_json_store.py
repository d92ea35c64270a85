"""What the CLI prints with ``--json`` and what the store keeps is strict JSON, on each backend.

Strict means what a browser, ``jq`` or PostgreSQL's ``jsonb`` accept: no ``NaN``, no
``Infinity``. Each case parses the output with a reader that refuses them.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.clitools import cli

TOOLS = '''
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
RESULTS = {
    "nan": float("nan"),
    "inf": float("inf"),
    "nested": {"rows": [{"total": 1.5}, {"total": [0, float("-inf")]}]},
    "fine": {"total": 1.5},
}


def measure(kind: str, x: float = 1.0) -> Any:
    """Return a measurement of the given kind, scaled by x."""
    with (HERE / "ledger.txt").open("a") as ledger:
        ledger.write(f"{kind} {x}\\n")
    return RESULTS[kind]
'''


def plan_text(first_args: str) -> str:
    """A three-step plan, as raw model text; the first step's ``args`` are given verbatim."""
    return (
        '{"kind": "plan", "steps": ['
        f'{{"id": "s1", "title": "Measure", "tool": "measure", "args": {first_args}}}, '
        '{"id": "s2", "title": "Again", "tool": "measure", "args": {"kind": "fine", "x": 2}}, '
        '{"id": "s3", "title": "Once more", "tool": "measure", "args": {"kind": "fine"}}]}'
    )


def refuse(name: str) -> Any:
    raise AssertionError(f"not strict JSON: {name}")


def strict(text: str) -> Any:
    return json.loads(text, parse_constant=refuse)


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], plan: str, db: str) -> Any:
    (tmp_path / "tools.py").write_text(TOOLS)
    (tmp_path / "script.json").write_text(json.dumps([plan, "the answer"]))
    code, out, err = cli(
        capsys,
        "run",
        "measure things",
        "--tools",
        str(tmp_path / "tools.py"),
        "--model",
        f"scripted:{tmp_path / 'script.json'}",
        "--repairs",
        "0",
        "--db",
        db,
        "--json",
    )
    assert code == 1, err
    return strict(out)


def ledger(tmp_path: Path) -> list[str]:
    path = tmp_path / "ledger.txt"
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize("kind", ["nan", "inf", "nested"])
def test_a_non_finite_tool_result_is_a_tool_error_and_every_output_parses_strictly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], store_url: str, kind: str
) -> None:
    result = run(tmp_path, capsys, plan_text(f'{{"kind": "{kind}"}}'), store_url)
    assert result["stop_reason"] == "tool_error:measure"
    assert "JSON has no NaN or infinity" in result["trace"][0]["error"]
    assert result["history"] == [] and ledger(tmp_path) == [f"{kind} 1.0"]

    code, out, _ = cli(capsys, "show", result["run_id"], "--db", store_url, "--json")
    shown = strict(out)
    assert code == 0 and shown["stop_reason"] == "tool_error:measure"
    assert shown["history"] == []
    code, out, _ = cli(capsys, "runs", "--db", store_url, "--json")
    assert code == 0 and [r["run_id"] for r in strict(out)] == [result["run_id"]]


@pytest.mark.parametrize("number", ["1e400", "-1e400", "NaN"])
def test_a_non_finite_plan_argument_stops_before_any_tool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], store_url: str, number: str
) -> None:
    plan = plan_text(f'{{"kind": "fine", "x": {number}}}')
    result = run(tmp_path, capsys, plan, store_url)
    assert result["stop_reason"] == "invalid_plan:non_json"
    assert result["usage"]["tool_calls"] == 0 and ledger(tmp_path) == []
    code, out, _ = cli(capsys, "show", result["run_id"], "--db", store_url, "--json")
    assert code == 0 and strict(out)["raw_plan"] == plan


def test_a_nan_kept_by_an_older_version_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    result = run(tmp_path, capsys, plan_text('{"kind": "fine", "x": NaN}'), sqlite_url)
    database = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(database) as conn:  # the store once wrote NaN as it came
        conn.execute(
            "UPDATE runs SET usage = ? WHERE id = ?",
            (
                '{"llm_calls": 1, "tool_calls": 0, "tokens_in": 1, "tokens_out": 1, '
                '"cost_usd": NaN, "seconds": 0.1}',
                result["run_id"],
            ),
        )
    code, out, err = cli(capsys, "show", result["run_id"], "--db", sqlite_url, "--json")
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("taskdecomp: error: cannot print strict JSON")
    assert "'/usage/cost_usd' is nan" in lines[0]
    code, out, _ = cli(capsys, "show", result["run_id"], "--db", sqlite_url)
    assert code == 0 and "stop_reason=invalid_plan:non_json" in out  # people still see it
