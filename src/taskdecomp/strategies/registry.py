"""The strategy protocol, and the registry every run finds its strategy in.

A strategy is a small object: a name, typed frozen options with one JSON encoding (stored
with the run, accepted over HTTP and on the command line as ``--option KEY=VALUE``), the
phases of a new run, and how it rebuilds itself to continue a stored run. The engine
(:mod:`taskdecomp.strategies.plan_execute` ``run``/``resume``/``continue_run``) asks the
registry for the strategy a run names and never compares names itself.

Built in: ``plan_execute``, ``replan``, ``tree`` and ``workflow`` (which starts from a
workspace with ``run_workflow``, not from a goal). A package adds one through the
``taskdecomp.strategies`` entry-point group; see ``docs/architecture.md``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from taskdecomp.errors import ConfigError
from taskdecomp.plugins import Registry

if TYPE_CHECKING:  # the registry itself stays light: the command line reads its names
    from pydantic import TypeAdapter

    from taskdecomp.answertype import AnswerType
    from taskdecomp.budget import Budget
    from taskdecomp.models.base import Model
    from taskdecomp.store.base import Store, StoredRun
    from taskdecomp.strategies.base import Phases, ToolsArg
    from taskdecomp.tools import Toolset


@dataclass(frozen=True, kw_only=True, slots=True)
class Setup:
    """What a strategy builds its phases from, besides its options."""

    budget: Budget
    """The run's limits."""
    combiner: Model | None = None
    """A separate model for the answer, when the run was given one."""
    stream_plan: bool | None = None
    """Start ``read_only`` steps while the plan streams (``None``: when the model streams)."""
    store: Store | None = None
    """The run's store, when it has one (a strategy may keep more there: plan trees)."""
    answer: AnswerType | None = None
    """The type the run's answer must have (``output_type=``), if any. A strategy that
    sets ``types_answer = True`` types its own answer (through
    :func:`taskdecomp.answers.combine`); any other gets one more combine call at the end."""


@runtime_checkable
class Strategy(Protocol):
    """What a strategy plugin provides (see the module docstring)."""

    @property
    def name(self) -> str:
        """The registry name, stored with every run (``plan_execute``)."""
        ...

    @property
    def summary(self) -> str:
        """One line for help texts and listings."""
        ...

    @property
    def starts_from_goal(self) -> bool:
        """Whether ``run(goal, strategy=name)`` starts it (``workflow`` starts elsewhere)."""
        ...

    @property
    def options_type(self) -> type[Any]:
        """The class of its options (a frozen dataclass)."""
        ...

    def options(self, data: Mapping[str, Any] | None) -> Any:
        """The options from their JSON form (``None``: every default).

        Raises:
            ConfigError: a key is unknown or a value is out of range.
        """
        ...

    def encode(self, options: Any) -> dict[str, Any] | None:
        """The options' JSON form, stored with the run (``None``: nothing to store)."""
        ...

    def start(self, setup: Setup, options: Any) -> Phases:
        """The phases of a new run."""
        ...

    def resume(
        self, setup: Setup, options: Any, stored: StoredRun, tools: ToolsArg | None
    ) -> tuple[Toolset | None, Phases]:
        """The toolset and phases that continue ``stored``.

        A ``None`` toolset means the engine loads the one given, else the one stored.

        Raises:
            ConfigError: the run cannot be continued as stored (its files are gone).
        """
        ...


class DataclassOptions:
    """The JSON encoding of a strategy whose options are a frozen dataclass (via pydantic).

    A strategy sets :attr:`options_type` and gets :meth:`options`, :meth:`encode` and
    :meth:`schema` from it.
    """

    options_type: type[Any]

    def options(self, data: Mapping[str, Any] | None) -> Any:
        """The options from their JSON form; unknown keys are refused.

        Raises:
            ConfigError: a key is unknown or a value does not fit.
        """
        known = {field.name for field in dataclasses.fields(self.options_type)}
        unknown = sorted(set(data or {}) - known)
        if unknown:
            raise ConfigError(
                f"unknown option {unknown[0]!r} for strategy {getattr(self, 'name', '?')!r}; "
                f"known: {', '.join(sorted(known)) or '(none)'}"
            )
        from pydantic import ValidationError

        try:
            return _adapter(self.options_type).validate_python(dict(data or {}))
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(part) for part in problem["loc"]) or "options"
            raise ConfigError(
                f"strategy {getattr(self, 'name', '?')!r} option {where!r}: {problem['msg']}"
            ) from None

    def encode(self, options: Any) -> dict[str, Any] | None:
        """The options' JSON form."""
        encoded: dict[str, Any] = _adapter(self.options_type).dump_python(options, mode="json")
        return encoded

    def schema(self) -> dict[str, Any]:
        """The options' JSON schema."""
        schema: dict[str, Any] = _adapter(self.options_type).json_schema()
        return schema


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(kind: type[Any]) -> TypeAdapter[Any]:
    from pydantic import TypeAdapter

    adapter = _ADAPTERS.get(kind)
    if adapter is None:
        adapter = _ADAPTERS[kind] = TypeAdapter(kind)
    return adapter


STRATEGIES: Registry[Strategy] = Registry(
    group="taskdecomp.strategies",
    kind="strategy",
    builtins={
        "plan_execute": "taskdecomp.strategies.plan_execute:STRATEGY",
        "replan": "taskdecomp.strategies.replan.strategy:STRATEGY",
        "workflow": "taskdecomp.strategies.workflow.strategy:STRATEGY",
        "tree": "taskdecomp.strategies.tree.strategy:STRATEGY",
    },
)
"""Every strategy, by name."""


def strategy(name: str) -> Strategy:
    """The strategy called ``name``.

    Raises:
        ConfigError: no strategy has that name; the message lists them.
    """
    return STRATEGIES.get(name)


def options_for(chosen: Strategy, given: Any) -> Any:
    """``given`` as ``chosen``'s options: an instance as is, a mapping decoded, ``None`` defaults.

    Raises:
        ConfigError: ``given`` is another strategy's options, or does not decode.
    """
    if given is None or isinstance(given, Mapping):
        try:  # NaN would be stored as null: the run would not resume with what it ran with
            json.dumps(given, allow_nan=False, default=str)
        except ValueError as exc:
            raise ConfigError(
                f"strategy {chosen.name!r} options are not strict JSON: {exc}"
            ) from None
        return chosen.options(given)
    if not isinstance(given, chosen.options_type):
        raise ConfigError(
            f"strategy {chosen.name!r} takes {chosen.options_type.__name__} options, not "
            f"{type(given).__name__}"
        )
    return given


def goal_strategies() -> tuple[str, ...]:
    """The strategies ``run(goal, strategy=...)`` can start, for choices users see."""
    return tuple(name for name in STRATEGIES.names() if strategy(name).starts_from_goal)
