"""``taskdecomp worker --processes N``: N worker processes started and stopped as one.

Python runs one thread of Python at a time per process, so one worker process uses about
one core however many runs it holds. A machine with more cores runs more worker
processes; each is a whole worker (its own DBOS executor, its own slots, its own
listener), and they share the queue as workers on different machines do.

The parent checks the command line and loads the toolsets that start no server, so a bad
``--tools`` is one error in the parent, then forks its children before anything is opened
(no database connection, no thread): each child sets itself up alone. The parent only
waits: SIGTERM or Ctrl-C is passed on to every child (the forwarding is in place before
the first child starts), which then stops as a single worker does; a child that dies
(``kill -9``) leaves the others running, and its runs move on as any dead worker's do.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType

from taskdecomp.errors import ConfigError, TaskdecompError

logger = logging.getLogger(__name__)


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

    def forward(signum: int, frame: FrameType | None) -> None:
        for child in children:
            if child.pid is not None and child.is_alive():
                os.kill(child.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)  # before any child starts: none is left behind
    signal.signal(signal.SIGINT, forward)
    for child in children:
        child.start()
    codes = []
    for child in children:
        child.join()
        codes.append(child.exitcode or 0)
        if child.exitcode:
            logger.warning("worker process %s ended with %s", child.pid, child.exitcode)
    return next((code for code in codes if code), 0)


def _child(serve: Callable[[int], int], index: int) -> None:
    # the parent's forwarding is not this process's: it sets its own as its worker starts
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code = serve(index)
    except TaskdecompError as exc:  # one line, as the command says it, not a traceback
        print(f"taskdecomp: error: {' '.join(str(exc).split())}", file=sys.stderr)
        code = 2 if isinstance(exc, ConfigError) else 1
    raise SystemExit(code)
