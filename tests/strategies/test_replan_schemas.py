"""The replanner's and executor's schemas: every answer they allow passes the boundary."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from taskdecomp import load_toolset
from taskdecomp.strategies.replan.boundary import (
    Call,
    Finish,
    Respond,
    validate_action,
    validate_decision,
)
from taskdecomp.strategies.replan.schemas import action_schema, decision_schema
from tests.conftest import SALES_TOOLS

CATALOG = load_toolset(SALES_TOOLS).catalog(load_toolset(SALES_TOOLS).keys())
ALLOWED = [entry["name"] for entry in CATALOG]


def test_both_schemas_compile_to_a_llama_cpp_grammar() -> None:
    from llama_cpp import LlamaGrammar

    for schema in (
        decision_schema(CATALOG, max_steps=6, first=4, finished=["step_1", "step_2"]),
        action_schema(CATALOG),
    ):
        LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)


@pytest.mark.parametrize(
    "answer",
    [
        {"kind": "respond", "response": "Net sales were $26,825."},
        {
            "kind": "plan",
            "steps": [
                {"id": "step_4", "title": "Fetch refunds", "tool": "fetch_refund_data",
                 "args": {"month": "2026-04"}, "depends_on": ["step_1"]},
                {"id": "step_5", "title": "Summarize", "instruction": "Write the summary"},
            ],
        },
    ],
)  # fmt: skip
def test_answers_the_decision_schema_allows_pass_the_boundary(answer: Any) -> None:
    schema = decision_schema(CATALOG, max_steps=6, first=4, finished=["step_1", "step_2"])
    jsonschema.validate(answer, schema)
    decision = validate_decision(
        json.dumps(answer), allowed_tools=ALLOWED, max_plan_steps=6, finished={"step_1", "step_2"}
    )
    assert isinstance(decision, Respond) or len(decision.steps) == 2


@pytest.mark.parametrize(
    "answer",
    [
        {"kind": "respond"},
        {"kind": "plan", "steps": [{"id": "step_1", "title": "Again", "instruction": "Again"}]},
        {"kind": "call", "tool": "fetch_sales_data", "args": {}},
    ],
)
def test_the_decision_schema_refuses_what_the_boundary_refuses(answer: Any) -> None:
    schema = decision_schema(CATALOG, max_steps=6, first=4, finished=["step_1", "step_2"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(answer, schema)


def test_actions_the_schema_allows_pass_the_boundary() -> None:
    schema = action_schema(CATALOG)
    call = {"kind": "call", "tool": "get_manager_profile", "args": {"manager_id": 42}}
    finish = {"kind": "finish", "result": "Anna manages team 42."}
    for action in (call, finish):
        jsonschema.validate(action, schema)
    assert isinstance(validate_action(json.dumps(call), allowed_tools=ALLOWED), Call)
    assert isinstance(validate_action(json.dumps(finish), allowed_tools=ALLOWED), Finish)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"kind": "call", "tool": "delete_records", "args": {}}, schema)
