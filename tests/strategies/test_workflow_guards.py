"""Workflow guards: the grammar, the errors, and a reference evaluator on random guards."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskdecomp.errors import WorkflowError
from taskdecomp.strategies.workflow.guards import MAX_DEPTH, Guard

STATE = {"status": {"taskPassed": True, "hasMoreTasks": False, "count": 2, "name": "T1"}}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("status.taskPassed == true", True),
        ("status.taskPassed == true and status.hasMoreTasks == true", False),
        ("status.taskPassed == true and not status.hasMoreTasks", True),
        ("status.hasMoreTasks or status.count == 2", True),
        ("(status.hasMoreTasks or status.taskPassed) and status.name == 'T1'", True),
        ('status.name != "T2"', True),
        ("status.missing == null", True),  # a missing path is null
        ("status.missing", False),
        ("status.count == 2.0", True),
        ("status.taskPassed == 1", False),  # a boolean never equals a number
        ("status.count == -2", False),
        ("not not status.taskPassed", True),
        ("true", True),
        ("'x' == 'x' and 0 == 0", True),
        ('status.name == "T\\"1"', False),
        ("status.count.deeper == null", True),  # a path through a number is missing
    ],
)
def test_guards_evaluate_against_the_state(text: str, expected: bool) -> None:
    assert Guard.parse(text).evaluate(STATE) is expected


def test_a_guard_says_which_paths_it_reads() -> None:
    guard = Guard.parse("status.a == true and (status.b or not other.c) and 1 == 1")
    assert guard.paths() == {"status.a", "status.b", "other.c"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty guard"),
        ("status.a ==", "expected a value, a path or '(', found the end"),
        ("status.a == true and", "found the end"),
        ("(status.a", "expected ')'"),
        ("status.a = true", "unexpected '=' at character 10"),
        ("status.a == true status.b", "expected 'and', 'or' or the end, found 'status.b'"),
        ("and status.a", "found 'and' at character 1"),
        ("status.a == 'open", 'unexpected "\'"'),
        ("__import__('os').system('x')", "unexpected '.' at character 17"),
        ("1abc == 2", "unexpected '1'"),
        ("(" * (MAX_DEPTH + 1) + "true" + ")" * (MAX_DEPTH + 1), "nested deeper than"),
        ("x" * 3000, "characters; the most is"),
    ],
)
def test_malformed_guards_say_what_was_expected_where(text: str, message: str) -> None:
    with pytest.raises(WorkflowError) as raised:
        Guard.parse(text)
    assert message in str(raised.value)


@given(st.text(max_size=80))
@settings(max_examples=400, deadline=None)
def test_any_text_parses_or_raises_a_workflow_error(text: str) -> None:
    try:
        guard = Guard.parse(text)
    except WorkflowError:
        return
    assert isinstance(guard.evaluate({"status": {"a": True}}), bool)


# A reference: random expression trees, rendered to text, evaluated directly.

NAMES = ["a", "b", "c", "missing"]
VALUES: dict[str, Any] = {"a": True, "b": False, "c": 3}


def _literal() -> st.SearchStrategy[tuple[str, Any]]:
    return st.one_of(
        st.sampled_from([("true", True), ("false", False), ("null", None)]),
        st.integers(-5, 5).map(lambda n: (str(n), n)),
        st.sampled_from(["x", "it's", ""]).map(lambda s: ('"' + s + '"', s)),
    )


def _path() -> st.SearchStrategy[tuple[str, Any]]:
    return st.sampled_from(NAMES).map(lambda n: (f"status.{n}", VALUES.get(n)))


def _same(left: Any, right: Any) -> bool:
    return isinstance(left, bool) == isinstance(right, bool) and left == right


def _extend(children: st.SearchStrategy[tuple[str, Any]]) -> st.SearchStrategy[tuple[str, Any]]:
    def compare(pair: tuple[tuple[str, Any], tuple[str, Any]], op: str) -> tuple[str, Any]:
        (lt, lv), (rt, rv) = pair
        same = _same(lv, rv)
        return (f"({lt}) {op} ({rt})", same if op == "==" else not same)

    def logic(pair: tuple[tuple[str, Any], tuple[str, Any]], op: str) -> tuple[str, Any]:
        (lt, lv), (rt, rv) = pair
        value = (bool(lv) and bool(rv)) if op == "and" else (bool(lv) or bool(rv))
        return (f"({lt}) {op} ({rt})", value)

    pairs = st.tuples(children, children)
    return st.one_of(
        children.map(lambda c: (f"not ({c[0]})", not c[1])),
        st.tuples(pairs, st.sampled_from(["==", "!="])).map(lambda p: compare(*p)),
        st.tuples(pairs, st.sampled_from(["and", "or"])).map(lambda p: logic(*p)),
    )


EXPRESSIONS = st.recursive(st.one_of(_literal(), _path()), _extend, max_leaves=12)


@given(EXPRESSIONS)
@settings(max_examples=400, deadline=None)
def test_guards_match_a_reference_evaluator(expression: tuple[str, Any]) -> None:
    text, expected = expression
    assert Guard.parse(text).evaluate({"status": VALUES}) is bool(expected)
