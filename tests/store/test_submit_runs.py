"""Many runs queued in one transaction: each as :meth:`SqlStore.submit_run` stores it alone."""

from __future__ import annotations

import pytest

from taskdecomp.errors import StoreError
from taskdecomp.run import RunId
from taskdecomp.store import SqlStore
from taskdecomp.store.base import NewRun
from taskdecomp.store.bulk import COPY_FROM_ROWS


def new(n: int) -> NewRun:
    return NewRun(
        run_id=RunId(f"run-{n:03d}"), goal=f"goal {n}", model="m", tools="t", config={"n": n}
    )


@pytest.mark.parametrize("count", [2, COPY_FROM_ROWS + 12])
def test_each_run_is_stored_queued_in_its_queue_at_its_time(store: SqlStore, count: int) -> None:
    runs = [(new(n), 1000.0 + n * 1e-6) for n in range(count)]
    store.submit_runs(runs, queue="q")
    alone = NewRun(run_id=RunId("alone"), goal="g", model="m", tools="t", config={})
    store.submit_run(alone, queue="q", now=999.0)
    for run, at in runs:
        stored = store.load_run(run.run_id)
        assert (stored.summary.status, stored.segments, stored.summary.goal) == (
            "queued",
            0,
            run.goal,
        )
        assert stored.config == run.config and stored.lease is None
        assert store.queue_of(run.run_id) == "q"
        assert store.queue_times(run.run_id) == (at, None)
    stale = [found.run_id for found in store.stale_runs("q", grace=0.0)]
    assert stale == ["alone", *(run.run_id for run, _at in runs)]  # in the order queued


def test_a_taken_id_stores_none_of_the_runs(store: SqlStore) -> None:
    store.submit_run(new(3), queue="q", now=1.0)
    with pytest.raises(StoreError):
        store.submit_runs([(new(n), 2.0 + n) for n in range(COPY_FROM_ROWS + 2)], queue="q")
    assert [found.run_id for found in store.stale_runs("q", grace=0.0)] == ["run-003"]
    assert store.load_run(RunId("run-003")).summary.started_at == 1.0
