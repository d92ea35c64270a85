"""Tool-argument patterns rewritten into the regex subset llama.cpp grammars are built from."""

from __future__ import annotations

import re

import pytest

from taskdecomp.models.patterns import portable_pattern, portable_patterns


@pytest.mark.parametrize(
    ("pattern", "portable"),
    [
        (r"^\d{4}-\d{2}-\d{2}$", r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"),
        (r"^[A-Z]{3}$", r"^[A-Z]{3}$"),
        (r"^\w+@\w+\.com$", r"^[0-9A-Za-z_]+@[0-9A-Za-z_]+\x2Ecom$"),
        (r"^[\d.]+$", r"^[0-9.]+$"),
        (r"^\S+$", r"^[^ \t\n\r]+$"),
        (r"v\d+", r"^.*v[0-9]+.*$"),  # JSON-schema patterns match anywhere
        (r"^a\\b$", r"^a\\b$"),
        (r"^\[x\]$", r"^\[x\]$"),
    ],
)
def test_a_pattern_is_rewritten_to_the_same_language(pattern: str, portable: str) -> None:
    assert portable_pattern(pattern) == portable


@pytest.mark.parametrize(
    "pattern",
    [r"^(?=a)\w$", r"^\bword$", r"^(a)\1$", r"^[\D]$", r"^a^b$", r"^[ab$", "^a\\"],
)
def test_a_pattern_without_a_faithful_form_is_refused(pattern: str) -> None:
    assert portable_pattern(pattern) is None


@pytest.mark.parametrize(
    ("pattern", "text"),
    [
        (r"^\d{4}-\d{2}$", "2026-04"),
        (r"^\w+@\w+\.com$", "a_b@c.com"),
        (r"v\d+", "release v12 now"),
    ],
)
def test_a_rewritten_pattern_matches_what_the_original_matches(pattern: str, text: str) -> None:
    assert re.search(pattern, text)
    portable = portable_pattern(pattern)
    assert portable is not None and re.fullmatch(portable, text)
    assert not re.fullmatch(portable, text + "\n")


def test_every_pattern_keyword_in_a_schema_is_rewritten_and_others_kept() -> None:
    schema = {
        "type": "object",
        "properties": {
            "day": {"type": "string", "pattern": r"^\d{2}$"},
            "pattern": {"type": "string", "pattern": r"^(?=x)x$"},  # an argument named so
        },
        "$defs": {"month": {"anyOf": [{"type": "string", "pattern": r"^\d{4}-\d{2}$"}]}},
    }

    portable = portable_patterns(schema)

    assert portable["properties"]["day"] == {"type": "string", "pattern": "^[0-9]{2}$"}
    assert portable["properties"]["pattern"] == {"type": "string"}  # refused: left out
    assert portable["$defs"]["month"]["anyOf"][0]["pattern"] == "^[0-9]{4}-[0-9]{2}$"
    assert schema["properties"]["day"]["pattern"] == r"^\d{2}$"  # the original is untouched
