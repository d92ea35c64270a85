"""Store fixtures: a real SQLite file and the real PostgreSQL, one fresh schema per test.

PostgreSQL is read from ``TEST_PG_URL`` (default ``postgresql://postgres@127.0.0.1/test``).
Each test gets its own schema, named in the URL's ``search_path`` and dropped afterwards.
When the server cannot be reached the PostgreSQL cases are skipped, except under CI
(``CI`` set), where they fail.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from taskdecomp.store import SqlStore, open_store

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1/test"
BACKENDS = ("sqlite", "postgresql")


def pg_base_url() -> str:
    return os.environ.get("TEST_PG_URL", DEFAULT_PG_URL)


def _admin(url: str) -> psycopg.Connection[tuple[object, ...]]:
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        message = f"PostgreSQL at {url!r} is not reachable ({exc}); see shared ENV.md"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A URL whose ``search_path`` is a fresh, empty schema; dropped after the test."""
    base = pg_base_url()
    schema = f"td_{uuid.uuid4().hex[:16]}"
    with _admin(base) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    separator = "&" if "?" in base else "?"
    yield f"{base}{separator}options={quote(f'-csearch_path={schema}')}"
    with _admin(base) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store' / 'runs.db'}"


class Clock:
    """A store's clock (``open_store(url, now=clock)``), moved by hand.

    Stores of one test that share it agree on the time, which moves only when the test sets
    :attr:`at`: a lease expires at the moment the test chooses, however busy the machine.
    """

    def __init__(self, at: float = 1000.0) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def timed(store_url: str, clock: Clock) -> Iterator[SqlStore]:
    """A store on each backend whose clock the test moves."""
    opened = open_store(store_url, now=clock)
    yield opened
    opened.close()


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest) -> str:
    """The URL of an empty store, on each backend in turn."""
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    url: str = request.getfixturevalue(name)
    return url


@pytest.fixture
def store(store_url: str) -> Iterator[SqlStore]:
    """An open, migrated, empty store on each backend in turn."""
    opened = open_store(store_url)
    yield opened
    opened.close()
