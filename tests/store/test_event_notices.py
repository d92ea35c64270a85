"""A commit that stores events says so: to watchers in the process, and on PostgreSQL by NOTIFY.

Event streams read a run again only when told it has new events, so a commit must tell them
once it is visible, a rollback never, and (SQLite, written by another process) the newest
event row must name the runs written since a mark.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest

from taskdecomp.errors import StoreError
from taskdecomp.run import RunId
from taskdecomp.store import EventRecord, NewRun, SqlStore, open_store
from taskdecomp.store.sql import EVENTS_CHANNEL
from tests.store.conftest import pg_base_url


def create(store: SqlStore, run_id: str) -> None:
    store.create_run(NewRun(run_id=RunId(run_id), goal="g", model=None, tools=None, config={}))


def events(count: int) -> list[EventRecord]:
    return [EventRecord(kind="Step", at=float(n), data={"n": n}) for n in range(count)]


def test_watchers_hear_of_committed_events_once_per_commit_and_never_of_a_rollback(
    store: SqlStore,
) -> None:
    create(store, "a")
    create(store, "b")
    heard: list[frozenset[str]] = []
    stop = store.watch(heard.append)
    store.reopen_run(RunId("a"), segment=2, events=events(3))
    with store.batch():
        store.reopen_run(RunId("a"), segment=3, events=events(1))
        store.reopen_run(RunId("b"), segment=2, events=events(1))
    with pytest.raises(StoreError), store.batch():  # a second reopen of segment 3 fails
        store.reopen_run(RunId("b"), segment=3, events=events(1))
        store.reopen_run(RunId("b"), segment=3, events=events(1))
    create(store, "c")  # a commit without events
    stop()
    store.reopen_run(RunId("c"), segment=2, events=events(1))
    assert heard == [frozenset({"a"}), frozenset({"a", "b"})]
    assert store.count_events(RunId("a")) == ("running", 4)
    assert store.count_events(RunId("c")) == ("running", 1)


def test_postgresql_notifies_the_runs_whose_events_a_commit_stored(pg_url: str) -> None:
    run_id = f"notice-{uuid.uuid4().hex}"  # the channel is shared by the whole database
    store = open_store(pg_url)
    try:
        create(store, run_id)
        with psycopg.connect(pg_base_url(), autocommit=True) as listener:
            listener.execute(f"LISTEN {EVENTS_CHANNEL}")
            with pytest.raises(StoreError), store.batch():
                store.reopen_run(RunId(run_id), segment=2, events=events(1))
                raise StoreError("rolled back")
            store.reopen_run(RunId(run_id), segment=2, events=events(20))
            notes = list(listener.notifies(timeout=10, stop_after=1))
            later = list(listener.notifies(timeout=1))
    finally:
        store.close()
    mine = [(n.channel, n.payload) for n in [*notes, *later] if n.payload == run_id]
    assert mine == [(EVENTS_CHANNEL, run_id)]  # once for the commit, not per event


def test_the_newest_event_row_names_the_runs_written_since_a_mark(store: SqlStore) -> None:
    create(store, "a")
    create(store, "b")
    mark, runs = store.runs_with_events_after(0)
    assert (mark, runs) == (0, frozenset())
    store.reopen_run(RunId("a"), segment=2, events=events(2))
    mark, runs = store.runs_with_events_after(mark)
    assert runs == {"a"}
    store.reopen_run(RunId("b"), segment=2, events=events(1))
    later, runs = store.runs_with_events_after(mark)
    assert runs == {"b"} and later > mark
    assert store.runs_with_events_after(later) == (later, frozenset())
