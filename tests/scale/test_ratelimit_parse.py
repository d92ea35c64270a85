"""Reading ``--rate-limit``: calls and tokens per period, per provider, or a one-line error."""

from __future__ import annotations

import pytest

from taskdecomp.errors import ConfigError
from taskdecomp.scale.ratelimit import Limit, parse_limits


def test_calls_and_tokens_per_period_are_read_per_provider() -> None:
    found = parse_limits(["openai=500/min,200000 tokens/min", "scripted=20/10s", "x=1/h"])

    assert found == {
        "openai": Limit(provider="openai", calls=500, tokens=200_000),
        "scripted": Limit(provider="scripted", calls=20, calls_period=10.0),
        "x": Limit(provider="x", calls=1, calls_period=3600.0),
    }


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ("openai", "takes PROVIDER=N/min"),
        ("openai=fast", "'fast' is not N/min or N tokens/min"),
        ("openai=5/week", "'5/week' is not N/min"),
        ("openai=0/min", "at least 1 per period"),
    ],
)
def test_a_limit_that_does_not_read_is_refused_in_one_line(item: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as refused:
        parse_limits([item])
    assert "\n" not in str(refused.value)


def test_a_provider_given_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="names provider 'openai' twice"):
        parse_limits(["openai=1/s", "openai=2/s"])
