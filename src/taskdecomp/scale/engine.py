"""DBOS Transact as the queue: configuration, the workflow a run is delivered by, enqueueing.

A run is one DBOS workflow with one step that executes it with the engine's own scheduler;
the runs table and its journal stay the record of truth, DBOS only delivers run ids to
workers (PostgreSQL's ``FOR UPDATE SKIP LOCKED`` under its queues). Arguments and results
are serialized as JSON (``DBOSPortableJSONSerializer``), never pickled. Every process pins
the same application version, so any worker takes any queued run.
"""

from __future__ import annotations

import atexit
import os
import socket
import threading
from typing import Any

from sqlalchemy.engine import make_url

from taskdecomp.errors import ConfigError

APP_NAME = "taskdecomp"
APP_VERSION = "taskdecomp-runs-1"
"""Every worker and submitter uses it: DBOS hands a queued workflow only to workers of the
version it was enqueued with."""
WORKFLOW = "taskdecomp.run"
"""The workflow a run is delivered by; its one argument is the run id."""
DEFAULT_QUEUE = "default"


def dbos() -> Any:
    """The ``dbos`` module.

    Raises:
        ConfigError: it is not installed (the ``scale`` extra).
    """
    try:
        import dbos as module
    except ImportError as exc:  # pragma: no cover - the extra is part of the dev install
        raise ConfigError("queued runs need DBOS: pip install 'taskdecomp[scale]'") from exc
    return module


def system_url(db: str) -> str:
    """``db`` as DBOS takes it: PostgreSQL only, without a SQLAlchemy driver name.

    Raises:
        ConfigError: ``db`` is not a PostgreSQL URL.
    """
    try:
        url = make_url(db)
    except Exception as exc:
        raise ConfigError(f"not a database URL: {db!r}") from exc
    if url.get_backend_name() != "postgresql":
        raise ConfigError(
            f"queued runs need PostgreSQL (workers on several machines share it), got {db!r}"
        )
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def config(
    db: str, *, executor_id: str | None = None, log_level: str = "WARNING"
) -> dict[str, Any]:
    """A ``DBOSConfig`` for a worker (``log_level``: ``TASKDECOMP_DBOS_LOG_LEVEL``)."""
    return {
        "name": APP_NAME,
        "system_database_url": system_url(db),
        "executor_id": executor_id or f"{socket.gethostname()}-{os.getpid()}",
        "application_version": APP_VERSION,
        "serializer": dbos().DBOSPortableJSONSerializer(),
        "log_level": log_level,
    }


CLIENT_POOL_SIZE = 2
"""Connections a ``DBOSClient`` keeps: it only enqueues, one run at a time."""


def client(db: str) -> Any:
    """A ``DBOSClient`` to enqueue and cancel from any process."""
    module = dbos()
    return module.DBOSClient(
        system_database_url=system_url(db),
        serializer=module.DBOSPortableJSONSerializer(),
        application_name=APP_NAME,
        system_database_pool_size=CLIENT_POOL_SIZE,
    )


_shared: dict[str, Any] = {}
_shared_lock = threading.Lock()


def shared_client(db: str) -> Any:
    """This process's ``DBOSClient`` on ``db``, opened at its first use and kept.

    Opening a client costs more than a submit (its pool's first connection); a process
    that submits many runs (a script, the benchmark) keeps one per database.
    """
    system = system_url(db)
    with _shared_lock:
        found = _shared.get(system)
        if found is None:
            found = _shared[system] = client(system)
            if len(_shared) == 1:
                atexit.register(_close_shared)
        return found


def _close_shared() -> None:
    with _shared_lock:
        for opened in _shared.values():
            opened.destroy()
        _shared.clear()


def enqueue(handle: Any, run_id: str, *, queue: str, delivery: str) -> None:
    """Queue the delivery ``delivery`` of ``run_id`` (an id queued before is not queued twice)."""
    handle.enqueue(
        {
            "workflow_name": WORKFLOW,
            "queue_name": queue,
            "workflow_id": delivery,
            "app_version": APP_VERSION,
        },
        run_id,
    )
