"""Per-run event sequence numbers, on both backends: the numbering event streams replay by."""

from __future__ import annotations

import pytest

from taskdecomp import stops
from taskdecomp.errors import RunNotFoundError
from taskdecomp.run import RunId, RunResult
from taskdecomp.store import EventRecord, NewRun, SqlStore


def events(*kinds: str) -> list[EventRecord]:
    return [EventRecord(kind=kind, at=float(n), data={"n": n}) for n, kind in enumerate(kinds)]


def create(store: SqlStore, run_id: str) -> None:
    store.create_run(
        NewRun(run_id=RunId(run_id), goal="g", model=None, tools=None, config={"budget": {}})
    )


def test_events_are_numbered_per_run_in_write_order(store: SqlStore) -> None:
    create(store, "a")
    create(store, "b")
    store.reopen_run(RunId("a"), segment=2, events=events("RunStarted", "ModelCalled"))
    store.reopen_run(RunId("b"), segment=2, events=events("RunStarted"))
    result = RunResult(run_id=RunId("a"), status="ok", stop_reason=stops.SUCCESS)
    store.finish_run(RunId("a"), result, events=events("StepFinished", "RunStopped"))
    page = store.load_event_page(RunId("a"))
    assert page.status == "ok"
    assert [(e.seq, e.event.kind) for e in page.events] == [
        (1, "RunStarted"), (2, "ModelCalled"), (3, "StepFinished"), (4, "RunStopped"),
    ]  # fmt: skip
    other = store.load_event_page(RunId("b"))
    assert other.status == "running" and [e.seq for e in other.events] == [1]
    assert [e.seq for e in store.load_event_page(RunId("a"), after=2).events] == [3, 4]
    assert [e.seq for e in store.load_event_page(RunId("a"), after=1, limit=2).events] == [2, 3]
    assert store.load_event_page(RunId("a"), after=4).events == ()
    assert store.load_event_page(RunId("a"), limit=0).events == ()
    assert [e.event.kind for e in page.events] == [e.kind for e in store.load_events(RunId("a"))]


def test_an_unknown_run_has_no_page(store: SqlStore) -> None:
    with pytest.raises(RunNotFoundError, match="no run 'nope'"):
        store.load_event_page(RunId("nope"))
