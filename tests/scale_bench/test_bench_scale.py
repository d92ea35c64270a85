"""bench/scale.py in a fast mode: every row is printed, and nothing is left behind.

The benchmark creates its own database on the server ``TEST_PG_URL`` names and starts
``taskdecomp worker`` processes; after it, neither the database nor a worker may remain,
whether it succeeded or failed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import psycopg
import pytest
from bench.scale import main
from sqlalchemy.engine import make_url

PG_URL = os.environ.get("TEST_PG_URL", "postgresql://postgres@127.0.0.1/test")
SERVER = make_url(PG_URL)
FAST = [
    *("--host", SERVER.host or "127.0.0.1", "--user", SERVER.username or "postgres"),
    *("--latency-ms", "10", "--tool-ms", "5", "--runs", "4", "--concurrency", "2"),
]


def _bench_databases() -> list[str]:
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        found = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s",
            (f"taskdecomp_bench_{os.getpid()}_%",),
        ).fetchall()
    return [str(name) for (name,) in found]


def _worker_children() -> list[int]:
    """Processes whose parent is this one and that run the taskdecomp command line."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue  # the process ended while we looked
        if int(fields[1]) == os.getpid() and b"taskdecomp.cli" in cmdline:
            found.append(int(stat.parent.name))
    return found


def _table(out: str, header: str) -> list[list[str]]:
    """The rows under the line that starts with ``header``, up to the first blank line."""
    lines = out.splitlines()
    start = next(no for no, line in enumerate(lines) if line.lstrip().startswith(header)) + 1
    rows = []
    for line in lines[start:]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def test_fast_mode_prints_a_row_per_worker_count_and_the_per_run_overhead(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*FAST, "--workers", "2", "1", "--sequential", "2"]) == 0

    out = capsys.readouterr().out
    assert "2 model calls and 2 tool waves a run (ideal 30 ms)" in out
    rows = _table(out, "workers")
    assert [row[:3] for row in rows] == [["1", "2", "4"], ["2", "4", "4"]]  # workers, slots, runs
    assert rows[0][6] == "1.00x"  # the speedup is counted from one worker
    labels = ("in process ", "queued, 1 worker ", "overhead ")
    per_run = [line for line in out.splitlines() if line.startswith(labels)]
    assert [line.split()[0] for line in per_run] == ["in", "queued,", "overhead"]
    assert re.fullmatch(r"overhead\s+[+-]\d+ ms\s+[+-]\d+ ms\s*", per_run[2])
    assert "submit() p50" in out
    assert "FAILED" not in out
    assert _bench_databases() == []
    assert _worker_children() == []


def test_a_worker_that_cannot_start_fails_the_bench_and_leaves_nothing_behind(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # a worker refuses --concurrency 0 and exits with a usage error at once
    status = main([*FAST, "--workers", "1", "--sequential", "1", "--concurrency", "0"])

    out = capsys.readouterr().out
    assert status == 1
    assert "FAILED worker" in out
    assert "exited with 2" in out
    assert "note: worker-1.log:" in out  # what the worker said is shown
    assert _bench_databases() == []
    assert _worker_children() == []
