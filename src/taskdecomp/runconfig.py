"""The settings stored with a run, so that a resume (in any process) can rebuild it.

A run's row keeps its goal, its model string and its toolset's source, and a JSON
``config``: the budget, the allowed tools, the model strings of the roles that have their
own (``roles``: ``{"combiner": "openai:gpt-4.1-mini"}``; runs stored before roles keep
their combiner's as ``combiner_model``, read as the combiner role's), the strategy, the
strategy's options under the strategy's name, and the answer's JSON schema (``answer_schema``)
when the run has an answer type.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from taskdecomp.budget import Budget
from taskdecomp.errors import ConfigError, CorruptRecordError
from taskdecomp.redact import Redactor
from taskdecomp.roles import Role
from taskdecomp.run import RunId
from taskdecomp.store.base import NewRun, StoredRun
from taskdecomp.tools import Toolset


@dataclass(frozen=True, kw_only=True, slots=True)
class StoredConfig:
    """The settings a run was stored with; a resume defaults to them."""

    budget: Budget
    allow: tuple[str, ...]
    """The tools the run allowed."""
    roles: Mapping[Role, str] = field(default_factory=dict)
    """The model strings of the roles that have their own model."""
    strategy: str = "plan_execute"
    """The strategy the run uses."""
    options: Mapping[str, Any] | None = None
    """The strategy's options in their JSON form (stored under the strategy's name)."""
    answer_schema: dict[str, Any] | None = None
    """The JSON schema of the run's answer type, when it has one."""


class _ConfigModel(BaseModel):
    model_config = ConfigDict(extra="allow")  # a strategy's options, under its name
    budget: dict[str, Any]
    allow: list[str]
    roles: dict[Role, str] = Field(default_factory=dict)
    combiner_model: str | None = None
    """Before roles: the combiner's model, now the combiner role's."""
    strategy: str = "plan_execute"
    answer_schema: dict[str, Any] | None = None


def new_run(
    run_id: RunId,
    goal: str,
    *,
    tools: object,
    model: object,
    roles: Mapping[Role, object] | None = None,
    allow: Iterable[str],
    budget: Budget,
    strategy: str = "plan_execute",
    options: Mapping[str, Any] | None = None,
    answer_schema: Mapping[str, Any] | None = None,
    redactor: Redactor | None = None,
) -> NewRun:
    """What to store when a run starts: enough for a resume to rebuild it.

    ``roles`` (a model or model string per role) are stored as model strings; a model
    object without a string name is left out (a resume then needs it again).
    ``options`` (the strategy's, in their JSON form) are stored under the strategy's name;
    ``answer_schema``, the JSON schema of the run's answer type, only when given.
    The values of secret variables in the goal and the options are stored as
    ``[redacted]`` (:mod:`taskdecomp.redact`): by ``redactor``, the run's, or else the
    environment's.
    """
    config: dict[str, Any] = {
        "budget": budget.to_dict(),
        "allow": sorted(allow),
        "roles": role_names(roles or {}),
        "strategy": strategy,
    }
    if answer_schema is not None:
        config["answer_schema"] = dict(answer_schema)
    if options is not None:
        if strategy in config:
            raise ConfigError(f"a strategy may not be called {strategy!r}: the run stores that")
        config[strategy] = dict(options)
    # a key typed into the goal is stored redacted too
    secrets = redactor if redactor is not None else Redactor.from_environ()
    return NewRun(
        run_id=run_id,
        goal=secrets.text(goal),
        model=model_name(model),
        tools=tools_name(tools),
        config=secrets.value(config),
    )


def model_name(model: object) -> str | None:
    """A model's string: the string itself, or a model object's ``name``."""
    if model is None or isinstance(model, str):
        return model
    name = getattr(model, "name", None)
    return name if isinstance(name, str) else None


def role_names(roles: Mapping[Role, object]) -> dict[Role, str]:
    """The model strings of ``roles``, leaving out those that have none."""
    return {role: name for role, model in roles.items() if (name := model_name(model))}


def tools_name(tools: object) -> str | None:
    """A toolset's source: a module name, or a file's absolute path; ``None`` for objects."""
    if isinstance(tools, Toolset):
        return tools.source
    if not isinstance(tools, str | Path):
        return None
    path = Path(tools)
    return str(path.resolve()) if path.is_file() else str(tools)


def stored_config(stored: StoredRun) -> StoredConfig:
    """Decode the settings stored with a run.

    Raises:
        CorruptRecordError: they do not decode.
    """
    try:
        raw = _ConfigModel.model_validate(stored.config)
        budget = Budget(**raw.budget)
        options = stored.config.get(raw.strategy)
        if options is not None and not isinstance(options, Mapping):
            raise ValueError(f"the {raw.strategy} options are not an object")
    except (ValidationError, TypeError, ValueError) as exc:
        problem = str(exc).strip().splitlines()[0]
        raise CorruptRecordError(
            f"stored run {stored.run_id!r}: runs.config does not decode ({problem}); "
            "refusing to use it"
        ) from exc
    return StoredConfig(
        budget=budget,
        allow=tuple(raw.allow),
        roles=_roles(raw),
        strategy=raw.strategy,
        options=options,
        answer_schema=raw.answer_schema,
    )


def _roles(raw: _ConfigModel) -> dict[Role, str]:
    """The stored role models, with an older run's ``combiner_model`` as its combiner's."""
    if raw.combiner_model is not None and "combiner" not in raw.roles:
        return {**raw.roles, "combiner": raw.combiner_model}
    return dict(raw.roles)


def require(value: str | None, what: str, run_id: RunId) -> str:
    """A stored default that a resume needs.

    Raises:
        ConfigError: the run was stored without it (it was given as an object).
    """
    if value is None:
        raise ConfigError(
            f"run {run_id!r} was started with {what} given as Python objects, so none is "
            f"stored; pass {what}= to resume (--{what} on the command line)"
        )
    return value
