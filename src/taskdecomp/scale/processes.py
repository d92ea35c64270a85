"""``taskdecomp worker --processes N``: N worker processes started and stopped as one.

Python runs one thread of Python at a time per process, so one worker process uses about
one core however many runs it holds. A machine with more cores runs more worker
processes; each is a whole worker (its own DBOS executor, its own slots, its own
listener), and they share the queue as workers on different machines do.

The parent forks its children before anything is opened (no database connection, no
thread), so each child starts from the parsed command line and sets itself up alone. The
parent only waits: SIGTERM or Ctrl-C is passed on to every child, which then stops as a
single worker does; a child that dies (``kill -9``) leaves the others running, and its
runs move on as any dead worker's do.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
from collections.abc import Callable
from types import FrameType

logger = logging.getLogger(__name__)


def default_processes() -> int:
    """One worker process per core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


def supervise(count: int, serve: Callable[[int], int]) -> int:
    """Run ``serve(index)`` in ``count`` forked processes until they all end.

    Returns:
        0 when every child ended with 0, else the first other exit status.
    """
    context = multiprocessing.get_context("fork")
    children = [
        context.Process(target=_child, args=(serve, index), name=f"worker-{index}")
        for index in range(count)
    ]
    for child in children:
        child.start()

    def forward(signum: int, frame: FrameType | None) -> None:
        for child in children:
            if child.is_alive() and child.pid is not None:
                os.kill(child.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    codes = []
    for child in children:
        child.join()
        codes.append(child.exitcode or 0)
        if child.exitcode:
            logger.warning("worker process %s ended with %s", child.pid, child.exitcode)
    return next((code for code in codes if code), 0)


def _child(serve: Callable[[int], int], index: int) -> None:
    raise SystemExit(serve(index))
