"""Repeating a model call that failed in a way worth repeating, for every provider.

A provider's attempt raises :class:`Retry` with the error it would report and, when the
server said so, how long to wait (``Retry-After``); :func:`with_retries` waits with
exponential backoff and jitter, and raises the last error once the attempts are spent.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from taskdecomp.errors import ModelError
from taskdecomp.models.base import ModelRequest

MAX_RETRY_AFTER = 20.0
"""The longest ``Retry-After`` honoured, whatever the server asks."""

S = TypeVar("S")
T = TypeVar("T")


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """How failed attempts are repeated."""

    attempts: int = 4
    """Most attempts per call, the first included."""
    backoff_seconds: float = 0.5
    """Wait before the second attempt; it doubles each time, with jitter."""
    max_backoff_seconds: float = 8.0
    """Longest wait between two attempts (``Retry-After`` included)."""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {self.attempts!r}")
        if self.backoff_seconds < 0 or self.max_backoff_seconds < 0:
            raise ValueError("backoff_seconds and max_backoff_seconds must be >= 0")

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if retry_after is not None:
            return min(retry_after, self.max_backoff_seconds, MAX_RETRY_AFTER)
        base = min(self.backoff_seconds * 2.0 ** (attempt - 1), self.max_backoff_seconds)
        return base * (0.5 + random.random() / 2)  # jitter spreads retries of parallel calls


class Retry(Exception, Generic[S]):
    """This attempt failed in a way worth repeating.

    Args:
        error: what to report if no attempt is left.
        retry_after: seconds the server asked to wait, if it did.
        state: what the next attempt starts from (a provider's fallback, e.g. a simpler
            structured-output form).
    """

    def __init__(self, error: ModelError, retry_after: float | None, state: S) -> None:
        super().__init__(str(error))
        self.error = error
        self.retry_after = retry_after
        self.state = state


@dataclass
class Heard:
    """Whether any piece of a streamed answer reached its listener (``on_text``)."""

    any: bool = False


def listened(request: ModelRequest) -> tuple[ModelRequest, Heard]:
    """``request`` with its listener watched, and what it heard.

    An attempt whose pieces were heard is not repeated: its listener (the plan stream that
    starts steps early, the answer's deltas) would hear the answer twice.
    """
    heard = Heard()
    listener = request.on_text
    if listener is None:
        return request, heard

    def on_text(piece: str) -> None:
        heard.any = True
        listener(piece)

    return replace(request, on_text=on_text), heard


async def with_retries(
    attempt: Callable[[S], Awaitable[T]],
    first: S,
    policy: RetryPolicy,
    sleep: Callable[[float], Awaitable[None]],
    *,
    heard: Heard | None = None,
) -> T:
    """``attempt(state)`` until it returns, at most ``policy.attempts`` times.

    Raises:
        ModelError: the last attempt's error, once every attempt raised :class:`Retry`, or
            once an attempt that failed had handed pieces of its answer out (``heard``).
    """
    number, state = 1, first
    while True:
        try:
            return await attempt(state)
        except Retry as retry:
            if number >= policy.attempts or (heard is not None and heard.any):
                raise retry.error from None
            await sleep(policy.delay(number, retry.retry_after))
            number, state = number + 1, retry.state


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The seconds a ``Retry-After`` header asks for; ``None`` without one that is a number."""
    value = headers.get("retry-after")
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds >= 0 else None
