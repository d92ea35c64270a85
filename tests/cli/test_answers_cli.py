"""``run --answer-schema`` and the answer shown as it streams on a terminal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.terminal import taskdecomp
from tests.clitools import cli
from tests.conftest import SALES_TOOLS
from tests.support import SEED_GOAL, seed_plan

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"net_sales": {"type": "number"}, "risk": {"type": "string"}},
    "required": ["net_sales", "risk"],
}

ANSWER = (
    "April net sales came to 112,000 USD after refunds. The refund rate held under four "
    "percent. One risk: a single customer makes up a third of the month's gross sales."
)


def script(tmp_path: Path, *, stream_ms: float = 0) -> str:
    body = {
        "rules": [
            {"match": "available_tools", "response": seed_plan()},
            {"match": "answer schema", "response": {"net_sales": 112000, "risk": "one customer"}},
        ],
        "default": ANSWER,
        "stream_ms": stream_ms,
    }
    path = tmp_path / "model.json"
    path.write_text(json.dumps(body))
    return f"scripted:{path}"


def run_argv(tmp_path: Path, *extra: str, stream_ms: float = 0) -> list[str]:
    model = script(tmp_path, stream_ms=stream_ms)
    return ["run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", model, *extra]


def test_answer_schema_prints_the_typed_output_with_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = tmp_path / "answer.json"
    schema.write_text(json.dumps(SCHEMA))
    code, out, _ = cli(capsys, *run_argv(tmp_path, "--answer-schema", str(schema), "--json"))
    assert code == 0, out
    result = json.loads(out)
    assert result["output"] == {"net_sales": 112000, "risk": "one customer"}
    assert json.loads(result["answer"]) == result["output"]


def test_without_answer_schema_output_is_null(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(capsys, *run_argv(tmp_path, "--json"))
    assert code == 0
    result = json.loads(out)
    assert result["output"] is None and result["answer"] == ANSWER


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "cannot be read"),
        ("[1, 2]", "holds a JSON list, not a schema object"),
        ("{not json", "is not JSON"),
        ('{"type": 12}', "not a valid JSON schema"),
    ],
)
def test_a_bad_answer_schema_is_a_one_line_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, says: str
) -> None:
    schema = tmp_path / "answer.json"
    if content is not None:
        schema.write_text(content)
    code, out, err = cli(capsys, *run_argv(tmp_path, "--answer-schema", str(schema)))
    assert code == 2
    assert says in err and "answer" in err
    assert len(err.strip().splitlines()) == 1
    assert out == ""


def test_a_terminal_shows_the_answer_while_it_streams(tmp_path: Path) -> None:
    term = taskdecomp(*run_argv(tmp_path, stream_ms=4000), columns=200)
    term.read_until("April net sales came")  # the first words, while the rest streams
    assert term.status is None  # the run has not ended
    assert "stop_reason=" not in term.text
    assert term.wait() == 0
    assert "stop_reason=success" in term.text
    assert "a third of the month's gross sales." in term.text
