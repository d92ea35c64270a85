"""What model calls cost, by provider and model, whatever server the model is reached at.

A call's price is looked up, first match wins, in:

1. **Prices set in this process**: :func:`set_price` (the CLI's ``--price-in`` /
   ``--price-out`` and ``--prices FILE``), in USD per million input and output tokens.
   ``provider:model`` beats ``provider:*``, which beats ``*:*``.
2. **The maintained table** of the ``genai-prices`` package (the ``prices`` extra), by our
   provider's name in it (:data:`TABLE_PROVIDERS`), tiered prices included.
3. Without that package, :data:`FALLBACK_PER_MTOK`: OpenAI's list prices for a few models.

A model found nowhere has an unknown price: :func:`cost_usd` answers ``None``, never 0, so
a cost budget cannot be passed silently (:func:`require_prices`). The match is by provider
and model only: ``openai:gpt-4.1-mini`` costs the same through a proxy as on OpenAI.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from taskdecomp.errors import ConfigError

__all__ = [
    "FALLBACK_PER_MTOK",
    "TABLE_PROVIDERS",
    "Price",
    "clear_prices",
    "cost_usd",
    "load_prices",
    "price_usd",
    "priced",
    "require_prices",
    "set_price",
    "table_installed",
]

TABLE_PROVIDERS: Mapping[str, str] = {
    "anthropic": "anthropic",
    "azure": "azure",
    "google": "google",
    "groq": "groq",
    "openai": "openai",
    "openrouter": "openrouter",
    "together": "together",
}
"""Our providers' names in the ``genai-prices`` table (theirs happen to be the same)."""

FALLBACK_PER_MTOK: Mapping[str, Mapping[str, tuple[float, float]]] = {
    "openai": {
        "gpt-4.1": (2.00, 8.00),
        "gpt-4.1-mini": (0.40, 1.60),
        "gpt-4.1-nano": (0.10, 0.40),
        "gpt-4o": (2.50, 10.00),
        "gpt-4o-mini": (0.15, 0.60),
        "gpt-5": (1.25, 10.00),
        "gpt-5-mini": (0.25, 2.00),
        "gpt-5-nano": (0.05, 0.40),
        "o3": (2.00, 8.00),
        "o3-mini": (1.10, 4.40),
        "o4-mini": (1.10, 4.40),
    },
}
"""USD per million input and output tokens when ``genai-prices`` is not installed
(OpenAI's list prices of 2025); every other model's price is then unknown."""

_SNAPSHOT = re.compile(r"-\d{4}-\d{2}-\d{2}$")
_ANY = "*"


@dataclass(frozen=True, kw_only=True, slots=True)
class Price:
    """What a model charges, in USD per million tokens."""

    input_per_mtok: float
    """USD per million prompt tokens."""
    output_per_mtok: float
    """USD per million completion tokens."""

    def __post_init__(self) -> None:
        for name in ("input_per_mtok", "output_per_mtok"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"a price's {name} must be a number of USD, got {value!r}")
            if not 0 <= value < math.inf:
                raise ConfigError(f"a price's {name} must be finite USD >= 0, got {value!r}")

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        """What ``tokens_in`` prompt and ``tokens_out`` completion tokens cost, in USD."""
        return (tokens_in * self.input_per_mtok + tokens_out * self.output_per_mtok) / 1e6


_SET: dict[tuple[str, str], Price] = {}
"""Prices set in this process, by (provider, model); ``*`` stands for any."""


def set_price(provider: str, model: str, price_in: float, price_out: float) -> None:
    """Price ``provider``'s ``model`` at ``price_in`` / ``price_out`` USD per million tokens.

    It wins over the table for the rest of the process (a self-hosted or discounted model,
    one the table lacks). ``model`` may be ``*`` (every model of ``provider``), and both
    may be ``*`` (every model).

    Raises:
        ConfigError: a price is negative or not a finite number, or a name is empty.
    """
    if not provider or not model:
        raise ConfigError(
            f"a price names a 'provider:model' such as 'openai:gpt-4.1-mini', 'groq:*' or "
            f"'*:*', not {f'{provider}:{model}'!r}"
        )
    price = Price(input_per_mtok=price_in, output_per_mtok=price_out)
    _SET[(provider.lower(), model.lower())] = price


def clear_prices() -> None:
    """Forget every price set in this process; the table's apply again."""
    _SET.clear()


def load_prices(path: str | Path) -> int:
    """Set the prices a JSON or TOML file gives; the number of prices set.

    The file maps ``"provider:model"`` to ``{"input": USD, "output": USD}`` (per million
    tokens) or to ``[input, output]``; ``.toml`` files are read as TOML, others as JSON.

    Raises:
        ConfigError: the file cannot be read or parsed, or an entry is malformed.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"cannot read the prices file {str(path)!r}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"the prices file {str(path)!r} must map 'provider:model' to prices, "
            f"not be a {type(data).__name__}"
        )
    entries = {key: _entry(path, key, value) for key, value in data.items()}
    for key, price in entries.items():  # all checked first: a bad file sets nothing
        provider, _, model = key.lower().partition(":")
        _SET[(provider, model)] = price
    return len(entries)


def _entry(path: Path, key: str, value: Any) -> Price:
    provider, _, model = key.partition(":")
    if not provider or not model:
        raise ConfigError(
            f"the prices file {str(path)!r} names {key!r}; name a 'provider:model' "
            "such as 'openai:gpt-4.1-mini' (or 'groq:*', '*:*')"
        )
    if isinstance(value, dict) and set(value) == {"input", "output"}:
        given = value["input"], value["output"]
    elif isinstance(value, list) and len(value) == 2:
        given = value[0], value[1]
    else:
        raise ConfigError(
            f"the prices file {str(path)!r} gives {key!r} {value!r}; give "
            '{"input": USD, "output": USD} per million tokens, or [input, output]'
        )
    try:
        return Price(input_per_mtok=given[0], output_per_mtok=given[1])
    except ConfigError as exc:
        raise ConfigError(f"the prices file {str(path)!r}, {key!r}: {exc}") from None


def cost_usd(provider: str, model: str, tokens_in: int, tokens_out: int) -> float | None:
    """What a call to ``provider``'s ``model`` cost in USD; ``None`` when its price is unknown.

    Args:
        provider: our provider's name (``openai``, ``anthropic``, ``groq``...).
        model: the model's name as the server knows it (a dated snapshot matches its model).
        tokens_in: prompt tokens.
        tokens_out: completion tokens.
    """
    given = _given(provider.lower(), model.lower())
    if given is not None:
        return given.cost(tokens_in, tokens_out)
    if table_installed():
        return _table_cost(provider.lower(), model, tokens_in, tokens_out)
    prices = FALLBACK_PER_MTOK.get(provider.lower(), {}).get(_SNAPSHOT.sub("", model.lower()))
    if prices is None:
        return None
    return Price(input_per_mtok=prices[0], output_per_mtok=prices[1]).cost(tokens_in, tokens_out)


def price_usd(provider: str, model: str, tokens_in: int, tokens_out: int) -> float:
    """:func:`cost_usd`, with 0 for an unknown price (for callers that count it as free)."""
    return cost_usd(provider, model, tokens_in, tokens_out) or 0.0


def _given(provider: str, model: str) -> Price | None:
    for key in ((provider, model), (provider, _SNAPSHOT.sub("", model)), (provider, _ANY)):
        if key in _SET:
            return _SET[key]
    return _SET.get((_ANY, _ANY))


@cache
def table_installed() -> bool:
    """Whether the maintained table (the ``genai-prices`` package) is installed."""
    try:
        import genai_prices  # noqa: F401  # imported here once: its table takes ~0.1 s
    except ImportError:
        return False
    return True


def _table_cost(provider: str, model: str, tokens_in: int, tokens_out: int) -> float | None:
    table_id = TABLE_PROVIDERS.get(provider)
    if table_id is None:
        return None
    from genai_prices import Usage, calc_price

    try:
        price = calc_price(
            Usage(input_tokens=tokens_in, output_tokens=tokens_out), model, provider_id=table_id
        )
    except LookupError:  # a model (or provider) the table does not know
        return None
    return float(price.total_price)


def priced(model: object) -> bool:
    """Whether a call to ``model`` (a :class:`~taskdecomp.models.Model`) has a known cost.

    A model that estimates its costs says so (``estimate_cost`` answering ``None`` means
    unknown); one of a provider in the table must be in the table or set; any other
    (``scripted``, ``local``, a plugin's) reports its own cost with each answer.
    """
    estimate = getattr(model, "estimate_cost", None)
    if callable(estimate) and estimate(1) is None:
        return False
    provider, _, name = str(getattr(model, "name", "")).partition(":")
    if provider.lower() in TABLE_PROVIDERS:
        return cost_usd(provider, name, 1, 1) is not None
    return True


def require_prices(models: Iterable[object], max_cost_usd: float | None) -> None:
    """Refuse a cost budget over a model whose price is unknown, before anything runs.

    Raises:
        ConfigError: ``max_cost_usd`` is set and a model's price is unknown; the message
            names the model and how to give it a price.
    """
    if max_cost_usd is None:
        return
    for model in models:
        if not priced(model):
            name = str(getattr(model, "name", model))
            raise ConfigError(
                f"--max-cost-usd needs every model's price, and {name!r} has none known; "
                f"set it with a --prices file entry {name!r} (USD per million tokens), "
                f"--price-in/--price-out (which price every model of the run), or "
                f"prices.set_price() in Python"
            )
