"""No row of a store holds a key a run's tool or model repeated, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from taskdecomp import run_sync
from taskdecomp.redact import REDACTED
from taskdecomp.store import open_store
from taskdecomp.store.connect import normalize_url
from tests.test_redaction import ANSWER_GOAL, ERROR_GOAL, LEAKY_TOOLS, leaky_script, new_secret


def every_row(url: str) -> str:
    """Every row of every table of the store at ``url``, as text."""
    engine = sa.create_engine(normalize_url(url))
    try:
        with engine.connect() as conn:
            tables = sa.inspect(conn).get_table_names()
            return "\n".join(
                repr(row)
                for name in tables
                for row in conn.execute(sa.text(f"SELECT * FROM {name}"))
            )
    finally:
        engine.dispose()


def test_no_row_holds_the_key(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = new_secret()
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("FOO_TOKEN", "1")
    tools = tmp_path / "leaky_tools.py"
    tools.write_text(LEAKY_TOOLS)
    model = leaky_script(tmp_path / "leaky.json", secret)
    store = open_store(store_url)
    try:
        answered = run_sync(ANSWER_GOAL, tools=str(tools), model=model, store=store)
        failed = run_sync(ERROR_GOAL, tools=str(tools), model=model, store=store)
        assert answered.stop_reason == "success" and failed.stop_reason == "tool_error:call_api"
        assert store.load_run(answered.run_id).answer == f"The key is {REDACTED}; flag 1"
        assert REDACTED in (store.load_run(failed.run_id).message or "")
    finally:
        store.close()
    rows = every_row(store_url)
    assert answered.run_id in rows and failed.run_id in rows
    assert secret not in rows
    assert REDACTED in rows
