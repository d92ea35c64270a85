"""The scripted model: both file forms, latency, simulated failures."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from taskdecomp import (
    ModelError,
    ModelNotFoundError,
    ModelRequest,
    ModelTimeoutError,
    resolve_model,
)


def ask(model: Any, text: str = "hello", phase: str = "plan") -> str:
    request = ModelRequest(phase=phase, messages=({"role": "user", "content": text},))  # type: ignore[arg-type]
    return asyncio.run(model.complete(request)).text


def write(tmp_path: Path, data: Any) -> str:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    return f"scripted:{path}"


def test_list_form_answers_in_order_then_fails_clearly(tmp_path: Path) -> None:
    model = resolve_model(write(tmp_path, ["one", {"kind": "plan"}]))
    assert ask(model) == "one"
    assert json.loads(ask(model)) == {"kind": "plan"}
    with pytest.raises(ModelError, match="no scripted answer left") as caught:
        ask(model)
    assert caught.value.kind == "script_exhausted"


def test_responses_object_form(tmp_path: Path) -> None:
    model = resolve_model(write(tmp_path, {"responses": ["a", "b"]}))
    assert [ask(model), ask(model)] == ["a", "b"]


def test_rules_match_the_messages_and_fall_back_to_default(tmp_path: Path) -> None:
    model = resolve_model(
        write(tmp_path, {"rules": [{"match": "sales", "response": "S"}], "default": "D"})
    )
    assert ask(model, "monthly sales") == "S"
    assert ask(model, "other") == "D"
    assert ask(model, "sales again") == "S"  # rules never run out


def test_a_rule_with_a_phase_answers_only_that_phase(tmp_path: Path) -> None:
    rules = [
        {"match": "sales", "response": "as planner", "phase": "plan"},
        {"match": "sales", "response": "as combiner", "phase": "finalize"},
        {"match": "sales", "response": "anyone else"},
    ]
    model = resolve_model(write(tmp_path, {"rules": rules}))
    assert ask(model, "sales", phase="plan") == "as planner"
    assert ask(model, "sales", phase="finalize") == "as combiner"
    assert ask(model, "sales", phase="replan") == "anyone else"


def test_rules_without_default_fail_on_no_match(tmp_path: Path) -> None:
    model = resolve_model(write(tmp_path, {"rules": [{"match": "x", "response": "X"}]}))
    with pytest.raises(ModelError, match="no rule matches"):
        ask(model, "y")


def test_latency(tmp_path: Path) -> None:
    model = resolve_model(write(tmp_path, {"responses": ["a"], "latency_ms": 150}))
    started = time.monotonic()
    ask(model)
    assert time.monotonic() - started >= 0.14


def test_simulated_failures(tmp_path: Path) -> None:
    model = resolve_model(
        write(tmp_path, [{"error": "timeout"}, {"error": "empty"}, {"error": "rate"}])
    )
    with pytest.raises(ModelTimeoutError):
        ask(model)
    assert ask(model) == ""
    with pytest.raises(ModelError) as caught:
        ask(model)
    assert caught.value.kind == "rate"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "is not JSON"),
        (json.dumps({"responses": [], "rules": []}), "exactly one"),
        (json.dumps({"rules": [{"match": "(", "response": 1}]}), "not a valid script"),
        (json.dumps({"responses": ["a"], "surprise": 1}), "not a valid script"),
        (json.dumps({"responses": ["a"], "latency_ms": -1}), "not a valid script"),
        (json.dumps({"rules": [{"match": "a", "response": 1, "phase": "x"}]}), "phase"),
    ],
)
def test_bad_script_files(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ModelNotFoundError, match=message):
        resolve_model(f"scripted:{path}")


def test_scripted_needs_a_path() -> None:
    with pytest.raises(ModelNotFoundError, match="needs a file"):
        resolve_model("scripted")
