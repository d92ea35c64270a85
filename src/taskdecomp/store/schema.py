"""The store's tables and its append-only migrations.

Each migration has a version, a name and a function; :func:`migrate` applies the ones a
database has not seen, in order, in one transaction, and records each in
``taskdecomp_migrations``. Migrations are never edited once released: a change of schema is
a new migration appended to :data:`MIGRATIONS`.

Every text column holds ASCII written by :mod:`taskdecomp.store.codec`; times are wall-clock
seconds since the epoch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    Connection,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    insert,
    inspect,
    select,
    text,
)
from sqlalchemy.schema import CreateColumn

from taskdecomp.errors import StoreConfigError

metadata = MetaData()

migrations = Table(
    "taskdecomp_migrations",
    metadata,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("name", String(200), nullable=False),
    Column("applied_at", Float, nullable=False),
)


def _run_columns() -> list[Column[Any]]:
    """The ``runs`` columns of schema version 1 (fresh objects: a column has one table)."""
    return [
        Column("id", Text, primary_key=True),
        Column("goal", Text, nullable=False),
        Column("status", String(16), nullable=False),
        Column("stop_reason", Text),
        Column("model", Text),
        Column("tools", Text),
        Column("config", Text, nullable=False),
        Column("usage", Text, nullable=False),
        Column("result", Text),
        Column("segments", Integer, nullable=False),
        Column("started_at", Float, nullable=False),
        Column("updated_at", Float, nullable=False),
        Column("finished_at", Float),
    ]


runs = Table(
    "runs",
    metadata,
    *_run_columns(),
    # version 3: the lease of the process that runs it (see taskdecomp.store.leases)
    Column("lease_owner", Text),
    Column("lease_epoch", Integer, nullable=False, server_default="0"),
    Column("lease_heartbeat_at", Float),
    Column("lease_expires_at", Float),
    # version 4: the strategy's checkpointed state, and the run's approvals
    Column("state", Text),
    Column("approvals", Text),
    # version 6: the run list's keyset, whole and by status (see taskdecomp.store.listing)
    Index("ix_runs_started_id", "started_at", "id"),
    Index("ix_runs_status_started_id", "status", "started_at", "id"),
)

LEASE_COLUMNS = ("lease_owner", "lease_epoch", "lease_heartbeat_at", "lease_expires_at")
"""The ``runs`` columns migration 3 adds."""

plans = Table(
    "plans",
    metadata,
    Column("run_id", Text, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("plan", Text, nullable=False),
    Column("created_at", Float, nullable=False),
)

steps = Table(
    "steps",
    metadata,
    Column("run_id", Text, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("step_id", Text, primary_key=True),
    Column("step_no", Integer, nullable=False),
    Column("observation", Text, nullable=False),
    Column("finished_at", Float, nullable=False),
)

attempts = Table(
    "attempts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", Text, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("step_id", Text, nullable=False),
    Column("step_no", Integer, nullable=False),
    Column("segment", Integer, nullable=False),
    Column("side_effects", String(16), nullable=False),
    Column("idempotency_key", Text, nullable=False),
    Column("state", String(16), nullable=False),
    Column("trace", Text),
    Column("started_at", Float, nullable=False),
    Column("finished_at", Float),
    Index("ix_attempts_run_id", "run_id", "id"),
)

events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", Text, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("at", Float, nullable=False),
    Column("data", Text, nullable=False),
    Index("ix_events_run_id", "run_id", "id"),
)


plan_trees = Table(
    "plan_trees",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("title", Text, nullable=False),
    Column("created_at", Float, nullable=False),
)

plan_nodes = Table(
    "plan_nodes",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("plan_id", Integer, ForeignKey("plan_trees.id", ondelete="CASCADE"), nullable=False),
    Column("parent_id", Integer, ForeignKey("plan_nodes.id", ondelete="CASCADE")),
    Column("position", Integer, nullable=False),
    Column("name", Text, nullable=False),
    Column("instruction", Text, nullable=False),
    Column("dependencies", Text, nullable=False),
    Column("context", Text, nullable=False),
    Column("leaf", Boolean, nullable=False),
    Column("created_at", Float, nullable=False),
    Index("ix_plan_nodes_plan", "plan_id", "parent_id", "position"),
)


queued_runs = Table(
    "queued_runs",
    metadata,
    Column("run_id", Text, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("queue", Text, nullable=False),
    Column("idempotency_key", Text, unique=True),
    Column("cancel_requested", Boolean, nullable=False, server_default="0"),
    Column("recoveries", Integer, nullable=False, server_default="0"),
    Column("first_started_at", Float),
    Column("enqueued_at", Float, nullable=False),
    Column("delivery", Text),
)
"""Runs submitted to a queue (version 5): which queue, the submitter's idempotency key, a
cancel request, how often a worker died running it, when it first started, and the id of
its latest delivery (the queue engine's workflow id)."""


def _v1_initial(conn: Connection) -> None:
    # ``runs`` as version 1 made it: the live table has the columns later versions add
    Table("runs", MetaData(), *_run_columns(), Index("ix_runs_started_at", "started_at")).create(
        conn
    )
    for table in (plans, steps, attempts, events):
        table.create(conn)


def _v2_plan_trees(conn: Connection) -> None:
    plan_trees.create(conn)
    plan_nodes.create(conn)


def _v3_run_leases(conn: Connection) -> None:
    for name in LEASE_COLUMNS:
        column = CreateColumn(runs.c[name]).compile(dialect=conn.dialect)
        conn.execute(text(f"ALTER TABLE runs ADD COLUMN {column}"))


def _v4_run_state(conn: Connection) -> None:
    for column in ("state", "approvals"):
        conn.execute(text(f"ALTER TABLE runs ADD COLUMN {column} TEXT"))


def _v5_queued_runs(conn: Connection) -> None:
    queued_runs.create(conn)


def _v6_run_list_indexes(conn: Connection) -> None:
    # (started_at, id) orders the list as its keyset does, so it replaces version 1's index
    for index in sorted(runs.indexes, key=lambda index: str(index.name)):
        index.create(conn, checkfirst=True)
    conn.execute(text("DROP INDEX IF EXISTS ix_runs_started_at"))


@dataclass(frozen=True, kw_only=True, slots=True)
class Migration:
    """One schema change."""

    version: int
    name: str
    apply: Callable[[Connection], None]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(version=1, name="runs, plans, steps, attempts, events", apply=_v1_initial),
    Migration(version=2, name="plan trees for the decomposer", apply=_v2_plan_trees),
    Migration(version=3, name="run leases: one owner per run", apply=_v3_run_leases),
    Migration(version=4, name="strategy state and approvals of a run", apply=_v4_run_state),
    Migration(version=5, name="runs submitted to a queue", apply=_v5_queued_runs),
    Migration(version=6, name="indexes of the paged run list", apply=_v6_run_list_indexes),
)
"""Every migration, oldest first. Append only."""

_PG_MIGRATION_LOCK = 7_416_385_203
"""Advisory lock key that keeps two PostgreSQL clients from migrating at once."""


def pending(conn: Connection) -> bool:
    """Whether the database lacks a migration (or has one this version does not know)."""
    if not inspect(conn).has_table(migrations.name):
        return True
    applied = set(conn.execute(select(migrations.c.version)).scalars())
    return applied != {m.version for m in MIGRATIONS}


def migrate(conn: Connection, *, now: float) -> list[int]:
    """Apply the migrations ``conn``'s database lacks; return their versions.

    Runs inside the caller's transaction (``BEGIN IMMEDIATE`` on SQLite, an advisory lock
    on PostgreSQL), so concurrent starts apply each migration once.

    Raises:
        StoreConfigError: the database has a migration this version of taskdecomp does not know.
    """
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK})
    migrations.create(conn, checkfirst=True)
    applied = set(conn.execute(select(migrations.c.version)).scalars())
    known = {m.version for m in MIGRATIONS}
    if applied - known:
        raise StoreConfigError(
            f"the database has schema version {max(applied)}, newer than this taskdecomp "
            f"knows ({max(known)}); upgrade taskdecomp or use another --db"
        )
    done = []
    for migration in MIGRATIONS:
        if migration.version not in applied:
            migration.apply(conn)
            conn.execute(
                insert(migrations).values(
                    version=migration.version, name=migration.name, applied_at=now
                )
            )
            done.append(migration.version)
    return done
