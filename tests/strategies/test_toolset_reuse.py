"""Tools given as a list of functions: made into a toolset once, not once per run."""

from __future__ import annotations

import asyncio

import pytest

from taskdecomp import ScriptedModel, argmodels, tool
from taskdecomp.engine import run
from taskdecomp.strategies import base
from taskdecomp.strategies.base import as_toolset
from taskdecomp.tools import ToolSpec


def lookup(n: int) -> int:
    """Look a number up."""
    return n


def other(n: int) -> int:
    """Another tool."""
    return -n


def test_the_same_functions_make_one_toolset() -> None:
    first = as_toolset([lookup, other])
    assert as_toolset([lookup, other]) is first
    assert as_toolset(f for f in (lookup, other)) is first  # whatever the iterable
    assert as_toolset([other, lookup]) is not first  # another order: another catalog
    assert list(as_toolset([other, lookup])) == ["other", "lookup"]


def test_a_function_marked_again_makes_a_new_toolset() -> None:
    def charge(n: int) -> int:
        """Charge."""
        return n

    before = as_toolset([charge])
    tool(side_effects="unsafe")(charge)
    after = as_toolset([charge])
    assert after is not before and after["charge"].side_effects == "unsafe"


def test_tool_specs_with_their_own_schema_are_read_afresh() -> None:
    spec = ToolSpec(
        name="ext", fn=lookup, description="d", timeout=None, side_effects="read_only",
        input_schema={"type": "object"}, is_async=False,
    )  # fmt: skip
    assert as_toolset([spec]) is not as_toolset([spec])


def test_runs_given_the_same_functions_work_alike() -> None:
    plan = {"kind": "plan", "steps": [
        {"id": f"s{n}", "title": "t", "tool": "lookup", "args": {"n": n}} for n in range(3)
    ]}  # fmt: skip

    async def twice() -> list[object]:
        results = []
        for _ in range(2):
            model = ScriptedModel(responses=[plan, "done"])
            result = await run("goal", tools=[lookup], model=model)
            results.append([h.observation for h in result.history])
        return results

    assert asyncio.run(twice()) == [[0, 1, 2], [0, 1, 2]]


def test_a_function_changed_in_place_makes_a_new_toolset() -> None:
    def h(n: int = 1) -> int:
        """Old description."""
        return n

    before = as_toolset([h])
    h.__defaults__ = (5,)
    h.__doc__ = "New description."
    after = as_toolset([h])
    assert after is not before
    assert after["h"].check_args({}) == {"n": 5}
    assert after["h"].description == "New description."
    h.__annotations__ = {"n": str, "return": int}
    assert as_toolset([h])["h"].check_args({"n": "x"}) == {"n": "x"}
    h.__name__ = "renamed"
    assert list(as_toolset([h])) == ["renamed"]


class Racing(dict):  # type: ignore[type-arg]
    """A full cache that another thread empties right after its size was read."""

    def __len__(self) -> int:
        size = super().__len__()
        self.clear()
        return size


def test_caches_evicting_at_once_in_two_threads_still_make_the_toolset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(base, "TOOLSETS_KEPT", 1)
    monkeypatch.setattr(base, "_TOOLSETS", Racing(old=None))
    monkeypatch.setattr(argmodels, "ARGS_MODELS_KEPT", 1)
    monkeypatch.setattr(argmodels, "_ARGS_MODELS", Racing(old=None))

    def fresh(n: int, note: str = "fresh") -> str:
        """A tool no cache has seen."""
        return note

    assert as_toolset([fresh])["fresh"].check_args({"n": 1}) == {"n": 1, "note": "fresh"}
