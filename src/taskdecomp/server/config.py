"""What the operator chose when the service started: the only choices a client picks from.

A client names a toolset or a model; it never gives a path, a module or a model string the
operator did not list here, so no request can make the server read a file, import a
module or call an unlisted model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from taskdecomp.budget import Budget
from taskdecomp.decomposition import DecompOptions
from taskdecomp.durable import DEFAULT_DURABILITY, Durability
from taskdecomp.errors import ConfigError
from taskdecomp.models.connection import Connection
from taskdecomp.server.hosts import allowed_host

DEFAULT_MAX_BODY_BYTES = 1_000_000
"""The largest request body accepted (a goal, a plan, a chat message)."""

DEFAULT_MAX_STREAMS = 4000
"""The most event streams open at once (each holds a connection and a file descriptor)."""

DEFAULT_MAX_STREAMS_PER_CLIENT = 2000
"""The most event streams one client address holds (a proxy in front counts as one)."""

DEFAULT_STREAM_BUFFER = 1000
"""The most messages a stream may leave unread before it is dropped."""

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
        poll_seconds: how often a SQLite store is asked for events another process
            stored, and the longest a plan stream waits between two reads.
        max_streams: the most event streams open at once; more are refused with 429.
        max_streams_per_client: the most event streams one client address holds at once.
        stream_buffer: the most messages a stream may leave unread before it is dropped
            (its client reconnects with ``Last-Event-ID`` and loses nothing).
        executor: ``process`` runs execute in the server; ``queue`` submits them to
            ``queue`` for ``taskdecomp worker`` processes (PostgreSQL store only; the
            toolset and model names must be the ones the workers register).
        queue: the queue runs are submitted to.
        host: the address the server listens on; with ``port``, the Host names it
            answers to (see :mod:`.hosts`).
        port: the port it listens on; ``None``: loopback names on any port.
        allowed_hosts: further names (``NAME`` or ``NAME:PORT``) clients may reach the
            server by (``serve --allowed-host``); any other Host is refused.
        workflows: workflow name -> workflow file or built-in name (``default``,
            ``tasks``), checked once at start-up.
        workflow_templates: workflow name -> a folder each run of it starts from (copied
            into the run's workspace); a workflow without one starts from an empty folder.
        workspaces: the folder runs' workspaces are made in (one per run, named after
            it); ``None``: ``workspaces`` in the data directory.
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
    max_streams: int = DEFAULT_MAX_STREAMS
    max_streams_per_client: int = DEFAULT_MAX_STREAMS_PER_CLIENT
    stream_buffer: int = DEFAULT_STREAM_BUFFER
    executor: Executor = "process"
    queue: str = "default"
    host: str = "127.0.0.1"
    port: int | None = None
    allowed_hosts: tuple[str, ...] = ()
    workflows: Mapping[str, str] = field(default_factory=dict)
    workflow_templates: Mapping[str, str] = field(default_factory=dict)
    workspaces: str | None = None
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
        _check_workflows(self)
        for name in ("max_streams", "max_streams_per_client", "stream_buffer"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1; got {getattr(self, name)}")
        if self.max_running < 1 or self.max_queued < 0:
            raise ConfigError(
                f"--max-running must be at least 1 and --max-queued at least 0; got "
                f"{self.max_running} and {self.max_queued}"
            )
        if self.token is not None and not self.token.strip():
            raise ConfigError("TASKDECOMP_API_TOKEN is empty; set a long random value or unset it")
        if "*" in self.cors_origins and self.token is None:
            raise ConfigError(
                "--cors-origin '*' lets every web page call this server: set "
                "TASKDECOMP_API_TOKEN too (a page then needs the token), or name the origins"
            )
        for name in self.allowed_hosts:
            allowed_host(name)


def parse_toolsets(pairs: tuple[str, ...]) -> dict[str, str]:
    """``NAME=PATH`` pairs as a mapping.

    Raises:
        ConfigError: a pair has no ``=``, an empty side, or a name given twice.
    """
    return parse_pairs("--tools", pairs, shape="NAME=PATH (e.g. --tools sales=tools.py)")


def _check_workflows(config: ServerConfig) -> None:
    unknown = sorted(set(config.workflow_templates) - set(config.workflows))
    if unknown:
        raise ConfigError(
            f"--workflow-template names {unknown[0]!r}, which no --workflow NAME=FILE registers"
        )
    if config.workflows and config.executor == "queue":
        raise ConfigError(
            "workflow runs execute in the server process; drop --workflow or --executor queue"
        )


def parse_pairs(
    option: str, pairs: tuple[str, ...], *, shape: str = "NAME=VALUE"
) -> dict[str, str]:
    """``NAME=VALUE`` pairs given to ``option`` as a mapping; ``shape`` says what one is.

    Raises:
        ConfigError: a pair has no ``=``, an empty side, or a name given twice.
    """
    found: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise ConfigError(f"{option} {pair!r} is not {shape}")
        if name in found:
            raise ConfigError(f"{option} names {name!r} twice; give each its own name")
        found[name] = value
    return found
