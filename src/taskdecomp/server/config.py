"""What the operator chose when the service started: the only choices a client picks from.

A client names a toolset or a model; it never gives a path, a module or a model string the
operator did not list here, so no request can make the server read a file, import a
module or call an unlisted model.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from taskdecomp.budget import Budget
from taskdecomp.decomposition import DecompOptions
from taskdecomp.durable import DEFAULT_DURABILITY, Durability
from taskdecomp.errors import ConfigError
from taskdecomp.models.connection import Connection

DEFAULT_MAX_BODY_BYTES = 1_000_000
"""The largest request body accepted (a goal, a plan, a chat message)."""

CHAT_ACTIONS = (
    "plan_operation/create_plan",
    "plan_operation/get_plan",
    "task_operation/decompose_task",
    "run_operation/start_run",
    "run_operation/get_run",
    "run_operation/cancel_run",
    "run_operation/approve_run",
    "run_operation/reject_run",
)
"""Every structured action the chat agent knows (see ``docs/actions.md``)."""

DEFAULT_MAX_RUNNING = 32
"""Runs executing at once. Runs mostly wait on models and tools, so many fit, but each
step's bookkeeping takes the event loop: on two cores, 32 short runs at once finish a burst
about as fast as any number (``bench/service_admission.py``) and keep memory bounded."""

DEFAULT_MAX_QUEUED = 1000
"""Runs waiting to start: a waiting run costs a stored row and a few hundred bytes here."""

Executor = Literal["process", "queue"]
"""Where the service's runs execute: in the server process, or on queue workers."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerConfig:
    """How one service process is set up.

    Args:
        store_url: the run store, as for the CLI's ``--db``.
        toolsets: toolset name -> path or module, loaded once at start-up.
        models: the model strings runs may use; the first is the default.
        connection: where models of a provider that connects to a server connect
            (``serve --base-url``).
        decomp_model: the decomposer's model (``DECOMP_MODEL``); default: the first of
            ``models``.
        chat_model: the chat agent's model; ``None`` turns ``POST /chat`` off.
        token: the bearer token every API request must carry; ``None``: no token.
        cors_origins: origins allowed to call the API from a browser; empty: CORS off.
        budget: the default budget of a run (a request may lower or change it).
        decomp: the decomposer's defaults (``DECOMP_*``).
        chat_actions: the actions the chat agent may take.
        max_body_bytes: the largest request body accepted.
        lease_seconds: how long a run's lease outlives this process if it dies.
        durability: how runs' checkpoints reach the disk (``async`` or ``sync``).
        poll_seconds: the longest an event stream waits between two reads of the store.
        executor: ``process`` runs execute in the server; ``queue`` submits them to
            ``queue`` for ``taskdecomp worker`` processes (PostgreSQL store only; the
            toolset and model names must be the ones the workers register).
        queue: the queue runs are submitted to.
        max_running: runs that execute in this process at once (``process``).
        max_queued: runs that may wait for one of those slots; beyond them a new run
            is refused with 429.
    """

    store_url: str
    toolsets: Mapping[str, str]
    models: tuple[str, ...]
    connection: Connection = field(default_factory=Connection)
    decomp_model: str | None = None
    chat_model: str | None = None
    token: str | None = field(default=None, repr=False)
    cors_origins: tuple[str, ...] = ()
    budget: Budget = field(default_factory=Budget)
    decomp: DecompOptions = field(default_factory=DecompOptions)
    chat_actions: tuple[str, ...] = CHAT_ACTIONS
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    lease_seconds: float = 30.0
    durability: Durability = DEFAULT_DURABILITY
    poll_seconds: float = 0.5
    executor: Executor = "process"
    queue: str = "default"
    max_running: int = DEFAULT_MAX_RUNNING
    max_queued: int = DEFAULT_MAX_QUEUED

    def __post_init__(self) -> None:
        if not self.toolsets:
            raise ConfigError("the service needs at least one toolset: --tools NAME=PATH")
        if not self.models:
            raise ConfigError("the service needs at least one model: --model MODEL")
        unknown = sorted(set(self.chat_actions) - set(CHAT_ACTIONS))
        if unknown:
            raise ConfigError(
                f"unknown chat action {unknown[0]!r}; known: {', '.join(CHAT_ACTIONS)}"
            )
        if self.executor == "queue" and not self.store_url.startswith("postgresql"):
            raise ConfigError(
                "--executor queue needs a PostgreSQL store (--db postgresql://...), the one "
                f"the workers use; got {self.store_url!r}"
            )
        if self.max_running < 1 or self.max_queued < 0:
            raise ConfigError(
                f"--max-running must be at least 1 and --max-queued at least 0; got "
                f"{self.max_running} and {self.max_queued}"
            )
        if self.token is not None and not self.token.strip():
            raise ConfigError("TASKDECOMP_API_TOKEN is empty; set a long random value or unset it")


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (127.0.0.0/8, ::1) or ``localhost``."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to listen beyond loopback without a token.

    Raises:
        ConfigError: ``host`` is not a loopback address and no token is set.
    """
    if token is None and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host!r} without a token: set TASKDECOMP_API_TOKEN "
            "(clients then send 'Authorization: Bearer TOKEN'), or bind to 127.0.0.1"
        )


def parse_toolsets(pairs: tuple[str, ...]) -> dict[str, str]:
    """``NAME=PATH`` pairs as a mapping.

    Raises:
        ConfigError: a pair has no ``=``, an empty side, or a name given twice.
    """
    found: dict[str, str] = {}
    for pair in pairs:
        name, sep, source = pair.partition("=")
        name, source = name.strip(), source.strip()
        if not sep or not name or not source:
            raise ConfigError(f"--tools {pair!r} is not NAME=PATH (e.g. --tools sales=tools.py)")
        if name in found:
            raise ConfigError(f"--tools names {name!r} twice; give each toolset its own name")
        found[name] = source
    return found
