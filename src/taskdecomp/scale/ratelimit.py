"""Rate limits per model provider that hold across every worker: a sliding window in PostgreSQL.

``taskdecomp worker --rate-limit openai=500/min,200000 tokens/min`` limits the calls (and
tokens) of every model of that provider (the part of its model string before ``:``),
counted over all workers of the database, in any window of the period given:

- Before a call, a worker takes the provider's advisory lock (``pg_advisory_xact_lock``),
  drops the calls older than the period from ``taskdecomp_rate_calls``, and counts the
  rest. With room for one more call (and its prompt's estimated tokens), it records the
  call and goes on; else it waits until the oldest recorded call leaves the window, and
  asks again. Times are the database server's clock, so the machines' clocks do not
  matter.
- After the call, the call's row gets its real tokens (prompt and answer), so a later
  call counts what this one really used.

What holds: calls never exceed the limit in any window of the period, whatever the
workers; tokens may exceed theirs by what the calls in flight use beyond their prompt
estimates (an answer's tokens are known only at its end). A call larger than the whole
token limit still runs, alone in its window. DBOS's queue ``limiter`` limits how many
*runs* start per period, which does not bound model calls (a run makes several, at times
of its own), so it is not used for this.

The table is created by the first worker that has a limit (``CREATE TABLE IF NOT
EXISTS``); it holds one row per call in the last period of each limited provider.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sqlalchemy import text

from taskdecomp.errors import ConfigError
from taskdecomp.models import Model
from taskdecomp.models.base import ModelRequest, ModelResponse, estimate_tokens
from taskdecomp.store.sql import SqlStore

_UNITS = {"s": 1.0, "sec": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"^\s*(\d+)\s*(tokens?)?\s*/\s*(\d*\.?\d*)\s*([a-z]+)\s*$")
_TABLE = text(
    "CREATE TABLE IF NOT EXISTS taskdecomp_rate_calls ("
    " id bigserial PRIMARY KEY, provider text NOT NULL,"
    " at double precision NOT NULL, tokens bigint NOT NULL DEFAULT 0)"
)
_INDEX = text(
    "CREATE INDEX IF NOT EXISTS taskdecomp_rate_calls_by_provider"
    " ON taskdecomp_rate_calls (provider, at)"
)
_LOCK = text("SELECT pg_advisory_xact_lock(hashtext('taskdecomp_rate:' || :provider))")
_NOW = text("SELECT extract(epoch FROM clock_timestamp())::float8")
_FORGET = text("DELETE FROM taskdecomp_rate_calls WHERE provider = :provider AND at <= :since")
_COUNT = text(
    "SELECT count(*), coalesce(sum(tokens), 0), min(at) FROM taskdecomp_rate_calls"
    " WHERE provider = :provider AND at > :since"
)
_RECORD = text(
    "INSERT INTO taskdecomp_rate_calls (provider, at, tokens)"
    " VALUES (:provider, :at, :tokens) RETURNING id"
)
_SETTLE = text("UPDATE taskdecomp_rate_calls SET tokens = :tokens WHERE id = :id")
_TOKEN_WINDOW = "tokens"


@dataclass(frozen=True, kw_only=True, slots=True)
class Limit:
    """One provider's limit."""

    provider: str
    calls: int | None = None
    """Calls per ``calls_period`` seconds; ``None``: no limit on calls."""
    calls_period: float = 60.0
    tokens: int | None = None
    """Tokens (prompt and answer) per ``tokens_period`` seconds; ``None``: no limit."""
    tokens_period: float = 60.0


def parse_limits(items: Iterable[str]) -> Mapping[str, Limit]:
    """Limits by provider, from ``PROVIDER=N/min[,N tokens/min]`` (any of s, min, h).

    Raises:
        ConfigError: a limit that does not read so, or a provider given twice.
    """
    found: dict[str, Limit] = {}
    for item in items:
        provider, sep, spec = item.partition("=")
        provider = provider.strip()
        if not sep or not provider:
            raise ConfigError(f"--rate-limit takes PROVIDER=N/min[,N tokens/min], got {item!r}")
        if provider in found:
            raise ConfigError(f"--rate-limit names provider {provider!r} twice")
        limit = Limit(provider=provider)
        for part in spec.split(","):
            limit = _with_part(limit, part, item)
        found[provider] = limit
    return found


def _with_part(limit: Limit, part: str, item: str) -> Limit:
    match = _PART.match(part.lower())
    if match is None or match.group(4) not in _UNITS:
        raise ConfigError(
            f"--rate-limit {item!r}: {part.strip()!r} is not N/min or N tokens/min "
            "(units: s, min, h; e.g. 500/min, 20/10s, 200000 tokens/min)"
        )
    amount, is_tokens, times, unit = match.groups()
    period = float(times or 1) * _UNITS[unit]
    if int(amount) < 1 or period <= 0:
        raise ConfigError(f"--rate-limit {item!r}: a limit needs at least 1 per period")
    if is_tokens:
        return dataclasses.replace(limit, tokens=int(amount), tokens_period=period)
    return dataclasses.replace(limit, calls=int(amount), calls_period=period)


def provider_of(model: Model) -> str:
    """The provider a model's limit is found by: its model string up to ``:``."""
    return model.name.partition(":")[0]


def prepare(store: SqlStore) -> None:
    """Create the calls table if it is not there (a worker with limits, at start-up)."""
    with store.write() as conn:
        conn.execute(_LOCK, {"provider": "table"})  # two workers starting at once
        conn.execute(_TABLE)
        conn.execute(_INDEX)


class Window:
    """The calls a provider made in its last period, as every worker records them."""

    def __init__(self, store: SqlStore, limit: Limit) -> None:
        self.store, self.limit = store, limit
        self.waited = 0.0
        """Seconds this process's calls waited for room so far."""

    async def enter(self, tokens: int) -> int:
        """Wait for room for a call of ``tokens`` prompt tokens; the call's row id."""
        while True:
            taken, wait = await asyncio.to_thread(self._try, tokens)
            if taken is not None:
                return taken
            self.waited += wait
            await asyncio.sleep(wait)

    async def settle(self, call: int, tokens: int) -> None:
        """Record the tokens call ``call`` really used."""
        await asyncio.to_thread(self._settle, call, tokens)

    def _settle(self, call: int, tokens: int) -> None:
        with self.store.write() as conn:
            conn.execute(_SETTLE, {"id": call, "tokens": tokens})

    def _try(self, tokens: int) -> tuple[int | None, float]:
        """Record the call if there is room: ``(id, 0)``; else ``(None, seconds to wait)``."""
        limit, provider = self.limit, self.limit.provider
        longest = max(limit.calls_period, limit.tokens_period)
        with self.store.write() as conn:
            conn.execute(_LOCK, {"provider": provider})
            now = float(conn.execute(_NOW).scalar_one())
            conn.execute(_FORGET, {"provider": provider, "since": now - longest})
            waits = [
                self._wait(conn, now, limit.calls_period, lambda n, _t: n + 1 > (limit.calls or 0))
                if limit.calls is not None
                else 0.0,
                self._wait(
                    conn,
                    now,
                    limit.tokens_period,
                    lambda n, t: n > 0 and t + tokens > (limit.tokens or 0),
                )
                if limit.tokens is not None
                else 0.0,
            ]
            if max(waits) > 0:
                return None, max(waits)
            row = conn.execute(_RECORD, {"provider": provider, "at": now, "tokens": tokens})
            return int(row.scalar_one()), 0.0

    def _wait(self, conn: object, now: float, period: float, full: object) -> float:
        """Seconds until the window of ``period`` has room (0: it has now)."""
        count, used, oldest = conn.execute(  # type: ignore[attr-defined]
            _COUNT, {"provider": self.limit.provider, "since": now - period}
        ).one()
        if not full(int(count), int(used)):  # type: ignore[operator]
            return 0.0
        return max(0.005, float(oldest) + period - now + 0.001)


@dataclass(frozen=True, kw_only=True)
class LimitedModel:
    """A model whose calls wait for room in their provider's window first."""

    model: Model
    window: Window

    @property
    def name(self) -> str:
        """The wrapped model's name."""
        return self.model.name

    def __getattr__(self, attribute: str) -> object:
        """Everything else the wrapped model has (``streams``, ``estimate_cost``, ...)."""
        return getattr(self.model, attribute)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Wait for room, make the call, record what it used."""
        call = await self.window.enter(estimate_tokens(request.text()))
        response = await self.model.complete(request)
        await self.window.settle(call, response.tokens_in + response.tokens_out)
        return response


def limited(model: Model, windows: Mapping[str, Window]) -> Model:
    """``model``, limited by its provider's window when it has one."""
    window = windows.get(provider_of(model))
    return model if window is None else LimitedModel(model=model, window=window)
