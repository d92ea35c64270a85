"""Service benchmark: bounded load on ``taskdecomp serve`` over 127.0.0.1.

    python bench/service.py [--runs 200] [--clients 20] [--latency-ms 200]

Starts ``taskdecomp serve`` in a child process on a free loopback port, with a SQLite store
in a temporary directory and a scripted model that answers after ``--latency-ms``. Each of
``--clients`` concurrent clients starts runs (``POST /runs``, a 3-step DAG plan and a combine
call: two model calls each) and follows each one's event stream to its end, until ``--runs``
runs are done. It prints runs per second, p50/p99 of the time to start a run (the 202) and to
its first event, the errors (target: none) and the server's memory. Every request goes to
127.0.0.1 and the whole benchmark stops within ``--deadline`` seconds.

The service's targets under load are measured by three companion scripts, each on its own
server; ``python bench/service.py --suite`` runs them one after another with their defaults
(about ten minutes here), after this one:

- ``bench/service_reads.py``: ``GET /runs`` over 100,000 stored runs, alone and under 100
  clients, and ``/health`` meanwhile;
- ``bench/service_streams.py``: ``/health`` with 2,000 idle event streams open, and 500
  streams on one live run receiving the identical, complete sequence;
- ``bench/service_admission.py``: five bursts of 200 concurrent ``POST /runs``: the 202's
  latency, the 429s, no run ended by waiting, and the server's memory after each burst.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: find ``bench``

from bench._serving import WORK_TOOLS, dag_model, memory_kib, percentile, serve


class Load:
    """The clients' shared counters."""

    def __init__(self, runs: int) -> None:
        self.left = runs
        self.start_ms: list[float] = []
        self.first_event_ms: list[float] = []
        self.end_ms: list[float] = []
        self.errors: list[str] = []


async def one_run(client: httpx.AsyncClient, load: Load) -> None:
    sent = time.perf_counter()
    response = await client.post("/runs", json={"goal": "benchmark", "toolset": "bench"})
    if response.status_code != 202:
        load.errors.append(f"POST /runs {response.status_code}: {response.text[:200]}")
        return
    load.start_ms.append((time.perf_counter() - sent) * 1000)
    run_id = response.json()["run_id"]
    first = None
    status = None
    async with client.stream("GET", f"/runs/{run_id}/events") as stream:
        event = None
        async for line in stream.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
                if first is None and event != "end":
                    first = time.perf_counter()
            elif line.startswith("data: ") and event == "end":
                status = json.loads(line[6:])["status"]
                break
    if first is None or status != "ok":
        load.errors.append(f"run {run_id}: first event {first}, ended {status}")
        return
    load.first_event_ms.append((first - sent) * 1000)
    load.end_ms.append((time.perf_counter() - sent) * 1000)


async def client_loop(url: str, load: Load) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        while load.left > 0:
            load.left -= 1
            try:
                await one_run(client, load)
            except httpx.HTTPError as exc:
                load.errors.append(f"{type(exc).__name__}: {exc}")


async def drive(url: str, runs: int, clients: int, deadline: float) -> tuple[Load, float]:
    load = Load(runs)
    started = time.perf_counter()
    await asyncio.wait_for(
        asyncio.gather(*(client_loop(url, load) for _ in range(clients))), timeout=deadline
    )
    return load, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--latency-ms", type=float, default=200)
    parser.add_argument("--deadline", type=float, default=600)
    parser.add_argument(
        "--suite", action="store_true", help="then run the reads, streams and admission scripts"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = serve(Path(tmp), WORK_TOOLS, dag_model(args.latency_ms))
        try:
            idle = memory_kib(proc.pid)
            load, wall = asyncio.run(drive(url, args.runs, args.clients, args.deadline))
            busy = memory_kib(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    report(args, load, wall, idle, busy)
    if args.suite:
        suite()


COMPANIONS = ("service_reads.py", "service_streams.py", "service_admission.py")


def suite() -> None:
    """Run the companion scripts in turn; stop at the first that fails."""
    for name in COMPANIONS:
        print(f"\n## {name}\n", flush=True)
        subprocess.run([sys.executable, str(Path(__file__).with_name(name))], check=True)


def report(args: Any, load: Load, wall: float, idle: dict[str, int], busy: dict[str, int]) -> None:
    done = len(load.end_ms)
    print(
        f"{args.runs} runs, {args.clients} concurrent clients, scripted model "
        f"{args.latency_ms:g} ms (2 model calls a run), SQLite, 127.0.0.1"
    )
    print(f"runs completed      {done} in {wall:.1f} s = {done / wall:.1f} runs/s")
    print("                       p50 ms    p99 ms")
    for name, values in (
        ("start (202)", load.start_ms),
        ("first event", load.first_event_ms),
        ("run end", load.end_ms),
    ):
        print(f"{name:<20} {percentile(values, 0.5):>9.1f} {percentile(values, 0.99):>9.1f}")
    print(f"errors              {len(load.errors)} (target: 0)")
    for error in load.errors[:5]:
        print(f"  {error}")
    print(
        f"server memory       RSS {idle.get('VmRSS', 0) / 1024:.0f} MiB idle, "
        f"{busy.get('VmRSS', 0) / 1024:.0f} MiB after, peak {busy.get('VmHWM', 0) / 1024:.0f} MiB"
    )
    if load.start_ms:
        print(f"mean start          {statistics.mean(load.start_ms):.1f} ms")


if __name__ == "__main__":
    main()
