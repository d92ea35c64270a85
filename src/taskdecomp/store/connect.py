"""Reaching a store's database: its URL, its engine, and what a driver's error means.

SQLite runs in WAL mode with ``synchronous=FULL`` (a committed checkpoint survives a power
cut), ``foreign_keys=ON`` and a busy timeout; a transaction marked :data:`LAZY` commits with
``synchronous=NORMAL``. Python's ``sqlite3`` driver is told to leave transactions alone and
SQLAlchemy emits ``BEGIN IMMEDIATE`` for every write transaction (plain ``BEGIN`` for reads,
see :data:`BEGIN`), the recipe SQLAlchemy documents for the pysqlite driver; so a writer
takes the lock up front and never fails half-way on a lock upgrade.

PostgreSQL is reached through psycopg 3; a plain ``postgresql://`` URL is read as
``postgresql+psycopg://``. Driver errors become :class:`~taskdecomp.errors.StoreError`
(:func:`driver_errors`) with a message that names the database (never its password) and
says what to check.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import URL, Connection, Engine, create_engine, event, make_url
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.pool import ConnectionPoolEntry

from taskdecomp.errors import StoreConfigError, StoreError
from taskdecomp.store import prepared

BEGIN = "taskdecomp_sqlite_begin"
"""Execution option naming the statement that starts a SQLite transaction."""

LAZY = "taskdecomp_lazy_commit"
"""Execution option: this write transaction need not be durable when it commits."""

_SYNC = "taskdecomp_sqlite_synchronous"
"""Key in a SQLite connection's info: the ``synchronous`` setting it has now."""

DEFAULT_BUSY_TIMEOUT = 5.0
"""Seconds a SQLite writer waits for another process's lock before giving up."""


def normalize_url(url: str) -> URL:
    """Parse a database URL or a SQLite file path; ``postgresql://`` gets the psycopg driver.

    Raises:
        StoreError: the URL does not parse or names an unsupported database.
    """
    if "://" not in url:
        return URL.create("sqlite", database=str(Path(url).expanduser()))
    try:
        parsed = make_url(url)
    except sa_exc.ArgumentError as exc:
        raise StoreConfigError(f"database URL {url!r} does not parse: {exc}") from exc
    backend = parsed.get_backend_name()
    if backend in ("postgresql", "postgres"):
        if parsed.drivername in ("postgresql", "postgres"):
            parsed = parsed.set(drivername="postgresql+psycopg")
        return parsed
    if backend == "sqlite":
        return parsed
    raise StoreConfigError(
        f"unsupported database {parsed.render_as_string(hide_password=True)!r}; use "
        "sqlite:///PATH (or a file path) or postgresql://user@host/dbname"
    )


def engine(url: URL, *, name: str, busy_timeout: float) -> Engine:
    """The engine for ``url`` (shown as ``name``); SQLite's set up as the module says.

    Raises:
        StoreConfigError: no driver for the database, or a SQLite file's folder cannot be
            created.
    """
    try:
        if url.get_backend_name() == "sqlite":
            return _sqlite_engine(url, busy_timeout)
        return create_engine(url, connect_args={"connect_timeout": 10})
    except (sa_exc.NoSuchModuleError, ImportError) as exc:
        raise StoreConfigError(
            f"no driver for {name!r} ({exc}); PostgreSQL needs psycopg: "
            "pip install 'psycopg[binary]'"
        ) from exc


def _sqlite_engine(url: URL, busy_timeout: float) -> Engine:
    database = url.database
    if database and database != ":memory:" and not database.startswith("file:"):
        folder = Path(database).expanduser().parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file on the way, no permission, read-only disk
            raise StoreConfigError(
                f"cannot create the folder {str(folder)!r} for the SQLite store "
                f"{database!r}: {exc.strerror or exc}; pick a --db path whose folders "
                "can be created"
            ) from exc
    sqlite = create_engine(url, connect_args={"timeout": busy_timeout})
    busy_ms = int(busy_timeout * 1000)

    @event.listens_for(sqlite, "connect")
    def _on_connect(dbapi_conn: DBAPIConnection, record: ConnectionPoolEntry) -> None:
        dbapi_conn.isolation_level = None  # sqlite3: let SQLAlchemy emit BEGIN
        cursor = dbapi_conn.cursor()
        for pragma in ("journal_mode=WAL", "synchronous=FULL", "foreign_keys=ON"):
            cursor.execute(f"PRAGMA {pragma}")
        record.info[_SYNC] = "FULL"
        cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
        cursor.close()

    @event.listens_for(sqlite, "begin")
    def _on_begin(conn: Connection) -> None:
        options = conn.get_execution_options()
        begin = options.get(BEGIN, "BEGIN IMMEDIATE")
        sync = _sqlite_sync(options)
        if begin != "BEGIN" and conn.info.get(_SYNC) != sync:
            # a write: say how hard its commit must wait for the disk, when that changes
            prepared.execute(conn, f"PRAGMA synchronous={sync}")
            conn.info[_SYNC] = sync
        prepared.execute(conn, begin)  # on the driver: SQLAlchemy's execution costs more

    return sqlite


def _sqlite_sync(options: Mapping[str, Any]) -> str:
    return "NORMAL" if options.get(LAZY) else "FULL"


@contextmanager
def driver_errors(name: str, busy_timeout: float) -> Iterator[None]:
    """Raise the driver's errors inside it as :class:`StoreError`, naming the store ``name``."""
    try:
        yield
    except sa_exc.IntegrityError as exc:
        raise StoreError(f"the store {name!r} refused a write: {_first(exc)}") from exc
    except sa_exc.DBAPIError as exc:
        raise _explain(exc, name=name, busy_timeout=busy_timeout) from exc


def _explain(exc: sa_exc.DBAPIError, *, name: str, busy_timeout: float) -> StoreError:
    """The error to raise for a driver's: a path to fix, or a failure at run time."""
    problem = _first(exc)
    lowered = problem.lower()
    if "locked" in lowered or "busy" in lowered:
        return StoreError(
            f"the store {name!r} is locked by another process (waited "
            f"{busy_timeout:g}s); retry when it is done, or use another --db"
        )
    if "not a database" in lowered or "malformed" in lowered:
        return StoreConfigError(
            f"{name!r} is not a usable SQLite database ({problem}); use another --db"
        )
    if "unable to open" in lowered:
        return StoreConfigError(
            f"cannot open the SQLite store {name!r} ({problem}); check the path"
        )
    if _named_wrong(exc, lowered):
        return StoreConfigError(
            f"cannot use the database {name!r}: {problem}; check --db or TASKDECOMP_DATABASE_URL"
        )
    if exc.connection_invalidated or isinstance(exc, sa_exc.OperationalError):
        return StoreError(
            f"cannot use the database {name!r}: {problem}; check --db or "
            "TASKDECOMP_DATABASE_URL and that the server is up"
        )
    return StoreError(f"the store {name!r} failed: {problem}")


def _first(exc: sa_exc.DBAPIError) -> str:
    text = str(exc.orig) if exc.orig is not None else str(exc)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


_WRONG_NAME_STATES = frozenset({"3D000", "28000", "28P01"})
"""SQLSTATEs of a database, role or password the URL names wrongly."""
_WRONG_NAME_WORDS = (
    "does not exist",
    "password authentication failed",
    "could not translate host name",
    "name or service not known",
)


def _named_wrong(exc: sa_exc.DBAPIError, lowered: str) -> bool:
    """Whether the URL names something that is not there (fix --db), not a server gone."""
    state = getattr(exc.orig, "sqlstate", None)
    return state in _WRONG_NAME_STATES or any(word in lowered for word in _WRONG_NAME_WORDS)
