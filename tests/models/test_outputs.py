"""Output modes: their order, the memory of the mode that worked, JSON taken from prose."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taskdecomp import ConfigError
from taskdecomp.models.outputs import (
    MODES,
    ModeMemory,
    extract_json,
    fallbacks,
    output_mode,
    refuses,
    schema_instructions,
)

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
CONTAINERS = st.one_of(
    st.lists(JSON_VALUES, max_size=4), st.dictionaries(st.text(), JSON_VALUES, max_size=4)
)
PROSE = st.text(alphabet=st.characters(blacklist_characters="{["), max_size=40)


def test_modes_fall_back_best_first_and_always_end_at_prompt() -> None:
    assert MODES == ("native", "tool", "json", "prompt")
    assert fallbacks("native") == MODES
    assert fallbacks("json") == ("json", "prompt")
    assert fallbacks("native", supported=("tool",)) == ("tool", "prompt")
    assert fallbacks("prompt", supported=()) == ("prompt",)


def test_an_unknown_mode_names_the_valid_ones() -> None:
    assert output_mode("tool") == "tool"
    with pytest.raises(ConfigError, match="'xml': pick one of native, tool, json, prompt"):
        output_mode("xml")


def test_the_memory_starts_at_the_later_of_the_chosen_and_the_known_mode() -> None:
    memory = ModeMemory()
    assert memory.first("server", "native") == "native"
    memory.remember("server", "json")
    assert memory.first("server", "native") == "json"
    assert memory.first("server", "prompt") == "prompt"
    assert memory.first("other", "tool") == "tool"
    memory.forget()
    assert memory.first("server", "native") == "native"


def test_schema_instructions_state_the_schema_exactly() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    text = schema_instructions(schema)
    assert json.loads(text.partition("\n")[2]) == schema


@given(before=PROSE, value=CONTAINERS, after=st.text(max_size=40))
def test_the_first_json_value_is_found_after_prose(before: str, value: Any, after: str) -> None:
    written = json.dumps(value)
    assert json.loads(extract_json(f"{before}{written}{after}")) == value


@given(before=PROSE, value=CONTAINERS, after=PROSE)
def test_a_value_in_a_code_fence_is_found(before: str, value: Any, after: str) -> None:
    fenced = f"{before}\n```json\n{json.dumps(value, indent=2)}\n```\n{after}"
    assert json.loads(extract_json(fenced)) == value


@given(text=st.text(alphabet='{}[]"\\ :,ab', max_size=12))
def test_braces_inside_strings_do_not_end_a_value(text: str) -> None:
    value = {"note": text, "list": [text, {"inner": text}]}
    assert json.loads(extract_json(f"Plan: {json.dumps(value)} done.")) == value


@given(text=PROSE)
def test_text_without_json_is_returned_as_written(text: str) -> None:
    assert extract_json(text) == text


def test_a_broken_value_is_skipped_for_the_next_complete_one() -> None:
    assert extract_json('draft {"a": 1, then {"b": 2}') == '{"b": 2}'
    assert extract_json('{"a": [1, 2') == '{"a": [1, 2'  # none complete: the text as written


def test_deep_nesting_is_left_to_the_strict_parse() -> None:
    deep = "[" * 100_000
    assert extract_json(f"x {deep}") == deep


PLAN_SCHEMA: dict[str, Any] = {"type": "object", "required": ["kind", "steps"]}


@pytest.mark.parametrize(
    "text",
    [
        'Fetch first [1], then compute.\n```json\n{"kind": "plan", "steps": []}\n```',
        'Use 0 as the default {}; the plan: {"kind": "plan", "steps": []}',
        'Steps [1, 2] and {"a": 1} come first; {"kind": "plan", "steps": []} is the answer.',
        '```\n{"kind": "plan", "steps": []}\n```\nand later {"other": true}',
    ],
)
def test_the_answer_is_taken_over_stray_values_in_the_prose(text: str) -> None:
    assert json.loads(extract_json(text, PLAN_SCHEMA)) == {"kind": "plan", "steps": []}


def test_without_a_value_that_fits_the_schema_the_first_value_is_taken() -> None:
    assert extract_json('Only [1] and {"a": 2} here.', PLAN_SCHEMA) == "[1]"


@pytest.mark.parametrize(
    ("mode", "status", "message", "refused"),
    [
        ("native", 400, "'response_format' is not supported", True),
        ("tool", 400, "this model does not support tools", True),
        ("json", 422, "response_format.type: json_object is not supported", True),
        ("native", 400, "This model's maximum context length is 8192 tokens", False),
        ("native", 400, "The response was filtered by the content management policy", False),
        ("native", 500, "('body', 'response_format', 'type') literal_error", True),
        ("tool", 500, "('body', 'response_format', 'type') literal_error", False),
        ("native", 503, "structured output workers busy, retry", False),
        ("prompt", 400, "'response_format' is not supported", False),
    ],
)
def test_a_refusal_of_a_mode_names_what_the_mode_sent(
    mode: str, status: int, message: str, refused: bool
) -> None:
    assert refuses(output_mode(mode), status, message) is refused


def test_in_modes_falls_once_per_mode_and_remembers_only_a_fall() -> None:
    import asyncio

    from taskdecomp.models.outputs import MEMORY, Refused, in_modes

    asked: list[str] = []

    async def send(mode: str) -> str:
        asked.append(mode)
        if mode != "json":
            raise Refused(ValueError(f"{mode} refused"))
        return "answer"

    MEMORY.forget()
    try:
        assert asyncio.run(in_modes(send, "native", MODES, "server")) == "answer"
        assert asked == ["native", "tool", "json"]
        assert MEMORY.first("server", "native") == "json"
        asked.clear()
        assert asyncio.run(in_modes(send, "json", MODES, "other")) == "answer"
        assert MEMORY.first("other", "native") == "native"  # chosen, not fallen to
        with pytest.raises(ValueError, match="prompt refused"):
            asyncio.run(in_modes(send, "prompt", MODES, "last"))
    finally:
        MEMORY.forget()
