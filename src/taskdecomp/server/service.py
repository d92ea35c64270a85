"""The parts of one service process, built once from the operator's choices."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from taskdecomp.errors import ConfigError
from taskdecomp.models import connects, resolve_model
from taskdecomp.server.config import ServerConfig
from taskdecomp.server.hub import StreamHub
from taskdecomp.server.plans import PlanService
from taskdecomp.server.reading import Reads
from taskdecomp.server.runs import RunService
from taskdecomp.server.slots import StreamSlots
from taskdecomp.store import SqlStore, open_store
from taskdecomp.store.trees import TreeRepository
from taskdecomp.tools import Toolset, load_toolset

if TYPE_CHECKING:
    from taskdecomp.server.chat import ChatAgent

SHUTDOWN_SECONDS = 5.0
"""How long shutting down waits for runs to store themselves as cancelled."""


@dataclass(kw_only=True)
class Service:
    """Everything the HTTP layer calls: runs, plans, the chat agent and the store."""

    config: ServerConfig
    store: SqlStore
    runs: RunService
    plans: PlanService
    streams: StreamHub
    """The readers behind the run event streams, and the caps on open streams."""
    chat: ChatAgent | None = None
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the server begins to shut down: streams end, new work is refused."""

    loop: asyncio.AbstractEventLoop | None = None
    """The loop the application runs on, once it has started."""

    def begin_shutdown(self) -> None:
        """Stop taking work, end every stream, cancel runs in flight (safe to repeat)."""
        self.closing.set()
        self.streams.close()
        self.runs.begin_shutdown()
        self.plans.closing = True

    def request_shutdown(self) -> None:
        """:meth:`begin_shutdown` from a signal handler: run on the loop, not in between."""
        if self.loop is None or self.loop.is_closed():
            self.begin_shutdown()
        else:
            self.loop.call_soon_threadsafe(self.begin_shutdown)

    async def shutdown(self, timeout: float = SHUTDOWN_SECONDS) -> None:
        """Cancel runs and decompositions in flight (each checkpoints), then close the store."""
        self.begin_shutdown()
        await asyncio.gather(self.runs.shutdown(timeout), self.plans.shutdown(timeout))
        await self.streams.shutdown()
        self.store.close()


def open_service(config: ServerConfig) -> Service:
    """Open the store, load every toolset and check every model string.

    Raises:
        ConfigError: a toolset does not load, a model string names no provider, or the
            store cannot be opened; the message names which.
    """
    toolsets = {name: _load(name, source) for name, source in config.toolsets.items()}
    # queued runs' models are names the workers register: they resolve them
    runs_models = config.models if config.executor == "process" else ()
    for spec in {*runs_models, config.decomp_model, config.chat_model} - {None}:
        assert spec is not None
        _check_model(spec)
    if config.executor == "queue":
        from taskdecomp.scale import engine

        engine.dbos()  # the extra is installed
    store = open_store(config.store_url)
    try:
        from taskdecomp.server.chat import ChatAgent

        reads = Reads()
        runs = RunService(config, store, toolsets, reads=reads)
        plans = PlanService(config, TreeRepository(store), reads=reads)
        slots = StreamSlots(total=config.max_streams, per_client=config.max_streams_per_client)
        hub = StreamHub(
            store,
            runs,
            slots=slots,
            poll_seconds=config.poll_seconds,
            buffer=config.stream_buffer,
        )
        service = Service(config=config, store=store, runs=runs, plans=plans, streams=hub)
        if config.chat_model is not None:
            chat = resolve_model(config.chat_model, connection=config.connection)
            service.chat = ChatAgent(service, chat)
        return service
    except BaseException:
        store.close()
        raise


def _load(name: str, source: str) -> Toolset:
    try:
        return load_toolset(source)
    except ConfigError as exc:
        raise ConfigError(f"toolset {name!r}: {exc}") from exc


def _check_model(spec: str) -> None:
    """Fail at start-up, not at the first request, on a model string that cannot work."""
    if connects(spec.partition(":")[0]):
        return  # its server is asked at the first call; it may need no key until then
    resolve_model(spec)
