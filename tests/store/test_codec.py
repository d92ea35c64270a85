"""Stored text is ASCII and decodes to exactly what was encoded, for any string."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taskdecomp.errors import CorruptRecordError, StoreValueError
from taskdecomp.store import codec

# every code point, lone surrogates and NUL included
ANY_TEXT = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF))
FINITE = st.floats(allow_nan=False, allow_infinity=False)  # the store refuses the others
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | FINITE | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
    max_leaves=20,
)


@given(ANY_TEXT)
def test_text_round_trips_through_ascii(value: str) -> None:
    stored = codec.encode_text(value, what="text")
    assert stored.isascii() and "\x00" not in stored
    assert codec.decode_text(stored, where="t") == value


@given(ANY_TEXT | st.text(alphabet=st.characters(max_codepoint=0x7F)))
def test_text_is_stored_as_its_json_string_body_as_stores_always_kept_it(value: str) -> None:
    # rows are found by their stored ids: the stored form of a string must never change
    assert codec.encode_text(value, what="text") == json.dumps(value, ensure_ascii=True)[1:-1]


@given(JSON)
def test_json_round_trips_through_ascii(value: Any) -> None:
    stored = codec.encode_json(value, what="value")
    assert stored.isascii() and "\x00" not in stored
    assert codec.decode_json(stored, where="t") == value


@pytest.mark.parametrize(
    ("value", "where"),
    [(float("nan"), "value is nan"), ({"a": [1, float("-inf")]}, "value at '/a/1' is -inf")],
)
def test_non_finite_numbers_are_refused_not_stored_as_nan(value: Any, where: str) -> None:
    with pytest.raises(StoreValueError, match=f"the observation cannot be stored as JSON: {where}"):
        codec.encode_json(value, what="the observation")


def test_plain_text_is_stored_as_is() -> None:
    assert codec.encode_text("step_1", what="id") == "step_1"


def test_values_over_the_cap_are_refused_with_the_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec, "MAX_STORED_CHARS", 10)
    assert codec.encode_text("x" * 10, what="the goal") == "x" * 10
    with pytest.raises(StoreValueError, match=r"the goal is 11 characters .* cap of 10"):
        codec.encode_text("x" * 11, what="the goal")
    with pytest.raises(StoreValueError, match=r"the observation is 14 characters"):
        codec.encode_json(["x" * 10], what="the observation")


@pytest.mark.parametrize("raw", ['a"b', "\\", "\\ud8", "\\x00"])
def test_text_that_no_encoder_wrote_fails_closed(raw: str) -> None:
    with pytest.raises(CorruptRecordError, match=r"stored runs\.goal does not decode"):
        codec.decode_text(raw, where="runs.goal")


def test_json_that_does_not_parse_fails_closed() -> None:
    with pytest.raises(CorruptRecordError, match=r"stored plans\.plan does not decode .*refusing"):
        codec.decode_json("[1,", where="plans.plan")
