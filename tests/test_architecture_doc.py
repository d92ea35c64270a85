"""docs/architecture.md shows the example plugin's code as the tests run it."""

from __future__ import annotations

import re

from tests.conftest import ROOT

DOC = ROOT / "docs" / "architecture.md"
PLUGIN = ROOT / "tests" / "plugin"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def test_every_python_example_is_the_tested_plugins_code() -> None:
    source = (PLUGIN / "taskdecomp_example_plugin" / "__init__.py").read_text()
    found = blocks("python")
    assert len(found) == 3
    for block in found:
        assert block in source, block[:200]


def test_the_entry_points_shown_are_the_plugins() -> None:
    (toml,) = blocks("toml")
    assert toml in (PLUGIN / "pyproject.toml").read_text()
