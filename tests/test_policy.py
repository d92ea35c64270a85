"""The policy boundary: strict JSON and the seed's plan rules, including property tests."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskdecomp import StopRun, is_known, parse_model_json, validate_plan_action
from tests.support import SEED_TOOLS, plan_of, seed_plan, step


def reason_of(action: Any, **kwargs: Any) -> str:
    kwargs.setdefault("max_plan_steps", 6)
    kwargs.setdefault("allowed_tools", SEED_TOOLS)
    with pytest.raises(StopRun) as caught:
        validate_plan_action(action, **kwargs)
    return caught.value.reason


def test_the_seed_plan_is_valid_and_keeps_order() -> None:
    plan = validate_plan_action(seed_plan(), max_plan_steps=6, allowed_tools=SEED_TOOLS)
    assert [s.id for s in plan.steps] == [f"step_{i}" for i in range(1, 6)]
    assert not plan.is_dag
    assert plan.dependencies()["step_3"] == ("step_2",)


def test_values_are_stripped_and_null_args_become_empty() -> None:
    raw = plan_of(
        {"id": " s1 ", "title": " T ", "tool": " fetch_sales_data ", "args": None},
        step(2, "fetch_sales_data", {"month": "2026-04"}),
        step(3, "fetch_sales_data", {"month": "2026-05"}),
    )
    first = validate_plan_action(raw, max_plan_steps=6, allowed_tools=SEED_TOOLS).steps[0]
    assert (first.id, first.title, first.tool, dict(first.args)) == (
        "s1",
        "T",
        "fetch_sales_data",
        {},
    )


def test_rules_apply_in_the_seeds_order() -> None:
    # extra top-level keys are reported before the step count
    assert reason_of({"kind": "plan", "steps": [], "x": 1}) == "invalid_plan:extra_keys"
    # the step count before any step's content
    assert reason_of(plan_of("x", "y")) == "invalid_plan:min_steps"
    # within a step: extra keys before a missing id
    assert reason_of(plan_of({"x": 1}, "y", "z")) == "invalid_plan:step_1_extra_keys"
    # the first bad step wins
    bad = plan_of(step(1, "nope"), {"id": "2"}, step(3, "a"))
    assert reason_of(bad) == "invalid_plan:tool_not_allowed:nope"


def test_min_and_max_steps_are_configurable() -> None:
    plan = plan_of(step(1, "fetch_sales_data"))
    assert validate_plan_action(plan, max_plan_steps=6, allowed_tools=SEED_TOOLS, min_plan_steps=1)
    assert reason_of(seed_plan(), max_plan_steps=4) == "invalid_plan:max_steps"


def test_depends_on_makes_a_dag() -> None:
    raw = plan_of(
        step(1, "fetch_sales_data", depends_on=[]),
        step(2, "fetch_refund_data", depends_on=[]),
        step(3, "calculate_monthly_kpis", depends_on=["step_1", "step_2", "step_1"]),
    )
    plan = validate_plan_action(raw, max_plan_steps=6, allowed_tools=SEED_TOOLS)
    assert plan.is_dag
    assert plan.dependencies() == {"step_1": (), "step_2": (), "step_3": ("step_1", "step_2")}
    assert plan.to_list()[2]["depends_on"] == ["step_1", "step_2"]


def test_a_long_cycle_is_found_and_named() -> None:
    steps = [step(i, "fetch_sales_data", depends_on=[f"step_{i + 1}"]) for i in range(1, 6)]
    steps.append(step(6, "fetch_sales_data", depends_on=["step_1"]))
    with pytest.raises(StopRun) as caught:
        validate_plan_action(plan_of(*steps), max_plan_steps=6, allowed_tools=SEED_TOOLS)
    assert caught.value.reason == "invalid_plan:cycle"
    assert "step_1 -> step_2" in caught.value.message


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"a": Infinity}', "non-finite"),
        ('{"a": -Infinity}', "non-finite"),
        ('{"a": 1e400}', "non-finite number 1e400"),
        ('{"a": [-1e999]}', "non-finite number -1e999"),
        ('{"a": 1E+400}', "non-finite number 1E+400"),
        ('{"a": ' + "9" * 400 + ".5}", "beyond a float's range"),
        ('{"a": 1, "a": 2}', "duplicate key"),
        ('{"a": "\x00"}', "NUL"),
        ("[" * 33 + "]" * 33, "nesting deeper than 32"),
        ("[" * 5000 + "]" * 5000, ""),
        ("{'a': 1}", "not strict JSON"),
        ("", "not strict JSON"),
    ],
)
def test_strict_json_refuses(text: str, problem: str) -> None:
    with pytest.raises(StopRun) as caught:
        parse_model_json(text)
    assert caught.value.reason == "invalid_plan:non_json"
    assert problem in caught.value.message


def test_strict_json_accepts_depth_32_and_unicode() -> None:
    assert parse_model_json("[" * 32 + "]" * 32) is not None
    assert parse_model_json('{"name": "Müller \\u00e9"}') == {"name": "Müller é"}


def test_size_cap_is_configurable() -> None:
    with pytest.raises(StopRun):
        parse_model_json('"' + "x" * 100 + '"', max_chars=50)


# --- property tests ----------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)

step_values = st.fixed_dictionaries(
    {},
    optional={
        "id": st.sampled_from(["step_1", "step_2", "step_3", " ", "", 5]),
        "title": st.sampled_from(["Fetch", "", None]),
        "tool": st.sampled_from([*SEED_TOOLS, "rm_rf", "", None]),
        "args": st.one_of(
            st.dictionaries(st.text(max_size=5), json_values, max_size=3), json_values
        ),
        "depends_on": st.lists(st.sampled_from(["step_1", "step_2", "step_3", "x"]), max_size=3),
        "extra": json_values,
    },
)

plans = st.fixed_dictionaries(
    {"kind": st.sampled_from(["plan", "plan", "plan", "invalid", "todo"])},
    optional={
        "steps": st.lists(step_values | json_values, max_size=8),
        "notes": json_values,
    },
)


@settings(max_examples=400, deadline=None)
@given(plans | json_values)
def test_any_parsed_value_is_a_plan_or_a_known_stop(action: Any) -> None:
    try:
        plan = validate_plan_action(action, max_plan_steps=6, allowed_tools=SEED_TOOLS)
    except StopRun as stop:
        assert stop.reason.startswith("invalid_plan:")
        assert is_known(stop.reason)
        return
    assert 3 <= len(plan.steps) <= 6
    assert all(s.tool in SEED_TOOLS for s in plan.steps)
    assert len({s.id for s in plan.steps}) == len(plan.steps)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=200) | json_values.map(json.dumps))
def test_any_text_parses_or_is_non_json(text: str) -> None:
    try:
        parse_model_json(text)
    except StopRun as stop:
        assert stop.reason == "invalid_plan:non_json"
        assert stop.message
