"""Admission benchmark: bursts of concurrent ``POST /runs`` on ``taskdecomp serve``, 127.0.0.1.

    python bench/service_admission.py [--bursts 5] [--burst 200] [--latency-ms 200]
        [--max-seconds 10] [--serve-arg=--max-running=8 ...] [--profile FILE]

Starts ``taskdecomp serve`` in a child process on a free loopback port, with a SQLite store
in a temporary directory and a scripted model that answers after ``--latency-ms`` (a 3-step
DAG plan and a combine call: two model calls a run). Each burst sends ``--burst`` concurrent
``POST /runs`` (each run with ``max_seconds`` = ``--max-seconds``), waits until every
accepted run has ended, lets the server settle, and reads its memory. It prints, per burst
and in total, p50/p99 of the time to the 202, how many were refused with 429, how runs
ended (target: none ``max_seconds``), how long they queued, and the server's RSS after each
burst (target: after the last within 1.5x of after the first), as a markdown table.

The client is one keep-alive HTTP/1.1 connection per concurrent request, opened before the
burst, speaking raw HTTP over asyncio streams: cheap enough (tens of microseconds a
request) that the times are the server's, not the client's (an httpx client costs a few
milliseconds of CPU a request, which 200 requests at once turn into hundreds of
milliseconds). Before each burst the same client sends ``--burst`` concurrent
``GET /health``: the floor this machine puts under a burst of that size at that moment (on
shared cores it moves from one minute to the next), printed next to the burst.
``--profile FILE`` runs the server under cProfile and writes its statistics to ``FILE``
when it stops (read them with ``python -m pstats FILE``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: find ``bench``

from bench._serving import (
    SERVE_CODE,
    WORK_TOOLS,
    Keepalive,
    dag_model,
    percentile,
    rss_mib,
    serve,
)

ENDED = ("ok", "stopped", "paused")

PROFILED = """
import cProfile, signal, sys
from taskdecomp.cli import main
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # uvicorn raises it again once stopped
profile = cProfile.Profile()
try:
    profile.runcall(main, sys.argv[1:])
finally:
    profile.dump_stats({out!r})
"""
"""The server's code under ``--profile``."""


@dataclass
class Burst:
    """What one burst measured."""

    accept_ms: list[float] = field(default_factory=list)
    health_ms: list[float] = field(default_factory=list)
    """The same number of concurrent ``GET /health`` just before: the floor at that moment."""
    refused: int = 0
    other: list[str] = field(default_factory=list)
    reasons: collections.Counter[str] = field(default_factory=collections.Counter)
    queued_s: list[float] = field(default_factory=list)
    seconds: float = 0.0
    rss_mib: float = 0.0


async def connections(url: str, n: int) -> list[Keepalive]:
    """``n`` open connections to ``url``."""
    opened = [Keepalive(url) for _ in range(n)]
    await asyncio.gather(*(connection.open() for connection in opened))
    return opened


async def post(connection: Keepalive, n: int, max_seconds: float, burst: Burst) -> str | None:
    body = {"goal": f"benchmark {n}", "toolset": "bench", "budget": {"max_seconds": max_seconds}}
    data = json.dumps(body).encode()
    sent = time.perf_counter()
    try:
        status, answer = await connection.request("POST", "/runs", data)
    except (OSError, asyncio.IncompleteReadError, StopIteration) as exc:
        burst.other.append(f"{type(exc).__name__}: {exc}")
        return None
    elapsed = (time.perf_counter() - sent) * 1000
    if status == 429:
        burst.refused += 1
        return None
    if status != 202:
        burst.other.append(f"POST /runs {status}: {answer[:200]!r}")
        return None
    burst.accept_ms.append(elapsed)
    run_id: str = json.loads(answer)["run_id"]
    return run_id


async def wait_all(url: str, run_ids: list[str], burst: Burst) -> None:
    """Poll every accepted run until it has ended, on a few connections."""
    left = list(run_ids)
    idle = await connections(url, 16)

    async def look(run_id: str) -> bool:
        connection = idle.pop()
        try:
            status, answer = await connection.request("GET", f"/runs/{run_id}")
        finally:
            idle.append(connection)
        if status != 200:
            burst.other.append(f"GET /runs/{run_id} {status}: {answer[:200]!r}")
            return True
        view = json.loads(answer)
        if view["status"] not in ENDED:
            return False
        burst.reasons[view["stop_reason"] or view["status"]] += 1
        if view.get("queued_seconds") is not None:
            burst.queued_s.append(view["queued_seconds"])
        return True

    try:
        while left:
            done = []
            for start in range(0, len(left), len(idle)):
                chunk = left[start : start + len(idle)]
                done += await asyncio.gather(*(look(run_id) for run_id in chunk))
            left = [run_id for run_id, ended in zip(left, done, strict=True) if not ended]
            if left:
                await asyncio.sleep(0.5)
    finally:
        for connection in idle:
            connection.close()


async def one_burst(url: str, args: argparse.Namespace, first: int) -> Burst:
    burst = Burst()
    opened = await connections(url, args.burst)
    try:
        started = time.perf_counter()
        posted = await asyncio.gather(
            *(post(c, first + n, args.max_seconds, burst) for n, c in enumerate(opened))
        )
    finally:
        for connection in opened:
            connection.close()
    await wait_all(url, [run_id for run_id in posted if run_id], burst)
    burst.seconds = time.perf_counter() - started
    return burst


async def health_burst(url: str, n: int) -> list[float]:
    """``n`` concurrent ``GET /health``: the floor this machine puts under a burst."""
    opened = await connections(url, n)

    async def one(connection: Keepalive) -> float:
        sent = time.perf_counter()
        status, _answer = await connection.request("GET", "/health")
        if status != 200:
            raise SystemExit(f"GET /health answered {status}")
        return (time.perf_counter() - sent) * 1000

    try:
        return list(await asyncio.gather(*(one(connection) for connection in opened)))
    finally:
        for connection in opened:
            connection.close()


def serve_for(folder: Path, args: argparse.Namespace) -> tuple[subprocess.Popen[bytes], str]:
    """The server with ``--latency-ms``, ``--profile`` and ``--serve-arg``."""
    code = PROFILED.format(out=str(args.profile.absolute())) if args.profile else SERVE_CODE
    model = dag_model(args.latency_ms)
    return serve(folder, WORK_TOOLS, model, code=code, extra=args.serve_arg)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bursts", type=int, default=5)
    parser.add_argument("--burst", type=int, default=200, help="concurrent POST /runs a burst")
    parser.add_argument("--latency-ms", type=float, default=200)
    parser.add_argument("--max-seconds", type=float, default=10)
    parser.add_argument("--settle", type=float, default=3, help="seconds before reading RSS")
    parser.add_argument("--serve-arg", action="append", default=[], help="passed to serve")
    parser.add_argument("--profile", type=Path, help="run the server under cProfile, to FILE")
    args = parser.parse_args()
    bursts: list[Burst] = []
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = serve_for(Path(tmp), args)
        try:
            idle = rss_mib(proc.pid)
            for n in range(args.bursts):
                floor = asyncio.run(health_burst(url, args.burst))
                time.sleep(args.settle)
                burst = asyncio.run(one_burst(url, args, n * args.burst))
                burst.health_ms = floor
                time.sleep(args.settle)
                burst.rss_mib = rss_mib(proc.pid)
                bursts.append(burst)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    report(args, idle, bursts)


def report(args: argparse.Namespace, idle: float, bursts: list[Burst]) -> None:
    print(
        f"{args.bursts} bursts of {args.burst} concurrent POST /runs; scripted model "
        f"{args.latency_ms:g} ms (2 calls a run), max_seconds {args.max_seconds:g}, SQLite, "
        f"127.0.0.1, one keep-alive connection a request; serve "
        f"{' '.join(args.serve_arg) or '(defaults)'}; RSS idle {idle:.0f} MiB"
    )
    print(
        f"before each burst, {args.burst} concurrent GET /health with the same client: the "
        "floor this machine puts under a burst at that moment"
    )
    print()
    print(
        "| burst | 202 p50 ms | 202 p99 ms | /health p50 ms | /health p99 ms | 429 "
        "| other errors | ended max_seconds | stop reasons | queued p50 s | queued max s "
        "| burst s | RSS after MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n, b in enumerate(bursts, start=1):
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(b.reasons.items()))
        print(
            f"| {n} | {percentile(b.accept_ms, 0.5):.1f} | {percentile(b.accept_ms, 0.99):.1f} "
            f"| {percentile(b.health_ms, 0.5):.1f} | {percentile(b.health_ms, 0.99):.1f} "
            f"| {b.refused} | {len(b.other)} | {b.reasons['max_seconds']} | {reasons} "
            f"| {percentile(b.queued_s, 0.5):.2f} | {max(b.queued_s, default=float('nan')):.2f} "
            f"| {b.seconds:.1f} | {b.rss_mib:.0f} |"
        )
    accepted = [ms for b in bursts for ms in b.accept_ms]
    health = [ms for b in bursts for ms in b.health_ms]
    print()
    print(
        f"all bursts: 202 p50 {percentile(accepted, 0.5):.1f} ms, p99 "
        f"{percentile(accepted, 0.99):.1f} ms (target <= 200; /health floor p50 "
        f"{percentile(health, 0.5):.1f} ms, p99 {percentile(health, 0.99):.1f} ms); "
        f"ended max_seconds "
        f"{sum(b.reasons['max_seconds'] for b in bursts)} (target 0); 429 "
        f"{sum(b.refused for b in bursts)}"
    )
    if bursts:
        ratio = bursts[-1].rss_mib / bursts[0].rss_mib
        print(
            f"RSS after burst 1 {bursts[0].rss_mib:.0f} MiB, after burst {len(bursts)} "
            f"{bursts[-1].rss_mib:.0f} MiB: {ratio:.2f}x (target <= 1.5x)"
        )
    for error in [e for b in bursts for e in b.other][:5]:
        print(f"  {error}")


if __name__ == "__main__":
    main()
