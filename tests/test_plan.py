from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from taskdecomp import Plan, Step, TaskId
from taskdecomp.plan import find_cycle


def t(name: str) -> TaskId:
    return TaskId(name)


def test_find_cycle_none_for_a_dag() -> None:
    assert find_cycle({t("a"): [], t("b"): [t("a")], t("c"): [t("a"), t("b")]}) is None


def test_find_cycle_returns_the_loop() -> None:
    cycle = find_cycle({t("a"): [t("c")], t("b"): [t("a")], t("c"): [t("b")]})
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {"a", "b", "c"}


def test_find_cycle_handles_deep_chains_without_recursion() -> None:
    edges = {t(str(i)): [t(str(i + 1))] for i in range(20_000)}
    assert find_cycle(edges) is None
    edges[t("20000")] = [t("0")]
    assert find_cycle(edges) is not None


@given(st.dictionaries(st.integers(0, 9), st.lists(st.integers(0, 9), max_size=4), max_size=10))
def test_find_cycle_agrees_with_topological_sort(raw: dict[int, list[int]]) -> None:
    edges = {t(str(k)): [t(str(v)) for v in vs] for k, vs in raw.items()}
    remaining = {k: {d for d in vs if d in edges} for k, vs in edges.items()}
    while True:
        free = [k for k, deps in remaining.items() if not deps]
        if not free:
            break
        for k in free:
            del remaining[k]
        for deps in remaining.values():
            deps.difference_update(free)
    assert (find_cycle(edges) is None) == (not remaining)


def test_plan_objects_are_frozen() -> None:
    plan = Plan(steps=(Step(id=t("s"), title="x", tool="a", args={}),))
    try:
        plan.steps = ()  # type: ignore[misc]
    except AttributeError:
        return
    raise AssertionError("Plan is mutable")
