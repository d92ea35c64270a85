"""The embedded model's output modes, its one load per process, and the deadline it fits.

Sized for a busy 2-core machine: no test measures how long anything took.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from taskdecomp import Budget, ModelRequest, resume_sync, run_sync, validate_plan_action
from taskdecomp.models import resolve_model
from taskdecomp.models.local import (
    DEFAULT_MAX_SECONDS,
    LocalDefaults,
    LocalModel,
    loaded_models,
    local_defaults,
    set_local_defaults,
)
from taskdecomp.models.outputs import schema_instructions
from taskdecomp.models.scripted import ScriptedModel
from taskdecomp.settings import load_settings
from taskdecomp.store import open_store
from tests.conftest import SALES_TOOLS
from tests.models.conftest import require_local_extra
from tests.models.test_local import plan_request
from tests.support import SEED_GOAL, SEED_TOOLS

LOADED = Budget(max_seconds=600)


def loads_of(path: Path, n_ctx: int) -> int:
    """How many times this process loaded ``path`` with a ``n_ctx`` context."""
    return sum(m.path == path and m.n_ctx == n_ctx for m in loaded_models())


def test_tool_mode_is_answered_as_native_and_the_provider_defaults_to_native() -> None:
    require_local_extra()

    assert LocalModel(output_mode="tool").output_mode == "native"
    assert LocalModel(output_mode="prompt").output_mode == "prompt"
    model = resolve_model("local")
    assert isinstance(model, LocalModel) and model.output_mode == "native"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_models_of_one_file_with_other_thread_counts_share_one_load() -> None:
    path = require_local_extra()
    n_ctx = 1536  # a size no other test loads: this test's loads alone are counted
    request = ModelRequest(phase="finalize", messages=({"role": "user", "content": "Say hello."},))
    one = LocalModel(n_ctx=n_ctx, n_threads=1, max_output_tokens=4)
    two = LocalModel(n_ctx=n_ctx, n_threads=2, max_output_tokens=4)

    first = asyncio.run(one.complete(request))
    second = asyncio.run(two.complete(request))

    assert first.tokens_out > 0 and second.tokens_out > 0
    assert loads_of(path, n_ctx) == 1


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_resumed_run_uses_the_model_the_first_run_loaded(tmp_path: Path) -> None:
    path = require_local_extra()
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    before = local_defaults()
    try:
        set_local_defaults(LocalDefaults(n_threads=1))
        first = run_sync(
            SEED_GOAL, tools=SALES_TOOLS, model="local", store=store, budget=Budget(max_seconds=0.2)
        )
        assert first.stop_reason == "max_seconds"
        set_local_defaults(LocalDefaults(n_threads=2))  # the resumed run's model differs
        again = resume_sync(first.run_id, store=store, model="local", budget=LOADED)
    finally:
        set_local_defaults(before)
        store.close()

    assert again.plan is not None, (again.stop_reason, again.raw_plan)
    assert loads_of(path, 4096) == 1


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_json_mode_writes_json_with_the_schema_stated() -> None:
    require_local_extra()

    response = asyncio.run(LocalModel(output_mode="json").complete(plan_request()))

    assert isinstance(json.loads(response.text), (dict, list, str, int, float, bool, type(None)))
    # the schema was stated in the system prompt: the prompt is longer than native's
    native = asyncio.run(LocalModel().complete(plan_request()))
    stated = len(schema_instructions(plan_request().json_schema or {})) // 8
    assert response.tokens_in > native.tokens_in + stated


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_prompt_mode_takes_the_json_value_out_of_free_text() -> None:
    require_local_extra()
    request = ModelRequest(
        phase="finalize",
        messages=(
            {"role": "system", "content": "You are a helpful assistant."},
            {
                "role": "user",
                "content": 'Write a sentence, then the JSON object {"ok": true} in a json '
                "code fence.",
            },
        ),
        json_schema={
            "type": "object",
            "properties": {"ok": {"type": "boolean"}},
            "required": ["ok"],
        },
        schema_name="answer",
    )

    response = asyncio.run(LocalModel(output_mode="prompt", max_output_tokens=80).complete(request))

    # with no grammar the model writes prose around it; only the JSON value is kept
    assert response.text.startswith(("{", "[")), response.text
    json.loads(response.text)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_plan_in_native_mode_passes_the_policy_boundary_as_before() -> None:
    require_local_extra()

    response = asyncio.run(LocalModel(output_mode="native").complete(plan_request()))

    plan = validate_plan_action(
        json.loads(response.text), max_plan_steps=6, allowed_tools=set(SEED_TOOLS)
    )
    assert 3 <= len(plan.steps) <= 6


def test_the_local_model_gets_its_longer_deadline_unless_one_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    require_local_extra()
    local = LocalModel()

    assert load_settings().budget(model=local).max_seconds == DEFAULT_MAX_SECONDS
    assert load_settings().budget(model=local, max_seconds=20).max_seconds == 20
    assert load_settings().budget(model=ScriptedModel(responses=[])).max_seconds == 60
    assert load_settings().budget().max_seconds == 60
    monkeypatch.setenv("TASKDECOMP_MAX_SECONDS", "45")
    assert load_settings().budget(model=local).max_seconds == 45


class SlowCpuModel(ScriptedModel):
    """A scripted model that says, as the embedded model does, which deadline fits it."""

    default_max_seconds = 240.0


def test_a_run_without_a_budget_takes_the_deadline_its_model_fits(tmp_path: Path) -> None:
    from taskdecomp import runconfig

    plan = {
        "kind": "plan",
        "steps": [
            {"id": f"s{n}", "title": tool, "tool": tool, "args": {"month": "2026-04"}}
            for n, tool in enumerate(
                ("fetch_sales_data", "fetch_refund_data", "calculate_monthly_kpis"), 1
            )
        ],
    }
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        fitted = run_sync(
            SEED_GOAL, tools=SALES_TOOLS, model=SlowCpuModel(responses=[plan, "done"]), store=store
        )
        plain = run_sync(
            SEED_GOAL, tools=SALES_TOOLS, model=ScriptedModel(responses=[plan, "done"]), store=store
        )
        budgets = [
            runconfig.stored_config(store.load_run(result.run_id)).budget.max_seconds
            for result in (fitted, plain)
        ]
    finally:
        store.close()

    assert fitted.stop_reason == "success"
    assert budgets == [240.0, 60]
