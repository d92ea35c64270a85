"""bench/scale.py in a fast mode: every row is printed, and nothing is left behind.

The benchmark creates its own database on the server ``TEST_PG_URL`` names and starts
``taskdecomp worker`` processes; after it, neither the database nor a worker may remain,
whether it succeeded or failed.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
from pathlib import Path

import psycopg
import pytest
from bench import scale
from bench.scale import main
from sqlalchemy.engine import make_url

PG_URL = os.environ.get("TEST_PG_URL", "postgresql://postgres@127.0.0.1/test")
SERVER = make_url(PG_URL)
FAST = [
    *("--host", SERVER.host or "127.0.0.1", "--user", SERVER.username or "postgres"),
    *("--latency-ms", "10", "--tool-ms", "5", "--runs", "4", "--short-runs", "4"),
    *("--concurrency", "2"),
]
ROW = re.compile(r"(this process|DBOS alone, 1 worker|queued, (\d+) workers?)\s+(\d+)\s+(\d+)\s")


def _bench_databases() -> list[str]:
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        found = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s",
            (f"taskdecomp_bench_{os.getpid()}_%",),
        ).fetchall()
    return [str(name) for (name,) in found]


def _worker_children() -> list[int]:
    """Processes whose parent is this one and that run a worker (or DBOS's floor's)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue  # the process ended while we looked
        worker = b"taskdecomp.cli" in cmdline or b"floor_worker" in cmdline
        if int(fields[1]) == os.getpid() and worker:
            found.append(int(stat.parent.name))
    return found


def _tables(out: str) -> list[list[tuple[str, int, int]]]:
    """Each throughput table's rows: who ran the runs (``0`` workers: this process), slots, runs."""
    tables: list[list[tuple[str, int, int]]] = []
    for line in out.splitlines():
        if line.startswith("runs through"):
            tables.append([])
        elif tables and (found := ROW.match(line)):
            tables[-1].append((found[1], int(found[3]), int(found[4])))
    return tables


def test_fast_mode_prints_a_row_per_worker_count_and_the_per_run_overhead(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*FAST, "--workers", "2", "1", "--sequential", "2"]) == 0

    out = capsys.readouterr().out
    assert "2 model calls and 2 tool waves a run (ideal 30 ms)" in out
    expected = [("this process", 2, 4), ("queued, 1 worker", 2, 4), ("queued, 2 workers", 4, 4)]
    floor = ("DBOS alone, 1 worker", 2, 4)  # as many empty workflows, below the short runs
    assert _tables(out) == [[expected[0], floor, *expected[1:]], expected]
    labels = ("in process ", "queued, 1 worker ", "overhead ")
    after = out[out.index("per run, 2 runs one after another") :]
    per_run = [line for line in after.splitlines() if line.startswith(labels)]
    assert [line.split()[0] for line in per_run] == ["in", "queued,", "overhead"]
    assert re.fullmatch(r"overhead\s+[+-]\d+ ms\s+[+-]\d+ ms\s*", per_run[2])
    assert "submit() p50" in out
    assert "FAILED" not in out
    assert _bench_databases() == []
    assert _worker_children() == []


def test_a_worker_that_cannot_start_fails_the_bench_and_leaves_nothing_behind(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # the workers are given a toolset that does not exist: they exit with a usage error
    start = scale.start_worker

    def broken(setup: scale.Setup, no: int) -> subprocess.Popen[bytes]:
        return start(dataclasses.replace(setup, tools=tmp_path / "missing.py"), no)

    monkeypatch.setattr(scale, "start_worker", broken)
    status = scale.main([*FAST, "--workers", "1", "--sequential", "1"])

    out = capsys.readouterr().out
    assert status == 1
    assert "FAILED worker" in out
    assert "exited with 2" in out
    assert "note: worker-1.log:" in out  # what the worker said is shown
    assert _bench_databases() == []
    assert _worker_children() == []


def test_no_runs_at_once_is_refused() -> None:
    with pytest.raises(SystemExit) as refused:
        scale.main([*FAST, "--concurrency", "0"])
    assert refused.value.code == 2
