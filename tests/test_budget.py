from __future__ import annotations

import pytest

from taskdecomp import Budget, StopRun
from taskdecomp.budget import Meter
from taskdecomp.errors import ConfigError
from taskdecomp.settings import load_settings


def test_seed_defaults() -> None:
    budget = Budget()
    assert (budget.max_plan_steps, budget.max_execute_steps, budget.max_tool_calls) == (6, 8, 8)
    assert (budget.max_seconds, budget.max_parallel) == (60, 8)
    assert budget.max_llm_calls is budget.max_tokens is budget.max_cost_usd is None


@pytest.mark.parametrize(
    "kwargs",
    [{"max_plan_steps": 0}, {"max_seconds": 0}, {"max_parallel": 0}, {"max_tokens": -1}],
)
def test_out_of_range_budgets_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        Budget(**kwargs)  # type: ignore[arg-type]


def test_meter_checks_tokens_before_and_after() -> None:
    meter = Meter(budget=Budget(max_tokens=100))
    meter.before_model_call("plan", estimated_tokens=60)
    meter.after_model_call("plan", tokens_in=60, tokens_out=30, cost_usd=0)
    with pytest.raises(StopRun) as caught:
        meter.before_model_call("finalize", estimated_tokens=20)
    assert caught.value.reason == "max_tokens" and caught.value.llm_phase == "finalize"
    assert meter.llm_calls == 1


def test_settings_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKDECOMP_MAX_TOOL_CALLS", "3")
    monkeypatch.setenv("TASKDECOMP_MAX_SECONDS", "9.5")
    settings = load_settings()
    assert settings.budget().max_tool_calls == 3
    assert settings.budget(max_tool_calls=5, max_seconds=None).max_tool_calls == 5
    assert settings.budget().max_seconds == 9.5
    assert settings.budget().max_plan_steps == 6


def test_settings_out_of_range_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKDECOMP_MAX_PARALLEL", "0")
    with pytest.raises(ConfigError, match="max_parallel"):
        load_settings().budget()
