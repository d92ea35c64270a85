"""Where a tool call runs, so that a run can always walk away from it.

A run must end at its deadline whatever its tools do. Each call therefore runs as a
:class:`Job` that the gateway can await with a time limit and :meth:`~Job.abandon`:

- a sync tool runs on a daemon worker thread (a pool shared by the whole process, fed by a
  queue, that never holds up interpreter exit); an abandoned call runs on to its end and
  its result is dropped;
- an async tool runs in a task of its own; an abandoned one is cancelled and, if it ignores
  the cancellation, left running detached (never awaited);
- a tool with ``isolation="process"`` runs in a fresh worker process (``forkserver`` where
  the platform has it, else ``spawn``) that imports the tool again from its module or
  toolset file; arguments and result cross as JSON. An abandoned call's process is killed
  with SIGKILL, and a process that dies without answering is reported with its exit code.

Whatever a tool raises, :class:`BaseException` included (``KeyboardInterrupt``,
``SystemExit``, its own ``CancelledError``), comes back as the job's :class:`Outcome`; it
never escapes into the run.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import functools
import importlib
import json
import logging
import multiprocessing
import multiprocessing.connection
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic_core import PydanticSerializationError, to_jsonable_python

from taskdecomp.argmodels import IDEMPOTENCY_PARAM, TOOLSET_MODULE_PREFIX
from taskdecomp.tools import Retry, ToolSpec
from taskdecomp.toolsets.python import import_file

if TYPE_CHECKING:  # ForkServerContext does not exist on Windows
    from multiprocessing.context import ForkServerContext, SpawnContext

logger = logging.getLogger(__name__)

IDLE_SECONDS = 60.0
"""A worker thread with nothing to do for this long ends."""


class ToolProcessError(Exception):
    """A tool in a worker process failed, or the process died; the message says which."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a call ended: its value, or what it raised."""

    value: Any = None
    error: BaseException | None = None


@dataclass(frozen=True, slots=True, eq=False)
class Job:
    """One call in flight: wait for its :meth:`outcome`, or :meth:`abandon` it."""

    future: asyncio.Future[Outcome]
    """Settled with the outcome; for an async tool, the tool's own task."""
    stop: Callable[[], object]
    in_loop: bool = False
    """The call is a task on the loop, which may ignore cancellation: never await it."""

    async def outcome(self, timeout: float | None = None) -> Outcome:
        """The call's outcome; cancelling the caller never waits for the call.

        Raises:
            TimeoutError: ``timeout`` seconds passed (the call goes on until abandoned).
        """
        if timeout is None:
            return await self._outcome()
        async with asyncio.timeout(timeout):
            return await self._outcome()

    async def _outcome(self) -> Outcome:
        if not self.in_loop:
            return await self.future  # a plain future: cancelling it stops nothing
        waiter = self.future.get_loop().create_future()
        self.future.add_done_callback(functools.partial(_wake, waiter))
        await waiter
        if self.future.cancelled():  # not by us: we were not cancelled, or we would not be here
            return Outcome(error=asyncio.CancelledError("the tool's task was cancelled"))
        return self.future.result()

    def abandon(self) -> None:
        """Stop waiting for the call, and stop the call as far as its kind allows."""
        self.stop()


def _wake(waiter: asyncio.Future[None], _: object) -> None:
    if not waiter.done():
        waiter.set_result(None)


def start(spec: ToolSpec, kwargs: dict[str, Any]) -> Job:
    """Start calling ``spec`` with validated ``kwargs`` where its kind and isolation say."""
    if spec.isolation == "process":
        return _in_process(spec, kwargs)
    if spec.is_async:
        return _in_task(spec.fn, kwargs)
    return _in_thread(spec.fn, kwargs)


def describe(exc: BaseException) -> str:
    """``Type: message`` for what a tool raised (the message alone for a worker's report)."""
    if isinstance(exc, ToolProcessError):
        return str(exc)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --- sync tools: daemon worker threads ------------------------------------------------------


class _Workers:
    """Daemon threads fed by a queue; a new one starts whenever none is idle.

    Invariant: threads not busy with work == idle tokens + queued work, so queued work always
    has a thread to take it; a thread ends only by taking back an idle token.
    """

    def __init__(self) -> None:
        self._work: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._started = 0

    def submit(self, work: Callable[[], None]) -> None:
        self._work.put(work)
        if not self._idle.acquire(blocking=False):
            self._started += 1
            name = f"taskdecomp-tool-{self._started}"
            threading.Thread(target=self._serve, name=name, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                work = self._work.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                if self._idle.acquire(blocking=False):
                    return
                continue
            work()
            del work  # drop the finished call's frames before waiting again
            self._idle.release()


_workers = _Workers()


def _reset_after_fork() -> None:
    global _workers
    _workers = _Workers()  # the parent's threads do not exist in a forked child


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_reset_after_fork)


def _in_thread(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Job:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Outcome] = loop.create_future()

    context = contextvars.copy_context()  # as asyncio.to_thread: the caller's context vars

    def work() -> None:
        _settle(loop, future, context.run(_call, fn, kwargs))

    _workers.submit(work)
    return Job(future=future, stop=future.cancel)


def _call(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Outcome:
    try:
        return Outcome(value=fn(**kwargs))
    except BaseException as exc:  # whatever the tool raises is its own failure
        return Outcome(error=exc)


def _settle(loop: asyncio.AbstractEventLoop, future: asyncio.Future[Outcome], out: Outcome) -> None:
    """Hand ``out`` to the loop; a loop that has closed has walked away from the call."""
    try:
        loop.call_soon_threadsafe(_set, future, out)
    except RuntimeError:
        _log_late(out)


def _set(future: asyncio.Future[Outcome], out: Outcome) -> None:
    if future.done():
        _log_late(out)
    else:
        future.set_result(out)


def _log_late(out: Outcome) -> None:
    if out.error is not None:
        logger.warning("an abandoned tool call ended later with %s", describe(out.error))


# --- async tools: tasks that can be left behind ---------------------------------------------

_detached: set[asyncio.Task[Outcome]] = set()
"""Abandoned tasks still running: held so they are not collected while they run."""


def _in_task(fn: Callable[..., Coroutine[Any, Any, Any]], kwargs: dict[str, Any]) -> Job:
    task = asyncio.get_running_loop().create_task(_guard(fn, kwargs))
    return Job(future=task, stop=lambda: _detach(task), in_loop=True)


async def _guard(fn: Callable[..., Coroutine[Any, Any, Any]], kwargs: dict[str, Any]) -> Outcome:
    try:
        return Outcome(value=await fn(**kwargs))
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # abandoned: nobody waits for an outcome
        return Outcome(error=exc)  # the tool raised it itself
    except BaseException as exc:  # whatever the tool raises is its own failure
        return Outcome(error=exc)


def _detach(task: asyncio.Task[Outcome]) -> None:
    if task.done():
        return
    task.cancel()
    # a tool that ignores cancellation may still be pending when its loop closes
    task._log_destroy_pending = False  # type: ignore[attr-defined]  # asyncio's own switch
    _detached.add(task)
    task.add_done_callback(_forget)


def _forget(task: asyncio.Task[Outcome]) -> None:
    _detached.discard(task)
    if not task.cancelled():
        _log_late(task.result())


# --- isolation="process": killable worker processes -----------------------------------------


def _in_process(spec: ToolSpec, kwargs: dict[str, Any]) -> Job:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Outcome] = loop.create_future()
    try:
        call = _ProcessCall(spec.name, _request(spec, kwargs))
    except Exception as exc:  # arguments JSON cannot carry, a module that is gone, ...
        message = f"the call cannot be sent to a worker process: {describe(exc)}"
        future.set_result(Outcome(error=ToolProcessError(message)))
        return Job(future=future, stop=future.cancel)

    def work() -> None:
        outcome = call.run()
        if not call.killed:  # a process we killed has nothing to report
            _settle(loop, future, outcome)

    _workers.submit(work)

    def stop() -> None:
        future.cancel()
        call.kill()

    return Job(future=future, stop=stop)


def _request(spec: ToolSpec, kwargs: dict[str, Any]) -> str:
    fn = spec.fn
    module = sys.modules[fn.__module__]
    return json.dumps(
        {
            "name": spec.name,
            "module": fn.__module__,
            "file": getattr(module, "__file__", None),
            "qualname": fn.__qualname__,
            "kwargs": to_jsonable_python(kwargs),
            "environ": dict(os.environ),  # a forkserver's children would see its own, older one
        }
    )


_live: set[_ProcessCall] = set()
"""Calls whose worker process may still run; killed at interpreter exit."""


class _ProcessCall:
    """One call in a worker process, driven from a worker thread; :meth:`kill` from anywhere."""

    def __init__(self, name: str, request: str) -> None:
        self.name = name
        self._request = request
        self._lock = threading.Lock()
        self._process: BaseProcess | None = None
        self.killed = False
        self._ended = False
        self._settled = threading.Event()
        """Set once the process started (or failed to): a kill from now on reaches it."""

    def run(self) -> Outcome:
        """Start the process, wait for its answer or its death, and reap it (blocking)."""
        _live.add(self)
        try:
            return self._run()
        except Exception as exc:  # the process could not start (fork failed, ...)
            return Outcome(error=ToolProcessError(f"its worker process failed: {exc}"))
        finally:
            _live.discard(self)

    def _run(self) -> Outcome:
        context = _context()
        receiver, sender = context.Pipe(duplex=False)
        process = context.Process(
            target=child_main, args=(sender, self._request), name=f"taskdecomp-tool-{self.name}"
        )
        try:
            try:
                process.start()
                sender.close()
                with self._lock:
                    self._process = process
                    if self.killed:
                        process.kill()
            finally:
                self._settled.set()
            answer = _receive(receiver, process)
            process.join()
        finally:
            with self._lock:
                self._ended = True
            sender.close()
            receiver.close()
        exitcode = process.exitcode
        process.close()
        return _outcome(answer, exitcode)

    def kill(self) -> None:
        """Kill the process (SIGKILL), or make sure it is killed as soon as it starts."""
        with self._lock:
            self.killed = True
            if self._process is not None and not self._ended:
                self._process.kill()

    def settle(self, timeout: float) -> None:
        """Wait until a start in progress has ended (its thread then kills what it started)."""
        self._settled.wait(timeout)


def _receive(receiver: Connection, process: BaseProcess) -> bytes | None:
    """The answer, or ``None`` when the process ended without one."""
    multiprocessing.connection.wait([receiver, process.sentinel])
    try:
        return receiver.recv_bytes() if receiver.poll() else None
    except (EOFError, OSError):
        return None


def _outcome(answer: bytes | None, exitcode: int | None) -> Outcome:
    if answer is None:
        how = f"code {exitcode}"
        if exitcode is not None and exitcode < 0:
            how += f" ({_signal_name(-exitcode)})"
        return Outcome(
            error=ToolProcessError(f"the tool's process exited with {how} before returning")
        )
    data = json.loads(answer)
    if "retry" in data:  # the tool asked to be called again
        return Outcome(error=Retry(data["retry"], after=data.get("after")))
    if "error" in data:
        return Outcome(error=ToolProcessError(data["error"]))
    return Outcome(value=data["value"])


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


_chosen: ForkServerContext | SpawnContext | None = None


def _context() -> ForkServerContext | SpawnContext:
    """``forkserver`` (children fork from a clean server that has imported us), else spawn."""
    global _chosen
    if _chosen is None:
        if "forkserver" in multiprocessing.get_all_start_methods():
            forkserver = multiprocessing.get_context("forkserver")
            forkserver.set_forkserver_preload([__name__])
            _chosen = forkserver
        else:
            _chosen = multiprocessing.get_context("spawn")
    return _chosen


START_WAIT = 10.0
"""How long the exit waits for a worker process still starting, so it can be killed too."""


@atexit.register
def _kill_live() -> None:
    """Kill worker processes still running, before multiprocessing waits for its children.

    A process whose start is still in progress (the deadline fell while the forkserver
    forked it) is not known yet: its call is marked killed, and the exit waits for the start
    to end, after which the starting thread kills it. Without the wait the command would
    exit and leave the tool running, holding its output open.
    """
    calls = list(_live)
    for call in calls:
        call.kill()
    for call in calls:
        call.settle(START_WAIT)


def child_main(conn: Connection, request: str) -> None:
    """The worker process: import the tool, call it, send back its outcome as JSON, exit."""
    try:
        text = json.dumps({"value": _child_call(json.loads(request))})
    except PydanticSerializationError as exc:
        text = json.dumps({"error": f"returned a value that is not JSON-serializable: {exc}"})
    except Retry as exc:
        text = json.dumps({"retry": str(exc), "after": exc.after})
    except BaseException as exc:  # whatever the tool raises is its own failure
        text = json.dumps({"error": describe(exc)})
    conn.send_bytes(text.encode("utf-8"))
    conn.close()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)  # threads the tool left behind must not keep the process alive


def _child_call(request: dict[str, Any]) -> Any:
    os.environ.clear()
    os.environ.update(request["environ"])
    fn = _import_tool(request["module"], request["file"], request["qualname"])
    spec = ToolSpec.from_function(fn, name=request["name"])
    kwargs = dict(request["kwargs"])
    key = kwargs.pop(IDEMPOTENCY_PARAM, None)
    kwargs = spec.check_args(kwargs)
    if spec.takes_idempotency_key:
        kwargs[IDEMPOTENCY_PARAM] = key
    result = asyncio.run(fn(**kwargs)) if spec.is_async else fn(**kwargs)
    return to_jsonable_python(result)


def _import_tool(module_name: str, file: str | None, qualname: str) -> Any:
    if module_name.startswith(TOOLSET_MODULE_PREFIX) and file is not None:
        found: Any = import_file(Path(file))
    else:
        found = importlib.import_module(module_name)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found
