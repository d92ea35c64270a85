"""What model calls cost: USD per million input and output tokens, by provider and model.

A provider looks its model up here once it knows the server bills at list price (its own
endpoint); a model or a server not in the table costs 0, so ``max_cost_usd`` counts only
what is known. A dated snapshot (``gpt-4.1-mini-2025-04-14``) is priced as its model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

PRICES_PER_MTOK: Mapping[str, Mapping[str, tuple[float, float]]] = {
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
"""USD per million input and output tokens, by provider, then model."""

_SNAPSHOT = re.compile(r"-\d{4}-\d{2}-\d{2}$")


def cost_usd(provider: str, model: str, tokens_in: int, tokens_out: int) -> float | None:
    """What a call cost with ``provider``'s ``model``; ``None`` when its price is unknown."""
    if _SNAPSHOT.sub("", model) not in PRICES_PER_MTOK.get(provider, {}):
        return None
    return price_usd(provider, model, tokens_in, tokens_out)


def price_usd(provider: str, model: str, tokens_in: int, tokens_out: int) -> float:
    """What ``tokens_in`` + ``tokens_out`` cost with ``provider``'s ``model``; 0 if unknown."""
    prices = PRICES_PER_MTOK.get(provider, {}).get(_SNAPSHOT.sub("", model))
    if prices is None:
        return 0.0
    price_in, price_out = prices
    return (tokens_in * price_in + tokens_out * price_out) / 1_000_000
