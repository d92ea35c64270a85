"""The replan strategy on the embedded model: every structured answer under a grammar."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from taskdecomp import Budget, ModelRequest, load_toolset, run_sync
from taskdecomp.models.local import LocalModel
from taskdecomp.prompts import render
from taskdecomp.strategies.replan import ReplanOptions
from taskdecomp.strategies.replan.boundary import validate_action, validate_decision
from taskdecomp.strategies.replan.schemas import action_schema, decision_schema
from tests.conftest import SALES_TOOLS
from tests.models.conftest import require_local_extra
from tests.support import SEED_GOAL, SEED_TOOLS

TOOLSET = load_toolset(SALES_TOOLS)
CATALOG = TOOLSET.catalog(TOOLSET.keys())
DONE = {
    "id": "step_1",
    "title": "Fetch sales",
    "tool": "fetch_sales_data",
    "args": {"month": "2026-04"},
    "result": {"month": "2026-04", "currency": "USD", "daily_sales": [{"day": 1, "gross": 900}]},
}


def request(phase: str, prompt: str, payload: dict[str, object], schema: dict[str, object]) -> Any:
    return ModelRequest(
        phase=phase,  # type: ignore[arg-type]
        messages=(
            {"role": "system", "content": render(prompt)},
            {"role": "user", "content": json.dumps(payload)},
        ),
        json_schema=schema,
    )


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_replanner_answers_under_its_grammar() -> None:
    require_local_extra()
    payload = {
        "objective": SEED_GOAL,
        "plan": [{k: v for k, v in DONE.items() if k != "result"}],
        "executed_steps": [DONE],
        "remaining_steps": [],
        "available_tools": CATALOG,
    }
    schema = decision_schema(CATALOG, max_steps=6, first=2, finished=["step_1"])
    response = asyncio.run(
        LocalModel().complete(request("replan", "replan/replanner", payload, schema))
    )
    decision = validate_decision(
        response.text, allowed_tools=SEED_TOOLS, max_plan_steps=6, finished={"step_1"}
    )
    assert decision is not None  # a respond or a plan that passed the boundary


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_executor_agent_answers_under_its_grammar() -> None:
    require_local_extra()
    payload = {
        "objective": SEED_GOAL,
        "plan": [{"id": "step_1", "title": "Find the manager", "instruction": "Find manager 42"}],
        "executed_steps": [],
        "step": {"id": "step_1", "title": "Find the manager", "instruction": "Find manager 42"},
        "available_tools": CATALOG,
        "turns": [],
        "turns_left": 20,
    }
    response = asyncio.run(
        LocalModel().complete(
            request("execute", "replan/executor", payload, action_schema(CATALOG))
        )
    )
    assert validate_action(response.text, allowed_tools=SEED_TOOLS) is not None


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_replan_run_on_the_embedded_model_never_fails_to_parse() -> None:
    require_local_extra()
    result = run_sync(
        SEED_GOAL,
        tools=SALES_TOOLS,
        model="local",
        strategy="replan",
        replan=ReplanOptions(max_iterations=2, max_agent_turns=2),
        budget=Budget(max_seconds=900),
    )
    assert result.plan is not None, (result.stop_reason, result.raw_plan)
    assert not result.stop_reason.endswith((":non_json", ":truncated")), result.stop_reason
    assert not result.stop_reason.startswith("llm_"), (result.stop_reason, result.message)
