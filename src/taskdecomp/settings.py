"""Settings from the environment and ``.env``: the only module that reads them.

Precedence is CLI flag > environment / ``.env`` > default. Environment names are
``TASKDECOMP_<FIELD>`` (``TASKDECOMP_MAX_TOOL_CALLS=12``); budget defaults live in
:class:`~taskdecomp.budget.Budget`, not here.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from pydantic import ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from taskdecomp.budget import Budget
from taskdecomp.errors import ConfigError

BUDGET_FIELDS = tuple(f.name for f in fields(Budget))


class Settings(BaseSettings):
    """Everything taskdecomp reads from the environment. ``None`` means "not set"."""

    model_config = SettingsConfigDict(
        env_prefix="TASKDECOMP_", env_file=".env", extra="ignore", frozen=True
    )

    model: str | None = None
    max_plan_steps: int | None = None
    max_execute_steps: int | None = None
    max_tool_calls: int | None = None
    max_seconds: float | None = None
    max_llm_calls: int | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    max_parallel: int | None = None

    def budget(self, **flags: Any) -> Budget:
        """A budget from flags (when not ``None``), else these settings, else the defaults.

        Raises:
            ConfigError: a value is out of range.
        """
        values = {name: getattr(self, name) for name in BUDGET_FIELDS}
        values.update({name: value for name, value in flags.items() if value is not None})
        try:
            return Budget(**{name: value for name, value in values.items() if value is not None})
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc


def load_settings() -> Settings:
    """Read the environment and ``.env`` once.

    Raises:
        ConfigError: a ``TASKDECOMP_*`` variable does not parse.
    """
    try:
        return Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"TASKDECOMP_{'_'.join(str(p) for p in e['loc']).upper()}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
        raise ConfigError(f"bad environment setting: {problems}") from exc
