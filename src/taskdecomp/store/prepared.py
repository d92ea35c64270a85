"""The store's hot statements, compiled once per dialect and handed straight to the driver.

SQLAlchemy's ``Connection.execute`` of a cached statement still spends tens of microseconds
in Python on each call (an execution context, its parameters processed, a result object):
more than SQLite spends on a checkpoint's ``UPDATE``, and several times per run. A
:class:`Prepared` statement is compiled once for each dialect it meets and then sent with
its parameters to the driver's connection: ``sqlite3`` keeps it prepared in its statement
cache, psycopg prepares it on the server once it has run a few times. They share one driver
cursor per connection (a psycopg cursor costs about ten microseconds to make).

Parameters go through the same conversions SQLAlchemy would apply (a SQLite ``REAL``'s
``float()``); a statement the driver could not take this way (a parameter name SQLAlchemy
escapes, another parameter style) is executed through SQLAlchemy as before. A driver error
is raised as the SQLAlchemy error that ``execute`` would have raised, so callers handle both
alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Dialect, Insert
from sqlalchemy import exc as sa_exc
from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.compiler import SQLCompiler

_Convert = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class _Compiled:
    sql: str
    names: tuple[str, ...]
    """The parameters' names, in the order a positional driver takes them."""
    converts: tuple[_Convert | None, ...]
    """How SQLAlchemy converts each of them for the driver (SQLite's floats); ``None``: not."""
    named: bool
    """Whether the driver takes them by name."""
    converting: bool
    """Whether any of them is converted."""

    def values(self, params: Mapping[str, Any]) -> Any:
        """``params`` as the driver takes them, converted as SQLAlchemy would."""
        names = self.names
        if self.converting:
            pairs = zip(names, self.converts, strict=True)
            converted = [params[n] if to is None else to(params[n]) for n, to in pairs]
            return dict(zip(names, converted, strict=True)) if self.named else tuple(converted)
        if self.named:
            return {name: params[name] for name in names}
        return tuple([params[name] for name in names])


class Prepared:
    """``statement``, executed on the driver with no per-call work beyond its parameters.

    An ``INSERT`` inserts the columns its parameters name (compiled once per set of names).
    """

    def __init__(self, statement: Executable) -> None:
        self.statement = statement
        self._insert = isinstance(statement, Insert)
        self._compiled: dict[tuple[str, ...], _Compiled | None] = {}

    def __call__(self, conn: Connection, params: Mapping[str, Any]) -> int:
        """Execute it with ``params`` in ``conn``'s transaction; the number of rows it changed.

        Raises:
            sqlalchemy.exc.DBAPIError: the database refused it (``IntegrityError`` for a
                constraint), as ``conn.execute`` would raise it.
        """
        compiled = self._compiled_for(conn, params)
        if compiled is None:
            return int(conn.execute(self.statement, dict(params)).rowcount)
        values = compiled.values(params)
        try:
            return int(cursor(conn).execute(compiled.sql, values).rowcount)
        except conn.dialect.loaded_dbapi.Error as exc:
            raise as_sqlalchemy(conn, compiled.sql, values, exc) from exc

    def many(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        """Execute it once per row of ``rows`` (all naming the same parameters), in one call.

        sqlite3 loops in C; psycopg sends every row before it waits for the first answer.

        Raises:
            sqlalchemy.exc.DBAPIError: the database refused a row, as ``conn.execute`` would
                raise it.
        """
        if not rows:
            return
        compiled = self._compiled_for(conn, rows[0])
        if compiled is None:
            conn.execute(self.statement, [dict(row) for row in rows])
            return
        values = [compiled.values(row) for row in rows]
        try:
            cursor(conn).executemany(compiled.sql, values)
        except conn.dialect.loaded_dbapi.Error as exc:
            raise as_sqlalchemy(conn, compiled.sql, values, exc) from exc

    def _compiled_for(self, conn: Connection, params: Mapping[str, Any]) -> _Compiled | None:
        dialect = conn.dialect
        key = (dialect.name, *params) if self._insert else (dialect.name,)
        try:
            return self._compiled[key]
        except KeyError:
            columns = list(params) if self._insert else None
            compiled = self._compiled[key] = _compile(self.statement, dialect, columns)
            return compiled


def execute(conn: Connection, sql: str) -> None:
    """Execute ``sql`` (no parameters) on the driver, in ``conn``'s transaction.

    Raises:
        sqlalchemy.exc.DBAPIError: the database refused it, as ``conn.exec_driver_sql``
            would raise it.
    """
    try:
        cursor(conn).execute(sql)
    except conn.dialect.loaded_dbapi.Error as exc:
        raise as_sqlalchemy(conn, sql, (), exc) from exc


_CURSOR = "taskdecomp_cursor"


def cursor(conn: Connection) -> Any:
    """The driver cursor the prepared statements (and ``COPY``) share on ``conn``'s connection.

    Kept in the pooled connection's ``info`` (emptied when the connection is dropped), with
    the driver connection it belongs to, so a reconnected one gets a cursor of its own.
    """
    pooled = conn.connection
    driver: Any = pooled.driver_connection
    kept = pooled.info.get(_CURSOR)
    if kept is None or kept[0] is not driver:
        kept = pooled.info[_CURSOR] = (driver, driver.cursor())
    return kept[1]


def as_sqlalchemy(conn: Connection, sql: str, values: Any, exc: Any) -> sa_exc.StatementError:
    """The SQLAlchemy error ``conn.execute`` would have raised for the driver's ``exc``.

    A lost connection is dropped, as SQLAlchemy drops it: no rollback is tried on it, so the
    error raised is the server's, not the failed rollback's.
    """
    dialect = conn.dialect
    lost = dialect.is_disconnect(exc, conn.connection.dbapi_connection, None)
    if lost:
        conn.invalidate(exc)
    error: sa_exc.StatementError = sa_exc.DBAPIError.instance(
        sql, values, exc, dialect.loaded_dbapi.Error, dialect=dialect, connection_invalidated=lost
    )
    return error


def _compile(
    statement: Executable, dialect: Dialect, columns: list[str] | None
) -> _Compiled | None:
    """``statement``'s SQL for ``dialect``; ``None`` when only SQLAlchemy can execute it."""
    compiled = statement.compile(dialect=dialect, column_keys=columns)  # type: ignore[attr-defined]
    assert isinstance(compiled, SQLCompiler)
    if compiled.escaped_bind_names or dialect.paramstyle not in ("qmark", "pyformat"):
        return None
    named = dialect.paramstyle == "pyformat"
    names = tuple(compiled.bind_names.values() if named else compiled.positiontup or ())
    converts = {
        name: bind.type.dialect_impl(dialect).bind_processor(dialect)
        for name, bind in compiled.binds.items()
    }
    per_name = tuple(converts.get(name) for name in names)
    return _Compiled(
        sql=compiled.string,
        names=names,
        converts=per_name,
        named=named,
        converting=any(per_name),
    )
