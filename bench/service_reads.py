"""Read benchmark: ``GET /runs`` over 100,000 stored runs, alone and under 100 clients.

    python bench/service_reads.py [--runs 100000] [--clients 100] [--db URL]

Stores ``--runs`` runs at once (one bulk insert: finished, paused, queued, and running with a
live lease, an expired one or none), starts ``taskdecomp serve`` on that store in a child
process on a free loopback port, then measures:

- ``GET /runs`` alone: one client walks the list page by page (``limit=50``, following
  ``next_cursor``), with and without a status filter;
- ``GET /runs`` with ``--clients`` concurrent clients doing the same;
- ``GET /health`` meanwhile, from a separate process (so the clients' own work does not
  delay it), every 10 ms.

It prints a markdown table of p50/p99 against the targets (p99 <= 50 ms alone, <= 500 ms with
100 clients, ``/health`` p99 <= 50 ms). The default store is a SQLite file in a temporary
directory; ``--db`` takes a PostgreSQL URL of an empty schema. Every request goes to
127.0.0.1 and each phase stops within ``--deadline`` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx

from taskdecomp.run import RunId
from taskdecomp.store import NewRun, bulk, open_store, rows, schema

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: find ``bench``

from bench._serving import WORK_TOOLS, Keepalive, percentile, serve

UNUSED_MODEL = {"rules": [], "default": "unused"}
"""No run is started: the model is never asked."""

FILTERS = (None, None, None, "ok", "interrupted", "running", "paused")
"""What the walks filter on: mostly the whole list, the rest one status each."""

KINDS = ("ok", "ok", "ok", "stopped", "paused", "queued", "live", "expired", "released")
"""How the stored runs are spread: ``live``, ``expired`` and ``released`` are stored running
with a lease that holds, one that ran out, and none."""


def seed(url: str, count: int) -> float:
    """Store ``count`` runs in one bulk insert; the seconds it took."""
    started = time.perf_counter()
    now = time.time()
    batch = []
    for n in range(count):
        new = NewRun(
            run_id=RunId(f"bench-{n:07d}"), goal=f"benchmark goal {n}", model=None, tools=None,
            config={},
        )  # fmt: skip
        row = rows.new_run(new, now=now - count + n)
        kind = KINDS[n % len(KINDS)]
        if kind in ("ok", "stopped", "paused", "queued"):
            row["status"] = kind
        if kind in ("ok", "stopped"):
            row["stop_reason"] = "success" if kind == "ok" else "max_tool_calls"
            row["finished_at"] = row["started_at"] + 2.5
        if kind in ("live", "expired"):
            row["lease_owner"] = "bench:1:1"
            row["lease_expires_at"] = now + (86_400 if kind == "live" else -60)
        batch.append(row)
    store = open_store(url)
    try:
        with store.write() as conn:
            bulk.insert_rows(conn, schema.runs, batch)
    finally:
        store.close()
    return time.perf_counter() - started


class Walks:
    """The clients' shared tallies."""

    def __init__(self, requests: int) -> None:
        self.left = requests
        self.ms: list[float] = []
        self.pages_past_first = 0
        self.errors: list[str] = []


async def walk(url: str, walks: Walks, status: str | None) -> None:
    """Page through the list with ``status``, one request at a time, while requests are left."""
    connection = Keepalive(url)
    cursor = None
    try:
        while walks.left > 0:
            walks.left -= 1
            params: dict[str, Any] = {"limit": 50}
            if status is not None:
                params["status"] = status
            if cursor is not None:
                params["cursor"] = cursor
                walks.pages_past_first += 1
            sent = time.perf_counter()
            try:
                code, body = await connection.request("GET", f"/runs?{urlencode(params)}")
            except (OSError, asyncio.IncompleteReadError) as exc:
                walks.errors.append(f"{type(exc).__name__}: {exc}")
                connection.close()
                connection = Keepalive(url)
                continue
            walks.ms.append((time.perf_counter() - sent) * 1000)
            if code != 200:
                walks.errors.append(f"GET /runs {code}: {body[:200]!r}")
                continue
            cursor = json.loads(body)["next_cursor"]
    finally:
        connection.close()


async def drive(url: str, clients: int, requests: int, deadline: float) -> Walks:
    walks = Walks(requests)
    each = (walk(url, walks, FILTERS[n % len(FILTERS)]) for n in range(clients))
    await asyncio.wait_for(asyncio.gather(*each), timeout=deadline)
    return walks


def probe(url: str, stop: Event, out: Connection) -> None:
    """``GET /health`` every 10 ms until ``stop``; send the latencies (ms) back."""
    found: list[float] = []
    failed = 0
    with httpx.Client(base_url=url, timeout=60) as client:
        while not stop.is_set():
            sent = time.perf_counter()
            try:
                ok = client.get("/health").status_code == 200
            except httpx.HTTPError:
                ok = False
            found.append((time.perf_counter() - sent) * 1000)
            failed += not ok
            time.sleep(0.01)
    out.send((found, failed))


def measured(url: str, clients: int, requests: int, deadline: float) -> tuple[Walks, list[float]]:
    """The walks of ``clients`` clients, and /health's latencies meanwhile."""
    stop = multiprocessing.Event()
    receive, send = multiprocessing.Pipe(duplex=False)
    prober = multiprocessing.Process(target=probe, args=(url, stop, send))
    prober.start()
    try:
        walks = asyncio.run(drive(url, clients, requests, deadline))
    finally:
        stop.set()
        health, failed = receive.recv()
        prober.join(timeout=30)
    if failed:
        walks.errors.append(f"{failed} /health requests failed")
    return walks, health


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--alone", type=int, default=500, help="requests of the lone client")
    parser.add_argument("--busy", type=int, default=5_000, help="requests of all the clients")
    parser.add_argument("--db", help="a PostgreSQL URL of an empty schema; default: SQLite")
    parser.add_argument("--deadline", type=float, default=600)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or f"sqlite:///{Path(tmp) / 'runs.db'}"
        seconds = seed(db, args.runs)
        proc, url = serve(Path(tmp), WORK_TOOLS, UNUSED_MODEL, db=db)
        try:
            alone, quiet = measured(url, 1, args.alone, args.deadline)
            busy, health = measured(url, args.clients, args.busy, args.deadline)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    backend = "PostgreSQL" if db.startswith("postgresql") else "SQLite"
    report(args, backend, seconds, alone, quiet, busy, health)


def report(
    args: Any,
    backend: str,
    seconds: float,
    alone: Walks,
    quiet: list[float],
    busy: Walks,
    health: list[float],
) -> None:
    print(
        f"{args.runs:,} stored runs ({backend}, stored in {seconds:.1f} s), GET /runs?limit=50 "
        f"walking pages by next_cursor ({len(FILTERS) - FILTERS.count(None)} of "
        f"{len(FILTERS)} walks filter on a status), 127.0.0.1\n"
    )
    print("| measure | requests | p50 ms | p99 ms | target p99 |")
    print("|---|---:|---:|---:|---|")
    rows_ = (
        ("`GET /runs`, one client", alone.ms, "<= 50 ms"),
        ("`GET /health` meanwhile", quiet, ""),
        (f"`GET /runs`, {args.clients} concurrent clients", busy.ms, "<= 500 ms"),
        ("`GET /health` meanwhile", health, "<= 50 ms"),
    )
    for name, values, target in rows_:
        p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
        print(f"| {name} | {len(values):,} | {p50:.1f} | {p99:.1f} | {target} |")
    deepest = alone.pages_past_first + busy.pages_past_first
    print(f"\npages read past the first: {deepest:,}")
    errors = alone.errors + busy.errors
    print(f"errors: {len(errors)} (target: 0)")
    for error in errors[:5]:
        print(f"  {error}")


if __name__ == "__main__":
    main()
