"""``decompose --json`` and ``tree --json`` print strict JSON; budgets must be finite numbers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.clitools import cli
from tests.conftest import EXAMPLES, SALES_TOOLS
from tests.support import SEED_GOAL

SALES_SCRIPT = EXAMPLES / "sales_report" / "script.json"


def refuse(name: str) -> Any:
    raise AssertionError(f"not strict JSON: {name}")


def strict(text: str) -> Any:
    return json.loads(text, parse_constant=refuse)


BIG_META = '{"budget_eur": 1.7976931348623157e308, "seats": ' + "9" * 30 + "}"
ROOT_ANSWER = '{"children": [{"name": "Venue", "context": {"meta": ' + BIG_META + "}}]}"


@pytest.mark.parametrize(
    "venue_answer",
    [
        '{"children": [{"name": "Shortlist", "context": {"meta": {"budget_eur": 1e400}}}]}',
        '{"children": [{"name": "Shortlist", "context": {"sections": [1, -1e999]}}]}',
    ],
)
def test_a_non_finite_answer_is_invalid_children_and_the_output_parses_strictly(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, venue_answer: str
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([ROOT_ANSWER, venue_answer]))
    code, out, _ = cli(
        capsys,
        "decompose",
        "Plan a conference",
        "--model",
        f"scripted:{script}",
        "--max-depth",
        "2",
        "--retry-limit",
        "0",
        "--json",
    )
    result = strict(out)
    assert code == 1
    [venue] = result["created_tasks"]  # the largest finite numbers are fine
    assert venue["context"]["meta"] == {"budget_eur": 1.7976931348623157e308, "seats": 10**30 - 1}
    assert result["failed_nodes"] == [venue["id"]]
    failure = result["stats"]["failures"][str(venue["id"])]
    assert failure["reason"] == "invalid_children:non_json"
    assert "non-finite number" in failure["message"]

    code, out, _ = cli(capsys, "tree", "1", "--json")
    assert code == 0
    assert [n["name"] for n in strict(out)["nodes"]] == ["Plan a conference", "Venue"]


@pytest.mark.parametrize(
    ("flags", "env", "name"),
    [
        (["--max-seconds", "inf"], {}, "max_seconds"),
        (["--max-seconds", "nan"], {}, "max_seconds"),
        (["--max-cost-usd", "inf"], {}, "max_cost_usd"),
        ([], {"TASKDECOMP_MAX_COST_USD": "nan"}, "max_cost_usd"),
    ],
)
def test_a_non_finite_budget_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    flags: list[str],
    env: dict[str, str],
    name: str,
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    model = f"scripted:{SALES_SCRIPT}"
    argv = ["run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", model, "--json", *flags]
    code, out, err = cli(capsys, *argv)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("taskdecomp: error: ")
    assert f"{name} must be a" in lines[0] and "finite" in lines[0]
