"""How a provider reaches its server: base URL, key variable, timeout, headers, output mode.

A provider's *dialect* (how it asks, how it reads answers) is its own; the *connection* is
given from outside: by ``--base-url`` and friends on the command line, ``serve`` and
``worker``, or in Python. A key is never part of it, only the name of the environment
variable that holds one, so no key is written in a command line, a stored run or a log.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from taskdecomp import redact
from taskdecomp.errors import ConfigError
from taskdecomp.models.outputs import OutputMode, output_mode


@dataclass(frozen=True, kw_only=True, slots=True)
class Connection:
    """Where and how a provider connects; every field unset means the provider's defaults."""

    base_url: str | None = None
    """The server, e.g. ``http://127.0.0.1:8000/v1``."""
    api_key_env: str | None = None
    """The environment variable holding the key (never the key itself)."""
    timeout: float | None = None
    """Seconds one attempt may take."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra HTTP headers sent with every request."""
    output_mode: OutputMode | None = None
    """The output mode to ask for structured answers in first (``--output-mode``); ``None``
    lets the provider pick its best. A server that refuses it still falls back."""

    def __post_init__(self) -> None:
        if self.timeout is not None and not self.timeout > 0:
            raise ConfigError(f"a connection timeout must be positive seconds: {self.timeout!r}")
        if self.output_mode is not None:
            output_mode(self.output_mode)

    @property
    def given(self) -> bool:
        """Whether any field is set."""
        return bool(
            self.base_url or self.api_key_env or self.timeout or self.headers or self.output_mode
        )

    def api_key(self) -> str | None:
        """The key from :attr:`api_key_env` (``None`` when no variable is named).

        The variable counts as a secret from then on, whatever its name
        (:func:`taskdecomp.redact.declare`): runs replace its value in what they record.

        Raises:
            ConfigError: the variable is named but not set.
        """
        if self.api_key_env is None:
            return None
        redact.declare(self.api_key_env)
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ConfigError(
                f"the environment variable {self.api_key_env!r} holds no key; export it first"
            )
        return redact.declare_value(key)
