"""Naming a strategy and setting its options on the command line.

``--strategy NAME`` takes any registered strategy that starts from a goal (plugins
included); the registry is read only when a command uses it, so ``--help`` stays light.
``--option KEY=VALUE`` sets any of the strategy's options in their JSON form; a strategy's
own flags (``--max-iterations`` for ``replan``, ``--decompose`` for ``tree``) are the same
options by another name, and a flag no option of the chosen strategy takes is refused with
the strategies that take it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import click

from taskdecomp.errors import ConfigError


class StrategyName(click.ParamType[str]):
    """A registered strategy's name (whether it starts from a goal is checked as it runs)."""

    name = "strategy"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        """``value`` if a strategy has that name; else a usage error listing them.

        Only the names are read: no strategy is imported to parse a command line.
        """
        from taskdecomp.strategies.registry import STRATEGIES

        names = STRATEGIES.names()
        if value not in names:
            self.fail(f"{value!r} is not a strategy; choose one of: {', '.join(names)}", param, ctx)
        return str(value)

    def get_metavar(self, *args: Any, **kwargs: Any) -> str:
        """A name (the choices are listed in the help text, not loaded for it)."""
        return "NAME"


STRATEGY_HELP = (
    "plan_execute: plan once, run, combine. replan: plan, run the ready steps, replan. "
    "tree: work through a plan tree, splitting a task only when its attempt fails. "
    "Or a strategy an installed package adds."
)


_F = TypeVar("_F", bound=Callable[..., Any])


def strategy_option(*, note: str = "") -> Callable[[_F], _F]:
    """The ``--strategy`` option (default ``plan_execute``); ``note`` ends its help."""
    return click.option(
        "--strategy",
        type=StrategyName(),
        default="plan_execute",
        show_default=True,
        help=f"{STRATEGY_HELP} {note}".strip(),
    )


STRATEGY_OPTION = strategy_option()
OPTION_OPTION = click.option(
    "--option",
    "option_pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set one of the strategy's options (repeatable); VALUE is read as JSON when it "
    "parses, else as text, e.g. --option max_iterations=5.",
)

Flag = tuple[str, str]
"""An option key and the flag that sets it, e.g. ``("approve_plan", "--approve-plan")``."""


def strategy_options(
    strategy: str,
    flags: Mapping[Flag, Any],
    pairs: Sequence[str],
    *,
    hints: Mapping[str, str] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> Any:
    """The options of ``strategy`` from its flags (unset: ``None``) and pairs.

    A flag's ``False`` or ``0`` is a value given (``--no-redecompose``, ``--node-retries
    0``): an on/off flag that is off unless given passes ``None`` for off. ``defaults``
    (by option key, from the environment) count below the flags and pairs, and are never
    refused. ``hints`` add a sentence to the refusal of a flag (by its key).

    Raises:
        click.UsageError: a flag or a pair is not one of the strategy's options, or a value
            does not fit (the message names the flag and the strategies that take it).
    """
    from taskdecomp.strategies import registry

    chosen = registry.strategy(strategy)
    if not chosen.starts_from_goal:
        raise click.UsageError(
            f"--strategy {strategy} does not start from a goal; choose one of: "
            f"{', '.join(registry.goal_strategies())}"
        )
    given = {flag: value for flag, value in flags.items() if value is not None}
    context = {key: value for (key, _), value in given.items()}
    refused = [
        (key, flag)
        for (key, flag), value in given.items()
        if _refuses(chosen, key, value) and _refuses(chosen, key, value, context)
    ]
    if refused:
        raise click.UsageError(_refusal(strategy, refused, given, hints or {}))
    data = dict(defaults or {})
    data.update({key: value for (key, _), value in given.items()})
    data.update(_pairs(pairs))
    try:
        return registry.options_for(chosen, data)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None


def _refuses(chosen: Any, key: str, value: Any, context: Mapping[str, Any] | None = None) -> bool:
    """Whether ``chosen`` takes no option ``key`` of ``value``, alone or in ``context``.

    In context, an option that needs another (``--node`` needs ``--plan``) is not refused.
    """
    data = {name: _jsonable(given) for name, given in (context or {}).items()}
    try:
        chosen.options({**data, key: _jsonable(value)})
    except ConfigError:
        return True
    return False


def _refusal(
    strategy: str, refused: list[Flag], given: Mapping[Flag, Any], hints: Mapping[str, str]
) -> str:
    from taskdecomp.strategies import registry

    flags = [flag for _, flag in refused]
    key, value = refused[0][0], given[refused[0]]
    takers = [
        name
        for name in registry.goal_strategies()
        if not _refuses(registry.strategy(name), key, value)
    ]
    named = flags[0] if len(flags) == 1 else f"{', '.join(flags[:-1])} and {flags[-1]}"
    verb = "works" if len(flags) == 1 else "work"
    if not takers:
        return f"{named} cannot be used with --strategy {strategy}"
    hint = "".join(f" {hints[k]}" for k, _ in refused if k in hints)
    return (
        f"{named} {verb} with --strategy {' or '.join(takers)} only; add --strategy "
        f"{takers[0]}{hint}"
    )


def _pairs(pairs: Sequence[str]) -> dict[str, Any]:
    import json  # not at start-up: a usage error or --help never needs it

    found: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise click.UsageError(f"--option takes KEY=VALUE, got {pair!r}")
        try:
            found[key.strip()] = json.loads(text)
        except ValueError:
            found[key.strip()] = text
    return found


def _jsonable(value: Any) -> Any:
    return str(value) if not isinstance(value, bool | int | float | str) else value
