"""Durable runs: the store interface and its SQL implementation.

:class:`Store` is what the engine writes checkpoints to and what ``resume`` reads from;
:class:`SqlStore` implements it on a SQLite file (the default) or PostgreSQL.

    >>> from taskdecomp.store import open_store
    >>> store = open_store("sqlite:///runs.db")  # or "postgresql://user@host/db"
"""

from taskdecomp.store.base import (
    DEFAULT_LEASE_SECONDS,
    RESUMABLE_STOPS,
    AttemptRecord,
    AttemptStart,
    AttemptState,
    Checkpoint,
    EventRecord,
    Lease,
    NewRun,
    RunState,
    RunSummary,
    Store,
    StoredRun,
)
from taskdecomp.store.codec import MAX_STORED_CHARS
from taskdecomp.store.connect import normalize_url
from taskdecomp.store.sql import SqlStore, open_store

__all__ = [
    "AttemptRecord",
    "AttemptStart",
    "AttemptState",
    "Checkpoint",
    "DEFAULT_LEASE_SECONDS",
    "EventRecord",
    "Lease",
    "MAX_STORED_CHARS",
    "NewRun",
    "RESUMABLE_STOPS",
    "RunState",
    "RunSummary",
    "SqlStore",
    "Store",
    "StoredRun",
    "normalize_url",
    "open_store",
]
