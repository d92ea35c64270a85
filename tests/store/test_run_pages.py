"""The run list a page at a time: keyset order, filters and leases in SQL, on both backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import text

from taskdecomp.run import RunId
from taskdecomp.store import NewRun, SqlStore, bulk, open_store, rows, schema
from taskdecomp.store.listing import RunKey
from tests.store.conftest import Clock


def seed(store: SqlStore, specs: list[dict[str, Any]]) -> None:
    """Store runs at once: each spec names its id and start, and may set other columns."""
    batch = []
    for spec in specs:
        new = NewRun(
            run_id=RunId(spec["id"]), goal=f"goal {spec['id']}", model=None, tools=None, config={}
        )
        row = rows.new_run(new, now=spec.pop("at"))
        row.update({k: v for k, v in spec.items() if k != "id"})
        batch.append(row)
    with store.write() as conn:
        bulk.insert_rows(conn, schema.runs, batch)


def every_page(store: SqlStore, limit: int, **filters: Any) -> list[list[str]]:
    pages, after = [], None
    while True:
        page = store.page_runs(limit=limit, after=after, **filters)
        pages.append([run.summary.run_id for run in page.runs])
        if page.next is None:
            return pages
        after = page.next


def test_pages_follow_start_then_id_newest_first_ties_included(timed: SqlStore) -> None:
    seed(timed, [{"id": f"r{n:03d}", "at": 1000.0 + n // 4} for n in range(103)])
    pages = every_page(timed, 10)
    assert [len(page) for page in pages] == [10] * 10 + [3]
    assert [run for page in pages for run in page] == [f"r{n:03d}" for n in reversed(range(103))]
    exact = every_page(timed, 103)  # a last page that is exactly full says so: no empty page
    assert len(exact) == 1 and len(exact[0]) == 103


def test_a_page_starts_after_its_key_and_new_runs_do_not_shift_it(timed: SqlStore) -> None:
    seed(timed, [{"id": f"r{n}", "at": 1000.0 + n} for n in range(6)])
    first = timed.page_runs(limit=2)
    assert first.next == RunKey(started_at=1004.0, id="r4")
    seed(timed, [{"id": "late", "at": 2000.0}])
    second = timed.page_runs(limit=2, after=first.next)
    assert [run.summary.run_id for run in second.runs] == ["r3", "r2"]


def test_status_and_lease_filters_run_on_the_store_clock(timed: SqlStore, clock: Clock) -> None:
    seed(
        timed,
        [
            {"id": "ok", "at": 1.0, "status": "ok"},
            {"id": "paused", "at": 2.0, "status": "paused"},
            {"id": "queued", "at": 3.0, "status": "queued"},
            {"id": "live", "at": 4.0, "lease_owner": "w", "lease_expires_at": 1010.0},
            {"id": "expires", "at": 5.0, "lease_owner": "w", "lease_expires_at": 1001.0},
            {"id": "released", "at": 6.0, "lease_owner": "w", "lease_expires_at": None},
            {"id": "mine", "at": 7.0, "lease_owner": "w", "lease_expires_at": 999.0},
        ],
    )

    def ids(**filters: Any) -> list[str]:
        return [run for page in every_page(timed, 2, **filters) for run in page]

    assert ids(status="paused") == ["paused"]
    assert ids(status="queued") == ["queued"]
    assert ids(status="running") == ["mine", "released", "expires", "live"]
    assert ids(status="running", leased=True) == ["expires", "live"]
    assert ids(status="running", leased=False) == ["mine", "released"]
    held = {"held": [RunId("mine")]}
    assert ids(status="running", leased=True, **held) == ["mine", "expires", "live"]
    assert ids(status="running", leased=False, **held) == ["released"]
    clock.at = 1001.0  # the lease ends at 1001: expired from then on
    assert ids(status="running", leased=True) == ["live"]
    leased = {
        run.summary.run_id: run.leased
        for run in timed.page_runs(limit=10, held=[RunId("mine")]).runs
    }
    assert leased == {
        "mine": True, "released": False, "expires": False, "live": True,
        "queued": False, "paused": False, "ok": False,
    }  # fmt: skip


def test_the_list_indexes_serve_its_queries(tmp_path: Path) -> None:
    """On SQLite, whose plan is stable (PostgreSQL's planner picks by statistics)."""
    timed = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    seed(timed, [{"id": f"r{n}", "at": float(n)} for n in range(50)])
    with timed.read() as conn:
        plans = [
            " ".join(str(row[3]) for row in conn.execute(text(f"EXPLAIN QUERY PLAN {query}")))
            for query in (
                "SELECT id FROM runs WHERE (started_at, id) < (10.0, 'r10') "
                "ORDER BY started_at DESC, id DESC LIMIT 3",
                "SELECT id FROM runs WHERE status = 'ok' AND (started_at, id) < (10.0, 'r10') "
                "ORDER BY started_at DESC, id DESC LIMIT 3",
            )
        ]
    assert "ix_runs_started_id" in plans[0] and "TEMP B-TREE" not in plans[0]
    assert "ix_runs_status_started_id" in plans[1] and "TEMP B-TREE" not in plans[1]
    timed.close()


def test_an_older_store_gains_the_list_indexes_once(store_url: str) -> None:
    from sqlalchemy import inspect

    from taskdecomp.store import open_store

    first = open_store(store_url)
    with first.write() as conn:  # as a version 5 store left it
        conn.execute(text("DROP INDEX ix_runs_started_id"))
        conn.execute(text("DROP INDEX ix_runs_status_started_id"))
        conn.execute(text("CREATE INDEX ix_runs_started_at ON runs (started_at)"))
        conn.execute(schema.migrations.delete().where(schema.migrations.c.version == 6))
    first.close()
    again = open_store(store_url)
    with again.read() as conn:
        names = {index["name"] for index in inspect(conn).get_indexes("runs")}
    again.close()
    assert {"ix_runs_started_id", "ix_runs_status_started_id"} <= names
    assert "ix_runs_started_at" not in names
