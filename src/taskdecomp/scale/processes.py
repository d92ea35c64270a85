"""``taskdecomp worker --processes N``: N worker processes started and stopped as one.

Python runs one thread of Python at a time per process, so one worker process uses about
one core however many runs it holds. A machine with more cores runs more worker
processes; each is a whole worker (its own DBOS executor, its own slots, its own
listener), and they share the queue as workers on different machines do.

The parent checks the command line and loads the toolsets that start no server, so a bad
``--tools`` is one error in the parent (which, when ``--processes`` is not given, also asks
the server how many connections it has free: :func:`default_count`), then forks its
children before anything is opened (no database connection, no thread): each child sets
itself up alone. The parent only waits: SIGTERM or Ctrl-C is passed on to every child (the
forwarding is in place before the first child starts), which then stops as a single worker
does; a child that dies (``kill -9``) leaves the others running, and its runs move on as
any dead worker's do.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
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


CONNECTIONS_PER_PROCESS = 20
"""The most PostgreSQL connections one worker process holds (DBOS's pools, the run store's,
the listener)."""


def default_count(url: str) -> tuple[int, str]:
    """How many worker processes to start when ``--processes`` is not given, and why.

    One per core this process may use, but no more than the PostgreSQL server at ``url``
    has free connections for: a big host's cores would otherwise take more connections
    than ``max_connections`` allows, and workers would fail to start one by one. When the
    server cannot be asked, one (which then says what is wrong, once).

    Raises:
        ConfigError: ``url`` is not a PostgreSQL URL.
    """
    cores = usable_cores()
    free = _free_connections(url)
    if free is None:  # one process, which says what is wrong once
        return 1, "PostgreSQL could not be asked how many connections it has free"
    if free >= cores * CONNECTIONS_PER_PROCESS:
        return cores, "one per core"
    fits = max(1, free // CONNECTIONS_PER_PROCESS)
    return fits, f"one per core would be {cores}; PostgreSQL has connections free for {fits}"


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, capped by a cgroup CPU quota.

    A container reports every core of its host; its ``--cpus`` limit is the quota.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cores = os.cpu_count() or 1
    quota = _cpu_quota()
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)


def _cpu_quota() -> float | None:
    """The cgroup's CPU quota in cores (v2 ``cpu.max``, else v1), ``None`` when unlimited."""
    v2 = Path("/sys/fs/cgroup/cpu.max")
    v1 = Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
    try:
        if v2.is_file():
            quota, period = v2.read_text().split()[:2]
        else:
            quota, period = v1[0].read_text().strip(), v1[1].read_text().strip()
    except (OSError, ValueError):
        return None
    if quota in ("max", "-1") or not quota.isdigit() or not period.isdigit() or int(period) == 0:
        return None
    return int(quota) / int(period)


def _free_connections(url: str) -> int | None:
    """Connections the server at ``url`` has free for other clients; ``None`` if unknown."""
    from taskdecomp.scale.engine import system_url

    dsn = system_url(url)  # not PostgreSQL: one error here, not one per process
    try:
        import psycopg

        with psycopg.connect(dsn, connect_timeout=5) as conn:
            row = conn.execute(
                "SELECT current_setting('max_connections')::int"
                " - current_setting('superuser_reserved_connections')::int"
                " - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"
            ).fetchone()
    except Exception:  # no server, no rights: the worker will say what is wrong
        logger.debug("could not count PostgreSQL's free connections", exc_info=True)
        return None
    return None if row is None else int(row[0])
