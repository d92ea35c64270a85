"""A worker's take of a queued run: lease, recovery count, reopening and reading in one go."""

from __future__ import annotations

import asyncio

import pytest

from taskdecomp.engine import continue_run
from taskdecomp.errors import ConfigError, LeaseLostError, RunLeasedError
from taskdecomp.run import RunId, RunResult
from taskdecomp.store import SqlStore
from taskdecomp.store.base import NewRun
from tests.store.conftest import Clock

RUN = RunId("queued-1")
TTL = 30.0


@pytest.fixture
def queued(timed: SqlStore) -> SqlStore:
    run = NewRun(run_id=RUN, goal="the goal", model="m", tools="t", config={"k": 1})
    timed.submit_run(run, queue="q")
    return timed


def test_a_take_that_reopens_marks_the_run_running_and_reads_it_under_the_lease(
    queued: SqlStore,
) -> None:
    taken = queued.admit_run(RUN, owner="w1", ttl=TTL, max_recoveries=3, reopen=True)
    assert (taken.start, taken.recoveries) == ("first", 0)
    assert taken.lease is not None and (taken.lease.owner, taken.lease.epoch) == ("w1", 1)
    assert taken.run is not None
    stored = queued.load_run(RUN)
    assert (stored.summary.status, stored.segments) == ("running", 1)
    assert taken.run.to_dict() == stored.to_dict()  # read after the take, in its transaction
    assert stored.lease is not None and stored.lease.owner == "w1"


def test_a_take_that_does_not_reopen_leaves_the_run_queued(queued: SqlStore) -> None:
    taken = queued.admit_run(RUN, owner="w1", ttl=TTL, max_recoveries=3)
    assert taken.run is None and taken.lease is not None
    stored = queued.load_run(RUN)
    assert (stored.summary.status, stored.segments) == ("queued", 0)


def test_a_live_lease_is_refused_and_an_expired_one_is_a_recovery_that_fences_out_the_old_owner(
    queued: SqlStore, clock: Clock
) -> None:
    first = queued.admit_run(RUN, owner="w1", ttl=TTL, max_recoveries=3, reopen=True)
    assert first.lease is not None
    with pytest.raises(RunLeasedError):
        queued.admit_run(RUN, owner="w2", ttl=TTL, max_recoveries=3, reopen=True)
    clock.at += TTL + 1  # w1 stopped renewing
    second = queued.admit_run(RUN, owner="w2", ttl=TTL, max_recoveries=3, reopen=True)
    assert (second.start, second.recoveries) == ("recovery", 1)
    assert second.lease is not None and second.lease.epoch == first.lease.epoch + 1
    assert second.run is not None and second.run.segments == 2
    with pytest.raises(LeaseLostError):
        queued.renew_lease(first.lease)  # the old owner's next write finds the run taken


def test_past_its_recoveries_a_run_is_poisoned(queued: SqlStore, clock: Clock) -> None:
    for owner in ("w1", "w2"):
        queued.admit_run(RUN, owner=owner, ttl=TTL, max_recoveries=1, reopen=True)
        clock.at += TTL + 1
    assert queued.admit_run(RUN, owner="w3", ttl=TTL, max_recoveries=1).start == "poisoned"


def test_an_ended_run_is_not_taken(queued: SqlStore) -> None:
    taken = queued.admit_run(RUN, owner="w1", ttl=TTL, max_recoveries=3, reopen=True)
    result = RunResult(run_id=RUN, status="ok", stop_reason="success", answer="a")
    queued.finish_run(RUN, result, events=[], lease=taken.lease)
    again = queued.admit_run(RUN, owner="w2", ttl=TTL, max_recoveries=3, reopen=True)
    assert (again.start, again.lease, again.run) == ("ended", None, None)
    assert queued.load_run(RUN).summary.status == "ok"


def test_a_run_read_under_a_lease_is_refused_without_that_lease(queued: SqlStore) -> None:
    taken = queued.admit_run(RUN, owner="w1", ttl=TTL, max_recoveries=3, reopen=True)
    assert taken.run is not None
    with pytest.raises(ConfigError, match="give that lease= too"):
        asyncio.run(continue_run(RUN, store=queued, prepare=lambda stored: stored, taken=taken.run))
    assert queued.load_run(RUN).segments == 1  # not reopened again, not taken over
