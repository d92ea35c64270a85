"""Strict JSON: NaN and infinity are refused on the way out and on the way in."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from taskdecomp import jsonsafe
from taskdecomp.errors import StrictJSONError

NAN, INF = float("nan"), float("inf")

JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(), inner, max_size=4)
    ),
    max_leaves=25,
)


def refuse(name: str) -> Any:
    raise AssertionError(f"not strict JSON: {name}")


def strict_parse(text: str) -> Any:
    """What a strict consumer (a browser, jq, PostgreSQL) would accept."""
    return json.loads(text, parse_constant=refuse)


def has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(has_non_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(has_non_finite(v) for v in value)
    return False


def as_parsed(value: Any) -> Any:
    """``value`` as JSON gives it back: tuples become lists."""
    if isinstance(value, dict):
        return {k: as_parsed(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_parsed(v) for v in value]
    return value


@given(JSONISH)
def test_dumps_writes_strict_json_or_raises_the_one_error(value: Any) -> None:
    try:
        text = jsonsafe.dumps(value, indent=1)
    except StrictJSONError as exc:
        assert has_non_finite(value)
        assert "JSON has no NaN or infinity" in str(exc)
        assert not jsonsafe.is_strict_json(value)
        return
    assert not has_non_finite(value)
    assert strict_parse(text) == as_parsed(value)
    assert jsonsafe.loads(text) == as_parsed(value)
    assert jsonsafe.is_strict_json(value)


@given(JSONISH)
def test_compact_writes_what_dumps_writes_and_refuses_what_it_refuses(value: Any) -> None:
    options: dict[str, Any] = {"ensure_ascii": True, "separators": (",", ":")}
    try:
        expected = jsonsafe.dumps(value, **options)
    except StrictJSONError as exc:
        with pytest.raises(StrictJSONError) as caught:
            jsonsafe.compact(value)
        assert str(caught.value) == str(exc)
        return
    assert jsonsafe.compact(value) == expected


def test_compact_refuses_a_cycle_even_with_the_recursion_limit_raised() -> None:
    script = (
        "import sys\n"
        "from taskdecomp import jsonsafe\n"
        "sys.setrecursionlimit(1_000_000)\n"
        "cycle = [1]\n"
        "cycle.append(cycle)\n"
        "try:\n"
        "    jsonsafe.compact(cycle)\n"
        "except ValueError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(  # a stack overflow would kill the process, not fail a test
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout.strip()) == (0, "not JSON: Circular reference detected")


def test_compact_refuses_a_cycle_and_what_is_not_json_as_dumps_does() -> None:
    cycle: list[Any] = [1]
    cycle.append({"again": cycle})
    for value, problem in ((cycle, "Circular reference"), ({1, 2}, "Object of type set")):
        with pytest.raises(StrictJSONError, match=f"not JSON: {problem}"):
            jsonsafe.compact(value)


@pytest.mark.parametrize(
    ("value", "where"),
    [
        (NAN, "value is nan"),
        ([1, -INF], "value at '/1' is -inf"),
        ({"a": [1, {"b/c": INF}]}, "value at '/a/1/b~1c' is inf"),
        ({"steps": ({"args": {"x": NAN}},)}, "value at '/steps/0/args/x' is nan"),
        ({NAN: 1}, "object at '/' has the key nan"),
    ],
)
def test_dumps_names_where_the_non_finite_number_is(value: Any, where: str) -> None:
    with pytest.raises(StrictJSONError, match="JSON has no NaN or infinity") as caught:
        jsonsafe.dumps(value)
    assert str(caught.value).startswith(where)
    assert isinstance(caught.value, ValueError)  # callers that catch ValueError still do


def test_dumps_refuses_what_is_not_json_at_all_with_the_same_error() -> None:
    with pytest.raises(StrictJSONError, match="not JSON: Object of type set"):
        jsonsafe.dumps({1, 2})
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(StrictJSONError, match="not JSON: Circular reference"):
        jsonsafe.dumps(cycle)


def test_dumps_passes_json_options_through() -> None:
    assert jsonsafe.dumps({"b": "é", "a": 1}, sort_keys=True, ensure_ascii=False) == (
        '{"a": 1, "b": "é"}'
    )
    assert jsonsafe.dumps(10**400) == "1" + "0" * 400  # a big int is fine as an int


@pytest.mark.parametrize(
    "text", ["NaN", "[Infinity]", '{"x": -Infinity}', "1e400", "[-1e999]", '{"x": 1E+400}']
)
def test_loads_refuses_non_finite_numbers(text: str) -> None:
    with pytest.raises(StrictJSONError, match="non-finite number"):
        jsonsafe.loads(text)


def test_loads_keeps_big_ints_and_the_largest_floats() -> None:
    assert jsonsafe.loads("[1e308, -1.7976931348623157e308, 5e-324]") == [
        1e308,
        -1.7976931348623157e308,
        5e-324,
    ]
    assert jsonsafe.loads("1" + "0" * 400) == 10**400
    assert jsonsafe.loads("1e-400") == 0.0  # underflow is a finite zero, not an error


class Reading(BaseModel):
    values: list[Any]


@dataclasses.dataclass
class Report:
    readings: list[Reading]


def test_check_finite_looks_inside_models_and_dataclasses() -> None:
    jsonsafe.check_finite(Report(readings=[Reading(values=[1.5, "x"])]))
    with pytest.raises(StrictJSONError, match="value at '/readings/0/values/1' is nan"):
        jsonsafe.check_finite(Report(readings=[Reading(values=[1.5, NAN])]))
    with pytest.raises(StrictJSONError, match="value at '/0' is -inf"):
        jsonsafe.check_finite({-INF})


def test_check_finite_survives_cycles() -> None:
    cycle: dict[str, Any] = {"x": 1.0}
    cycle["self"] = cycle
    jsonsafe.check_finite(cycle)
    cycle["y"] = INF
    with pytest.raises(StrictJSONError, match="value at '/y' is inf"):
        jsonsafe.check_finite(cycle)
