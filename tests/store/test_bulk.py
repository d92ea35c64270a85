"""Many rows at once: COPY on PostgreSQL, executemany on SQLite, the same results."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import select

from taskdecomp.errors import StoreError
from taskdecomp.run import RunId
from taskdecomp.store import SqlStore, open_store, schema
from taskdecomp.store.base import NewRun
from taskdecomp.store.bulk import COPY_FROM_ROWS, insert_rows
from tests.store.conftest import pg_base_url


@pytest.fixture
def run_row(store: SqlStore) -> None:
    store.create_run(NewRun(run_id=RunId("r"), goal="g", model=None, tools=None, config={}))


def event(n: int, data: str = "{}") -> dict[str, object]:
    return {"run_id": "r", "kind": f"e{n}", "at": float(n), "data": data}


@pytest.mark.usefixtures("run_row")
@pytest.mark.parametrize("count", [COPY_FROM_ROWS - 1, COPY_FROM_ROWS, 300])
def test_rows_keep_their_order_and_their_values(store: SqlStore, count: int) -> None:
    awkward = '{"text":"tab\\\\t, quote \\\\", backslash \\\\\\\\, \\\\u00e9"}'
    with store.write() as conn:
        rows = [event(n, awkward if n == count - 1 else "{}") for n in range(count)]
        insert_rows(conn, schema.events, rows)
    with store.read() as conn:
        rows = conn.execute(
            select(schema.events.c.kind, schema.events.c.at, schema.events.c.data).order_by(
                schema.events.c.id
            )
        ).all()
    assert [row.kind for row in rows] == [f"e{n}" for n in range(count)]  # ids in row order
    assert rows[-1].data == awkward and rows[-1].at == count - 1
    assert all(row.data == "{}" for row in rows[:-1])


@pytest.mark.usefixtures("run_row")
def test_a_refused_row_is_refused_as_an_insert_is_and_the_transaction_keeps_nothing(
    store: SqlStore,
) -> None:
    many = COPY_FROM_ROWS  # on PostgreSQL, by COPY
    steps = [
        {"run_id": "r", "step_id": f"s{n}", "step_no": n, "observation": "1", "finished_at": 1.0}
        for n in range(many)
    ]
    with pytest.raises(StoreError, match="refused a write"), store.write() as conn:
        insert_rows(conn, schema.events, [event(n) for n in range(many)])
        insert_rows(conn, schema.steps, [*steps, steps[-1]])  # a step twice
    orphans = [{**event(n), "run_id": "no such run"} for n in range(many)]
    with pytest.raises(StoreError, match="refused a write"), store.write() as conn:
        insert_rows(conn, schema.events, orphans)  # the foreign key
    with store.read() as conn:
        assert conn.execute(select(schema.events.c.id)).all() == []
        assert conn.execute(select(schema.steps.c.step_id)).all() == []


def test_a_connection_lost_during_copy_is_the_servers_error_and_the_next_write_reconnects(
    pg_url: str,
) -> None:
    store = open_store(pg_url)
    try:
        store.create_run(NewRun(run_id=RunId("r"), goal="g", model=None, tools=None, config={}))
        with pytest.raises(StoreError, match="administrator command"), store.write() as conn:
            backend = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
            with psycopg.connect(pg_base_url(), autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
            insert_rows(conn, schema.events, [event(n) for n in range(COPY_FROM_ROWS + 1)])
        with store.write() as conn:  # a new connection
            insert_rows(conn, schema.events, [event(n) for n in range(COPY_FROM_ROWS + 1)])
        with store.read() as conn:
            assert len(conn.execute(select(schema.events.c.id)).all()) == COPY_FROM_ROWS + 1
    finally:
        store.close()
