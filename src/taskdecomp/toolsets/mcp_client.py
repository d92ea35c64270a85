"""MCP client sessions: one per server per process, on one background thread.

Runs execute on different event loops (the sync facades run one per run, the service has
one, workers use threads), yet a session must serve every call and every run of the
process. So the sessions live on one daemon thread with its own loop, started on the first
list or call; callers submit coroutines there and await them from their own loop, and a
caller that is cancelled (a timeout, the deadline, Ctrl-C) cancels its call. Each session is
opened lazily, kept by its server's launch spec, and closed at exit (its process ended). A
server that dies fails the call in flight and is started again by the next one; one that does
not finish its handshake in time is ended, and the next call starts it again. A call that
fails for any other reason (an answer the SDK refuses, say) is that tool's error only: the
session stays.

The SDK's client loggers (``mcp.client.*``, and ``client`` for its session) write to the log
of the server they concern, beside its stderr, instead of the terminal: a server that prints
to stdout makes the SDK log a traceback per line. A record no session owns reaches this
module's logger as one line.

The official ``mcp`` SDK is imported here only, when the first session opens.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import contextvars
import logging
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from taskdecomp.errors import ToolsetError
from taskdecomp.toolsets.mcp_spec import MCPServer

if TYPE_CHECKING:
    from mcp import Client
    from mcp.types import CallToolResult, Tool

logger = logging.getLogger(__name__)

T = TypeVar("T")

CONNECT_SECONDS = 60.0
"""How long a server may take to start and answer the handshake (or an HTTP connection to
open: an HTTP call may take as long as the tool's own timeout lets it)."""

CLOSE_SECONDS = 10.0
"""How long closing every session at exit may take."""

CLIENT_LOGGERS = ("mcp.client", "client")
"""The SDK's loggers on the client side (its session logs as ``client``)."""

_server_log: contextvars.ContextVar[TextIO | None] = contextvars.ContextVar(
    "taskdecomp_mcp_server_log", default=None
)
"""The log file of the server whose session the current task serves."""


class ServerGone(Exception):
    """The MCP server's connection ended during a call (its process exited, say)."""


class _Session:
    """One server's connection, hosted by a task of its own on the background loop.

    The SDK's client is an async context manager whose cancel scopes belong to the task that
    entered it, so one task enters it, waits until it is closed, and exits it.
    """

    def __init__(self, server: MCPServer, log_dir: Path) -> None:
        self.server = server
        self.log_dir = log_dir
        self.log_path = log_path(log_dir, server)
        self.errlog: TextIO | None = None
        self.client: Client | None = None
        self.ready = asyncio.Event()
        self.dead = asyncio.Event()
        self.failure: BaseException | None = None
        self.broken = False
        """Its connection was lost during a call; it is being closed."""
        self._closing = asyncio.Event()
        self.task = asyncio.ensure_future(self._serve())

    async def _serve(self) -> None:
        from mcp import Client

        try:
            with _log_file(self.log_dir, self.server) as errlog:
                self.errlog = errlog
                _server_log.set(errlog)  # the SDK's tasks for this session inherit it
                async with Client(_transport(self.server, errlog)) as client:
                    self.client = client
                    self.ready.set()
                    await self._closing.wait()
        except BaseException as exc:  # the process ended, the handshake failed, ...
            self.failure = self.failure or exc
            logger.debug("MCP server %s ended", self.server.label, exc_info=True)
        finally:
            self.client = None
            self.errlog = None
            self.dead.set()
            self.ready.set()

    async def connected(self) -> Client:
        """The client once the handshake is done.

        Raises:
            ServerGone: the server could not be started or reached.
        """
        try:
            await asyncio.wait_for(asyncio.shield(self.ready.wait()), CONNECT_SECONDS)
        except TimeoutError:
            await self.abandon(TimeoutError(f"no answer within {CONNECT_SECONDS:g}s"))
        if self.client is None:
            raise ServerGone(
                f"MCP server {self.server.label} could not be started: {_why(self.failure)} "
                f"(its stderr is in {str(self.log_path)!r})"
            )
        return self.client

    async def abandon(self, why: BaseException) -> None:
        """End a session that never got ready: its process is ended as the task unwinds."""
        if self.ready.is_set():
            return
        self.failure = self.failure or why
        self.broken = True
        self.task.cancel()
        await asyncio.wait({self.task}, timeout=CLOSE_SECONDS)

    async def until_dead(self, work: Awaitable[T]) -> T:
        """``work``'s result, or :class:`ServerGone` when the session ends first."""
        _server_log.set(self.errlog)  # what the SDK logs about the call goes there too
        job = asyncio.ensure_future(work)
        dead = asyncio.ensure_future(self.dead.wait())
        try:
            await asyncio.wait({job, dead}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            dead.cancel()
            if not job.done():
                job.cancel()
        failure = self.failure
        if job.done() and not job.cancelled():
            failure = job.exception()
            if failure is None or not (self.dead.is_set() or _lost(failure)):
                return job.result()
            self.broken = True  # the next call starts the server again
            self.close()
        raise ServerGone(
            f"the MCP server {self.server.label} exited during the call "
            f"({_why(failure)}); the next call starts it again"
        )

    def close(self) -> None:
        """Let the hosting task leave the client (the process is ended there)."""
        self._closing.set()


class _Host:
    """The background thread, its loop, and the sessions it hosts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._sessions: dict[tuple[Any, ...], _Session] = {}
        self.starts = 0
        """How many sessions this process has opened (a restarted server counts again)."""

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the background loop, starting it on first use."""
        with self._lock:
            if self._loop is None:
                _route_client_logs()
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name="taskdecomp-mcp", daemon=True
                )
                self._thread.start()
                atexit.register(self.close)
            loop = self._loop
        return asyncio.run_coroutine_threadsafe(coro, loop)

    def session(self, server: MCPServer, log_dir: Path) -> _Session:
        """The live session of ``server``, opened now when it has none (on the loop only)."""
        found = self._sessions.get(server.key)
        if found is None or found.dead.is_set() or found.broken:
            found = self._sessions[server.key] = _Session(server, log_dir)
            self.starts += 1
        return found

    def close(self) -> None:
        """Close every session and stop the thread; the next use starts them again."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._close_all(), loop).result(3 * CLOSE_SECONDS)
        except Exception:  # at exit: a server that will not stop must not hang the process
            logger.debug("closing MCP sessions failed", exc_info=True)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(CLOSE_SECONDS)
        if not thread.is_alive():
            loop.close()

    async def _close_all(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            session.close()
            if not session.ready.is_set():  # still starting: it would never see the close
                session.task.cancel()
        tasks = [session.task for session in sessions]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=CLOSE_SECONDS)
            for task in pending:  # a server that will not stop: end it the hard way
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=CLOSE_SECONDS)
        # Calls still waiting (on a server that was starting, say) end too, and their
        # results reach the threads that wait for them before the loop stops.
        calls = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in calls:
            task.cancel()
        if calls:
            await asyncio.wait(calls, timeout=CLOSE_SECONDS)
        await asyncio.sleep(0)


HOST = _Host()
"""The process's MCP sessions."""


async def on_host(work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Await ``work()`` run on the background loop; cancelling the caller cancels it there."""
    return await asyncio.wrap_future(HOST.submit(work()))


def on_host_sync(work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``work()`` run on the background loop, waited for from a thread with no loop."""
    return HOST.submit(work()).result()


async def list_tools(server: MCPServer, log_dir: Path) -> list[Tool]:
    """Every tool the server lists, page by page (on the background loop).

    Raises:
        ServerGone: the server could not be started, or ended while listing.
    """
    session = HOST.session(server, log_dir)
    client = await session.connected()
    tools: list[Tool] = []
    cursor: str | None = None
    while True:
        page = await session.until_dead(client.list_tools(cursor=cursor))
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


async def call_tool(
    server: MCPServer, log_dir: Path, name: str, arguments: dict[str, Any]
) -> CallToolResult:
    """One call of the server's tool ``name`` (on the background loop).

    Raises:
        ServerGone: the server could not be started, or ended during the call.
        mcp.MCPError: the server answered the request with a protocol error.
    """
    session = HOST.session(server, log_dir)
    client = await session.connected()
    return await session.until_dead(client.call_tool(name, arguments))


def _transport(server: MCPServer, errlog: TextIO) -> Any:
    if server.url is not None:
        return _over_http(server.url, server.launch_headers())
    from mcp import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=server.command or "", args=list(server.args), env=server.launch_env(),
        cwd=server.cwd,
    )  # fmt: skip
    return stdio_client(params, errlog=errlog)


@contextlib.asynccontextmanager
async def _over_http(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    """The SDK's streamable HTTP transport, with our headers, closing its HTTP client."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    timeout = httpx2.Timeout(CONNECT_SECONDS, read=None)  # a call ends at the tool's timeout
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


def log_path(log_dir: Path, server: MCPServer) -> Path:
    """Where the server's stderr goes: ``LOG_DIR/mcp-<command or host>.log``."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", server.label)[:60].strip("-.") or "server"
    return log_dir / f"mcp-{slug}.log"


@contextlib.contextmanager
def _log_file(log_dir: Path, server: MCPServer) -> Iterator[TextIO]:
    """The server's stderr log, appended to :func:`log_path`."""
    path = log_path(log_dir, server)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed below)
    except OSError as exc:
        raise ToolsetError(f"cannot open the MCP server log {str(path)!r}: {exc}") from exc
    with file:
        yield file


class _ToServerLog(logging.Handler):
    """Writes an SDK client record to the log of the server it concerns."""

    def emit(self, record: logging.LogRecord) -> None:
        file = _server_log.get()
        if file is None or file.closed:
            if record.levelno >= logging.WARNING:
                logger.log(record.levelno, "MCP client: %s", record.getMessage())
            return
        try:
            file.write(self.format(record) + "\n")
            file.flush()
        except (OSError, ValueError):  # the file was closed meanwhile
            pass


def _route_client_logs() -> None:
    """Send the SDK's client loggers to the servers' logs, not the terminal (once)."""
    for name in CLIENT_LOGGERS:
        sdk = logging.getLogger(name)
        if not any(isinstance(handler, _ToServerLog) for handler in sdk.handlers):
            handler = _ToServerLog()
            handler.setFormatter(
                logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s")
            )
            sdk.addHandler(handler)
            sdk.propagate = False


def _lost(failure: BaseException) -> bool:
    """Whether a call's failure means the connection is gone (not the server's answer).

    A closed connection, a closed or broken stream, an OS or HTTP transport error: the
    session is over. Anything else (the server's protocol error, an answer the SDK refuses
    as breaking the tool's ``outputSchema``) is the call's own failure.
    """
    import anyio
    import httpx2
    from mcp import MCPError
    from mcp.types import CONNECTION_CLOSED

    root = root_failure(failure)
    if isinstance(root, MCPError):
        return root.code == CONNECTION_CLOSED
    gone = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)
    return isinstance(root, (*gone, OSError, httpx2.TransportError))


def root_failure(failure: T) -> T:
    """The first failure an exception group holds, however deeply (the SDK nests them)."""
    while isinstance(failure, BaseExceptionGroup) and failure.exceptions:
        failure = failure.exceptions[0]  # type: ignore[assignment]
    return failure


def _why(failure: BaseException | None) -> str:
    """The root of a failure in a line: the SDK wraps it in exception groups."""
    failure = root_failure(failure)
    if failure is None:
        return "its connection closed"
    text = str(failure).strip().splitlines()[0] if str(failure).strip() else ""
    return f"{type(failure).__name__}: {text}" if text else type(failure).__name__


__all__ = [
    "HOST",
    "ServerGone",
    "call_tool",
    "list_tools",
    "log_path",
    "on_host",
    "on_host_sync",
    "root_failure",
]
