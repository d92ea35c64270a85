"""``--price-in``, ``--price-out`` and ``--prices FILE``: what the process's models cost.

One decorator, :func:`price_options`, puts the three flags on a command. They configure
the process-wide prices of :mod:`taskdecomp.models.prices` as the command line is read
(``expose_value=False``), so the command's own signature does not change. Each command
starts from the table: prices set by an earlier command in the same process are dropped.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from taskdecomp.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])

_META = "taskdecomp.prices"
_NAMES = frozenset({"price_in", "price_out", "prices_file"})


def _heard(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    """Note one flag's value; once all three are known, set the prices they give."""
    given: dict[str, Any] = ctx.meta.setdefault(_META, {})
    given[str(param.name)] = value
    if set(given) == _NAMES:
        _configure(given["price_in"], given["price_out"], given["prices_file"])


def _configure(price_in: float | None, price_out: float | None, path: Path | None) -> None:
    if price_in is None and price_out is None and path is None:
        loaded = sys.modules.get("taskdecomp.models.prices")  # not loaded: nothing was set
        if loaded is not None:
            loaded.clear_prices()
        return
    from taskdecomp.models import prices

    prices.clear_prices()
    if path is not None:
        try:
            prices.load_prices(path)
        except ConfigError as exc:
            raise click.BadParameter(str(exc), param_hint="'--prices'") from None
    if (price_in is None) != (price_out is None):
        raise click.UsageError(
            "--price-in and --price-out go together: give both, in USD per million tokens "
            "(0 for a model that bills nothing)"
        )
    if price_in is not None and price_out is not None:
        prices.set_price("*", "*", price_in, price_out)


_PRICE = click.FloatRange(min=0)

_OPTIONS = (
    click.option(
        "--price-in",
        type=_PRICE,
        metavar="USD",
        expose_value=False,
        callback=_heard,
        help="Price of every model's prompt tokens, USD per million (with --price-out); "
        "wins over the price table.  [default: the genai-prices table]",
    ),
    click.option(
        "--price-out",
        type=_PRICE,
        metavar="USD",
        expose_value=False,
        callback=_heard,
        help="Price of every model's completion tokens, USD per million (with --price-in).",
    ),
    click.option(
        "--prices",
        "prices_file",
        type=click.Path(dir_okay=False, path_type=Path),
        metavar="FILE",
        expose_value=False,
        callback=_heard,
        help='Prices per model: a JSON or TOML file mapping "provider:model" (or '
        '"provider:*") to {"input": USD, "output": USD} per million tokens.',
    ),
)


def price_options(command: F) -> F:
    """Put ``--price-in``, ``--price-out`` and ``--prices`` on ``command``."""
    for option in reversed(_OPTIONS):
        command = option(command)
    return command
