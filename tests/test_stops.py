from __future__ import annotations

import re
from pathlib import Path

import pytest

from taskdecomp.stops import CODES, is_known, with_detail

ROOT = Path(__file__).resolve().parent.parent
SEED_CODES = (
    "success",
    "invalid_plan:non_json",
    "invalid_plan:min_steps",
    "invalid_plan:tool_not_allowed:x",
    "max_execute_steps",
    "max_tool_calls",
    "max_seconds",
    "llm_timeout",
    "llm_empty",
    "tool_denied:x",
    "tool_missing:x",
    "tool_bad_args:x",
    "tool_error:x",
    "loop_detected",
)


@pytest.mark.parametrize("reason", SEED_CODES)
def test_every_seed_code_is_known(reason: str) -> None:
    assert is_known(reason)


@pytest.mark.parametrize("reason", ["", "succes", "success:x", "tool_error", "tool_error:", "x:y"])
def test_malformed_reasons_are_unknown(reason: str) -> None:
    assert not is_known(reason)


def test_with_detail_refuses_bare_codes() -> None:
    with pytest.raises(ValueError, match="does not take a detail"):
        with_detail("success", "x")
    assert with_detail("tool_error", "a") == "tool_error:a"


def test_families_are_unique() -> None:
    families = [code.family for code in CODES]
    assert len(families) == len(set(families))


def test_the_docs_list_every_code() -> None:
    text = (ROOT / "docs" / "stop-reasons.md").read_text().split("\n## ")[0]
    listed = set(re.findall(r"^\| `([a-z_]+)(?::<[a-z]+>)?` \|", text, flags=re.MULTILINE))
    assert listed == {code.family for code in CODES}
