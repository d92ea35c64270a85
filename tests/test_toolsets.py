"""Toolset sources: a --tools value is resolved by its scheme, Python by default."""

from __future__ import annotations

import pytest

from taskdecomp import ToolsetError
from taskdecomp.tools import Toolset, load_toolset
from taskdecomp.toolsets import SOURCES, register_source
from tests.conftest import SALES_TOOLS


def shout(text: str) -> str:
    """Say it louder."""
    return text.upper()


def test_a_registered_scheme_loads_through_its_source() -> None:
    asked: list[str] = []

    def source(rest: str) -> Toolset:
        asked.append(rest)
        return Toolset.from_functions([shout], source=f"loud:{rest}")

    register_source("loud", source)
    toolset = load_toolset("loud:anything:with/colons")
    assert asked == ["anything:with/colons"]
    assert list(toolset.keys()) == ["shout"] and toolset.source == "loud:anything:with/colons"
    assert "loud" in SOURCES.names() and "python" in SOURCES.names()


def test_python_is_the_default_and_can_be_named() -> None:
    plain, named = load_toolset(str(SALES_TOOLS)), load_toolset(f"python:{SALES_TOOLS}")
    assert list(plain.keys()) == list(named.keys())
    assert "fetch_sales_data" in list(plain.keys())


@pytest.mark.parametrize("value", ["nope:thing", "C:/no/such/tools.py"])
def test_an_unknown_scheme_is_read_as_python(value: str) -> None:
    with pytest.raises(ToolsetError, match=r"does not exist|neither a \.py file"):
        load_toolset(value)
