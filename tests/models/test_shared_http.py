"""What every HTTP provider shares: retries with backoff, error kinds, prices."""

from __future__ import annotations

import asyncio

import pytest

from taskdecomp.errors import ModelError
from taskdecomp.models.http_errors import Endpoint, Failure, retryable, status_error
from taskdecomp.models.prices import price_usd
from taskdecomp.models.retry import Retry, RetryPolicy, retry_after, with_retries

ENDPOINT = Endpoint(
    model="acme:big", name="big", where="https://api.acme.test", key_hint="set ACME_KEY",
    model_hint="pick another with --model",
)  # fmt: skip


def test_retries_follow_retry_after_then_give_up_with_the_last_error() -> None:
    slept: list[float] = []
    seen: list[str] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    async def attempt(form: str) -> str:
        seen.append(form)
        raise Retry(ModelError("rate_limit", f"busy ({form})"), 3.0, form + "+")

    with pytest.raises(ModelError, match=r"busy \(a\+\+\)"):
        asyncio.run(with_retries(attempt, "a", RetryPolicy(attempts=3), sleep))
    assert seen == ["a", "a+", "a++"] and slept == [3.0, 3.0]


def test_an_attempt_that_succeeds_ends_the_retries() -> None:
    calls: list[int] = []

    async def attempt(n: int) -> str:
        calls.append(n)
        if n < 2:
            raise Retry(ModelError("server", "down"), None, n + 1)
        return "ok"

    async def sleep(seconds: float) -> None:
        assert 0 <= seconds <= 8.0

    assert asyncio.run(with_retries(attempt, 1, RetryPolicy(), sleep)) == "ok"
    assert calls == [1, 2]


@pytest.mark.parametrize(
    ("status", "code", "kind", "again"),
    [
        (401, None, "auth", False),
        (403, None, "permission", False),
        (404, None, "not_found", False),
        (429, "insufficient_quota", "quota", False),
        (429, None, "rate_limit", True),
        (503, None, "server", True),
        (422, None, "bad_request", False),
        (418, None, "http_418", False),
    ],
)
def test_every_status_maps_to_one_kind(
    status: int, code: str | None, kind: str, again: bool
) -> None:
    failure = Failure(status=status, code=code, detail="nope")
    error = status_error(ENDPOINT, failure, attempts=4)
    assert (error.kind, retryable(failure)) == (kind, again)
    assert error.args[0].startswith("acme:big: ")


def test_retry_after_reads_seconds_only() -> None:
    assert retry_after({"retry-after": "2.5"}) == 2.5
    assert retry_after({"retry-after": "soon"}) is None
    assert retry_after({"retry-after": "-1"}) is None
    assert retry_after({}) is None


def test_prices_by_provider_and_model_with_snapshots() -> None:
    assert price_usd("openai", "gpt-4.1-mini-2025-04-14", 1_000_000, 0) == 0.40
    assert price_usd("openai", "unknown", 1000, 1000) == 0.0
    assert price_usd("acme", "gpt-4.1-mini", 1000, 1000) == 0.0
