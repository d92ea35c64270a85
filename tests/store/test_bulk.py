"""Many rows at once: COPY on PostgreSQL, executemany on SQLite, the same results."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from taskdecomp.errors import StoreError
from taskdecomp.run import RunId
from taskdecomp.store import SqlStore, schema
from taskdecomp.store.base import NewRun
from taskdecomp.store.bulk import insert_rows


@pytest.fixture
def run_row(store: SqlStore) -> None:
    store.create_run(NewRun(run_id=RunId("r"), goal="g", model=None, tools=None, config={}))


def event(n: int, data: str = "{}") -> dict[str, object]:
    return {"run_id": "r", "kind": f"e{n}", "at": float(n), "data": data}


@pytest.mark.usefixtures("run_row")
def test_rows_keep_their_order_and_their_values(store: SqlStore) -> None:
    awkward = '{"text":"tab\\\\t, quote \\\\", backslash \\\\\\\\, \\\\u00e9"}'
    with store.write() as conn:
        insert_rows(
            conn, schema.events, [event(n, awkward if n == 7 else "{}") for n in range(300)]
        )
    with store.read() as conn:
        rows = conn.execute(
            select(schema.events.c.kind, schema.events.c.at, schema.events.c.data).order_by(
                schema.events.c.id
            )
        ).all()
    assert [row.kind for row in rows] == [f"e{n}" for n in range(300)]  # ids in row order
    assert rows[7].data == awkward and rows[299].at == 299.0


@pytest.mark.usefixtures("run_row")
def test_a_refused_row_is_refused_as_an_insert_is_and_the_transaction_keeps_nothing(
    store: SqlStore,
) -> None:
    step = {"run_id": "r", "step_id": "s1", "step_no": 1, "observation": "1", "finished_at": 1.0}
    with pytest.raises(StoreError, match="refused a write"), store.write() as conn:
        insert_rows(conn, schema.events, [event(1)])
        insert_rows(conn, schema.steps, [step, step])  # the same step twice
    with pytest.raises(StoreError, match="refused a write"), store.write() as conn:
        insert_rows(conn, schema.events, [{**event(2), "run_id": "no such run"}])  # foreign key
    with store.read() as conn:
        assert conn.execute(select(schema.events.c.id)).all() == []
        assert conn.execute(select(schema.steps.c.step_id)).all() == []
