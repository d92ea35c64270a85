"""A toolset that misbehaves, for the deadline and isolation tests.

As it starts, every slow tool writes its process id to ``$DEADLINE_MARKS/<tool>.pid`` when
``DEADLINE_MARKS`` names a directory, so a test knows the call is under way (and which
process runs it). A slow tool takes ten minutes, far past any test's patience, and writes
``<tool>.finished`` if it ever gets to its end: a run that waited for it would hit the
test's timeout, and a marker shows a call that was meant to be cut off ran to its end.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import signal
import time
from pathlib import Path
from typing import Literal

from taskdecomp import tool

SLEEP = 600.0

Kind = Literal["KeyboardInterrupt", "SystemExit0", "SystemExit3", "CancelledError", "BaseException"]


def _mark(name: str, text: str) -> None:
    marks = os.environ.get("DEADLINE_MARKS")
    if marks:
        Path(marks, name).write_text(text)


def _started(name: str) -> None:
    _mark(f"{name}.pid", str(os.getpid()))


def _finished(name: str) -> None:
    _mark(f"{name}.finished", str(os.getpid()))


def _sleep(name: str) -> None:
    """Mark the start, sleep :data:`SLEEP` seconds, mark the end."""
    _started(name)
    time.sleep(SLEEP)
    _finished(name)


def _exception(kind: Kind) -> BaseException:
    return {
        "KeyboardInterrupt": KeyboardInterrupt(),
        "SystemExit0": SystemExit(0),
        "SystemExit3": SystemExit(3),
        "CancelledError": asyncio.CancelledError("raised by the tool"),
        "BaseException": BaseException("bare"),
    }[kind]


def quick(n: int) -> int:
    """Return at once."""
    return n


def sleeps(n: int) -> int:
    """Sleep ten minutes in a worker thread."""
    _sleep("sleeps")
    return n


@tool(timeout=1)
def sleeps_past_timeout(n: int) -> int:
    """Sleep ten minutes, with a 1 s timeout."""
    _sleep("sleeps_past_timeout")
    return n


@tool(side_effects="unsafe")
def charges_slowly(n: int) -> int:
    """An unsafe call that takes ten minutes."""
    _sleep("charges_slowly")
    return n


async def ignores_cancellation(n: int) -> int:
    """Sleep ten minutes on the event loop, swallowing every cancellation."""
    _started("ignores_cancellation")
    end = time.monotonic() + SLEEP
    while (left := end - time.monotonic()) > 0:
        try:
            await asyncio.sleep(left)
        except asyncio.CancelledError:
            continue
    _finished("ignores_cancellation")
    return n


def raises(n: int, kind: Kind) -> int:
    """Raise the BaseException named ``kind`` (sync)."""
    raise _exception(kind)


async def raises_async(n: int, kind: Kind) -> int:
    """Raise the BaseException named ``kind`` (async)."""
    raise _exception(kind)


@tool(isolation="process")
def isolated_raises(n: int, kind: Kind) -> int:
    """Raise the BaseException named ``kind`` in a worker process."""
    raise _exception(kind)


@tool(isolation="process")
def isolated_sleeps(n: int) -> int:
    """Sleep ten minutes in a worker process."""
    _sleep("isolated_sleeps")
    return n


@tool(isolation="process", timeout=1)
def isolated_sleeps_past_timeout(n: int) -> int:
    """Sleep ten minutes in a worker process, with a 1 s timeout."""
    _sleep("isolated_sleeps_past_timeout")
    return n


@tool(isolation="process")
def isolated_segfaults(n: int) -> int:
    """Die of SIGSEGV."""
    os.kill(os.getpid(), signal.SIGSEGV)
    return n


@tool(isolation="process")
def isolated_exits(n: int) -> int:
    """Leave with os._exit(3)."""
    os._exit(3)


@tool(isolation="process")
def isolated_fails(n: int) -> int:
    """Raise ValueError."""
    raise ValueError(f"no {n}")


@tool(isolation="process")
def isolated_returns_an_object(n: int) -> object:
    """Return something JSON cannot carry."""
    return object()


@tool(isolation="process", side_effects="idempotent")
def isolated_echo(
    n: int, day: datetime.date, idempotency_key: str | None = None
) -> dict[str, object]:
    """Say what arrived, with which types, in which process."""
    return {
        "n": n,
        "day": day,
        "day_is_a_date": isinstance(day, datetime.date),
        "key": idempotency_key,
        "pid": os.getpid(),
    }


@tool(isolation="process")
async def isolated_async(n: int) -> int:
    """An async tool in a worker process."""
    await asyncio.sleep(0)
    return n + 1
