"""Store reads off the event loop.

A read of the store (a run with its whole history, a page of the run list, a plan tree)
takes as long as the database does; on the event loop it would hold up every other
request, ``/health`` and the event streams with it. Routes hand their reads to
:class:`Reads`, which runs them on worker threads, at most :data:`READ_THREADS` at once: many
slow reads wait for a thread, never for the loop.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import anyio
import anyio.to_thread

P = ParamSpec("P")
T = TypeVar("T")

READ_THREADS = 4
"""Reads of one service that run at once; more wait for one of them to end."""


class Reads:
    """Runs blocking store reads on worker threads, a bounded number at a time.

    Args:
        threads: the most reads that run at once.
    """

    def __init__(self, threads: int = READ_THREADS) -> None:
        self.threads = threads
        self._limiter: anyio.CapacityLimiter | None = None

    async def __call__(self, read: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``read(*args, **kwargs)`` on a worker thread; its result or its exception."""
        if self._limiter is None:  # made on the loop that uses it
            self._limiter = anyio.CapacityLimiter(self.threads)
        call = functools.partial(read, *args, **kwargs)
        return await anyio.to_thread.run_sync(call, limiter=self._limiter)
