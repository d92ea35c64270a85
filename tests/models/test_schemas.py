"""The plan schema that constrains structured output."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from taskdecomp import load_toolset
from taskdecomp.models.schemas import (
    ARG_STRING_MAX_CHARS,
    TITLE_PATTERN,
    is_strict_compatible,
    plan_schema,
)
from taskdecomp.tools import Toolset
from tests.conftest import SALES_TOOLS
from tests.support import SEED_TOOLS


def sales_schema(max_steps: int = 6) -> dict[str, Any]:
    toolset = load_toolset(SALES_TOOLS)
    return plan_schema(toolset.catalog(toolset.keys()), min_steps=3, max_steps=max_steps)


def variants(schema: dict[str, Any], position: int = 1) -> dict[str, dict[str, Any]]:
    step = schema["$defs"][f"step_{position}"]
    return {v["properties"]["tool"]["enum"][0]: v for v in step.get("anyOf", [step])}


def args_of(schema: dict[str, Any], variant: dict[str, Any]) -> dict[str, Any]:
    ref = variant["properties"]["args"]["$ref"]
    return schema["$defs"][ref.removeprefix("#/$defs/")]  # type: ignore[no-any-return]


def test_tool_names_are_an_enum_with_one_branch_per_tool() -> None:
    schema = sales_schema()

    for position in range(1, 7):
        by_tool = variants(schema, position)
        assert set(by_tool) == set(SEED_TOOLS)
        for name, variant in by_tool.items():
            assert variant["properties"]["tool"] == {"type": "string", "enum": [name]}


def test_each_branch_carries_its_tools_argument_schema() -> None:
    schema = sales_schema()
    by_tool = variants(schema)

    assert args_of(schema, by_tool["get_manager_profile"])["properties"] == {
        "manager_id": {"title": "Manager Id", "type": "integer"}
    }
    sales_args = args_of(schema, by_tool["fetch_sales_data"])
    assert sales_args["required"] == ["month"]
    assert sales_args["additionalProperties"] is False
    assert sales_args["properties"]["month"]["maxLength"] == ARG_STRING_MAX_CHARS


def test_one_tuple_per_allowed_length() -> None:
    steps = sales_schema(max_steps=5)["properties"]["steps"]["anyOf"]

    assert [len(option["prefixItems"]) for option in steps] == [3, 4, 5]
    for option in steps:
        n = len(option["prefixItems"])
        assert (option["minItems"], option["maxItems"], option["items"]) == (n, n, False)
        assert option["prefixItems"] == [{"$ref": f"#/$defs/step_{i}"} for i in range(1, n + 1)]


def test_ids_follow_positions_and_depends_on_names_only_earlier_steps() -> None:
    schema = sales_schema()

    assert all("depends_on" not in v["properties"] for v in variants(schema, 1).values())
    for position in range(1, 7):
        for variant in variants(schema, position).values():
            props = variant["properties"]
            assert props["id"] == {"type": "string", "enum": [f"step_{position}"]}
            assert variant["required"] == ["id", "title", "tool", "args"]  # depends_on optional
            assert variant["additionalProperties"] is False
            if position > 1:
                earlier = [f"step_{i}" for i in range(1, position)]
                assert props["depends_on"]["items"]["enum"] == earlier
                assert props["depends_on"]["maxItems"] == position - 1


def test_the_plan_object_is_closed() -> None:
    schema = sales_schema()

    assert schema["additionalProperties"] is False
    assert schema["required"] == ["kind", "steps"]
    assert schema["properties"]["kind"]["enum"] == ["plan"]


def test_a_budget_below_the_minimum_still_gives_a_satisfiable_schema() -> None:
    steps = sales_schema(max_steps=2)["properties"]["steps"]

    assert steps["minItems"] == steps["maxItems"] == 2


@given(st.text(max_size=80))
def test_titles_the_pattern_accepts_pass_the_policy(title: str) -> None:
    if re.fullmatch(TITLE_PATTERN.strip("^$"), title):
        assert title.strip() and len(title) <= 60 and '"' not in title and "\\" not in title


def test_the_title_pattern_takes_ordinary_titles() -> None:
    for title in ("Fetch sales data", "KPIs for 2026-04 (USD)", "Step 3: risks & refunds"):
        assert re.fullmatch(TITLE_PATTERN.strip("^$"), title)
    for title in ("", " leading space", "x" * 61, 'say "hi"'):
        assert not re.fullmatch(TITLE_PATTERN.strip("^$"), title)


class Window(BaseModel):
    start: str
    end: str


def report(window: Window, regions: list[str] | None = None) -> dict[str, Any]:
    return {}


def test_nested_argument_models_are_hoisted_under_the_tools_name() -> None:
    toolset = Toolset.from_functions([report])

    schema = plan_schema(toolset.catalog(["report"]), min_steps=3, max_steps=6)

    args = args_of(schema, variants(schema)["report"])
    assert args["properties"]["window"] == {"$ref": "#/$defs/tool__report__defs__Window"}
    assert schema["$defs"]["tool__report__defs__Window"]["properties"]["start"]["maxLength"]
    assert "$defs" not in args


def test_no_tools_gives_a_generic_step() -> None:
    schema = plan_schema([], min_steps=3, max_steps=6)

    assert schema["$defs"]["step_1"]["properties"]["tool"]["type"] == "string"


def test_strict_mode_needs_closed_objects_with_every_key_required() -> None:
    closed = {
        "type": "object",
        "properties": {
            "a": {"type": "string"},
            "b": {"type": "array", "items": {"type": "integer"}},
        },
        "required": ["a", "b"],
        "additionalProperties": False,
    }
    open_ = {**closed, "additionalProperties": True}
    optional = {**closed, "required": ["a"]}
    nested_open = {
        **closed,
        "properties": {"a": {"type": "object", "properties": {}}},
        "required": ["a"],
    }

    assert is_strict_compatible(closed)
    assert not is_strict_compatible(open_)
    assert not is_strict_compatible(optional)
    assert not is_strict_compatible(nested_open)
    assert not is_strict_compatible({"anyOf": [closed]})
    assert not is_strict_compatible(sales_schema())  # depends_on is optional
