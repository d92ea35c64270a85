"""How many worker processes ``taskdecomp worker`` starts when ``--processes`` is not given."""

from __future__ import annotations

import os

import psycopg
import pytest

from taskdecomp.errors import ConfigError
from taskdecomp.scale import processes
from taskdecomp.scale.processes import CONNECTIONS_PER_PROCESS, default_count, usable_cores

PG = os.environ.get("TEST_PG_URL", "postgresql://postgres@127.0.0.1/test")


def test_one_process_per_usable_core() -> None:
    cores = usable_cores()
    assert 1 <= cores <= (os.cpu_count() or 1)
    assert cores <= len(os.sched_getaffinity(0))


def test_a_cpu_quota_caps_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "_cpu_quota", lambda: 0.5)  # a container given half a core
    assert usable_cores() == 1


def test_no_more_processes_than_the_server_has_free_connections_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(processes, "usable_cores", lambda: 16)
    monkeypatch.setattr(processes, "_free_connections", lambda url: 3 * CONNECTIONS_PER_PROCESS + 5)
    assert default_count(PG) == (
        3,
        "one per core would be 16; PostgreSQL has connections free for 3",
    )
    monkeypatch.setattr(processes, "_free_connections", lambda url: 4)
    assert default_count(PG)[0] == 1  # at least one: it says what is wrong if it cannot connect


def test_the_free_connections_are_read_from_the_server() -> None:
    free = processes._free_connections(PG)
    with psycopg.connect(PG) as conn:
        row = conn.execute("SELECT current_setting('max_connections')::int").fetchone()
    assert row is not None
    assert free is not None and 0 < free < row[0]
    count, why = default_count(PG)
    assert 1 <= count <= usable_cores()
    assert why == "one per core" or why.endswith(f"connections free for {count}")


def test_a_server_that_cannot_be_asked_gets_one_process_which_says_why_once() -> None:
    count, why = default_count("postgresql://nobody@127.0.0.1:1/none")
    assert (count, why) == (1, "PostgreSQL could not be asked how many connections it has free")


def test_a_store_that_is_not_postgresql_is_one_error_before_any_process() -> None:
    with pytest.raises(ConfigError, match="queued runs need PostgreSQL"):
        default_count("sqlite:///runs.db")
