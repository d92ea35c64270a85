"""Hearing of events another process stores: PostgreSQL's NOTIFY, or a poll of SQLite.

Both call ``wake`` with the ids of runs that have new events, and ``wake_all`` when they may
have missed some (a reconnect), so the readers of those runs read the store again. Neither
reads events itself.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from taskdecomp.errors import StoreError
from taskdecomp.store import SqlStore
from taskdecomp.store.sql import EVENTS_CHANNEL

logger = logging.getLogger(__name__)

Wake = Callable[[Iterable[str]], None]
Read = Callable[..., Awaitable[Any]]
"""Runs a blocking store call off the event loop: ``await read(function, *args)``."""

RECONNECT_SECONDS = 1.0
"""How long the listener waits before it connects again after losing its connection."""


async def listen_postgres(store: SqlStore, wake: Wake, wake_all: Callable[[], None]) -> None:
    """Wake the runs PostgreSQL notifies on :data:`EVENTS_CHANNEL`, until cancelled.

    One connection for the whole server, in autocommit mode, held while the server runs;
    when it breaks (a database restart) the listener connects again and wakes every run,
    since notifications sent meanwhile are lost.
    """
    import psycopg

    url = store.url.set(drivername="postgresql").render_as_string(hide_password=False)
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(
                url, autocommit=True, connect_timeout=10
            ) as conn:
                await conn.execute(f"LISTEN {EVENTS_CHANNEL}")
                wake_all()  # whatever was committed while nobody listened
                async for note in conn.notifies():
                    wake((note.payload,))
        except psycopg.Error as exc:
            logger.warning(
                "listening for stored events on %s failed (%s); retrying in %g s",
                store.name,
                " ".join(str(exc).split()),
                RECONNECT_SECONDS,
            )
        await asyncio.sleep(RECONNECT_SECONDS)


async def poll_sqlite(
    store: SqlStore,
    read: Read,
    wake: Wake,
    wake_all: Callable[[], None],
    *,
    every: float,
    wanted: Callable[[], bool],
) -> None:
    """Every ``every`` seconds, wake the runs with events stored since the last look.

    One cheap query for the whole server (the newest event row id, and the runs above the
    one seen last), made only while ``wanted()`` says some stream follows a run.
    """
    mark: int | None = None
    while True:
        if mark is None or wanted():
            try:
                newest, runs = await read(
                    store.runs_with_events_after, sys.maxsize if mark is None else mark
                )
            except StoreError as exc:
                logger.warning("polling %s for new events failed: %s", store.name, exc)
            else:
                if mark is not None and newest < mark:
                    wake_all()  # rows were deleted and their ids given out again
                elif runs:
                    wake(runs)
                mark = newest
        await asyncio.sleep(every)
