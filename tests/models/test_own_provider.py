"""The models page's own-provider example runs as written: registered, then used by a run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from taskdecomp import Budget, run_sync
from taskdecomp.models import PROVIDERS
from tests.conftest import SALES_TOOLS
from tests.support import SEED_GOAL

DOCS = Path(__file__).resolve().parents[2] / "docs" / "models.md"


@pytest.fixture
def example() -> Iterator[dict[str, object]]:
    section = DOCS.read_text().split("## Your own provider", 1)[1]
    code = section.split("```python", 1)[1].split("```", 1)[0]
    names: dict[str, object] = {}
    before = dict(PROVIDERS._loaded)
    exec(compile(code, str(DOCS), "exec"), names)  # the page's own example
    yield names
    PROVIDERS._loaded.clear()  # the registry is the process's: leave it as found
    PROVIDERS._loaded.update(before)


def test_the_registered_provider_answers_a_run(example: dict[str, object]) -> None:
    budget = Budget(repairs=0)
    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model="mirror:anything", budget=budget)
    assert result.stop_reason == "invalid_plan:bad_kind"  # the echoed request is no plan
    assert result.raw_plan["goal"] == SEED_GOAL  # what the model answered: the request
    assert result.usage.llm_calls == 1
