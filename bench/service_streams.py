"""Event-stream benchmark: many open streams on ``taskdecomp serve`` over 127.0.0.1.

    python bench/service_streams.py [--idle 2000] [--paused-runs 20] [--live 500] [--db URL]

Starts ``taskdecomp serve`` in a child process on a free loopback port (a SQLite store in a
temporary directory unless ``--db`` names one) with a scripted model, then:

1. **Idle streams.** Starts ``--paused-runs`` runs that stop for approval, opens ``--idle``
   event streams spread over them (each reads its backlog, then waits), and times
   ``GET /health`` one request after another while they stay open (target: p99 <= 50 ms);
   the same with no stream open, for comparison.
2. **One live run.** Closes them, starts a run whose second step waits for a release file,
   opens ``--live`` streams on it, releases it and reads every stream to its ``end``: do all
   get the identical, complete sequence (the one a replay after the end gives)?

Prints a markdown table. Streams are plain sockets (HTTP/1.1, one a connection), so the
client costs little next to the server; mind ``ulimit -n`` (each stream is a descriptor on
both sides).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: find ``bench``

from bench._serving import percentile, serve

TOOLS = '''
import time
from pathlib import Path
from taskdecomp import tool


def work(name: str) -> dict:
    """Do a small piece of work."""
    time.sleep(0.01)
    return {"done": name}


@tool(needs_approval=True)
def publish(key: str) -> str:
    """Publish a result (a human approves every call)."""
    return "published " + key


def block(name: str) -> str:
    """Wait until the release file next to this toolset exists."""
    release = Path(__file__).with_name("release")
    while not release.exists():
        time.sleep(0.05)
    return "released " + name
'''

LIVE_STEPS = 24


def step(step_id: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": step_id, "title": f"{tool} {step_id}", "tool": tool, "args": args}


APPROVAL_PLAN = {
    "kind": "plan",
    "steps": [
        step("fetch", "work", {"name": "fetch"}),
        step("check", "work", {"name": "check"}),
        step("ship", "publish", {"key": "report"}),
    ],
}

LIVE_PLAN = {
    "kind": "plan",
    "steps": [
        step("first", "work", {"name": "first"}),
        step("wait", "block", {"name": "wait"}),
        *(step(f"s{n}", "work", {"name": f"s{n}"}) for n in range(LIVE_STEPS - 2)),
    ],
}

MODEL = {
    "rules": [
        {"match": "task decomposition planner.*approval", "response": APPROVAL_PLAN},
        {"match": "task decomposition planner.*live", "response": LIVE_PLAN},
        {"match": "reporting assistant", "response": "All done."},
    ]
}

BUDGET = {"max_plan_steps": LIVE_STEPS, "max_execute_steps": LIVE_STEPS, "max_tool_calls": 40}


class Stream:
    """One event stream on a socket of its own: what it received, as SSE messages."""

    def __init__(self, port: int, path: str) -> None:
        self.port = port
        self.path = path
        self.status = 0
        self.raw = bytearray()
        self.ended = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        """Connect, ask for the stream, read its status line; then read on in a task."""
        reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writer.write(
            f"GET {self.path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n\r\n".encode()
        )
        await self.writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        self.status = int(head.split(b" ", 2)[1])
        self.task = asyncio.create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        while chunk := await reader.read(65536):
            self.raw += chunk
            if b"event: end\n" in self.raw[-4096:]:
                break
        self.ended.set()

    def close(self) -> None:
        """Stop reading and hang up."""
        if self.task is not None:
            self.task.cancel()
        if self.writer is not None:
            self.writer.close()

    def messages(self) -> list[tuple[int | None, str, str]]:
        """The (id, event, data) of each message, from the chunked body."""
        text = _unchunk(bytes(self.raw)).decode("ascii")
        found = []
        for block in text.split("\n\n"):
            fields: dict[str, str] = {}
            for line in block.split("\n"):
                key, _, value = line.partition(": ")
                if key in ("id", "event", "data"):
                    fields[key] = value
            if "event" in fields:
                event_id = int(fields["id"]) if "id" in fields else None
                found.append((event_id, fields["event"], fields.get("data", "")))
        return found


def _unchunk(body: bytes) -> bytes:
    out, at = bytearray(), 0
    while at < len(body):
        end = body.find(b"\r\n", at)
        if end < 0:
            break
        size = int(body[at:end].split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out += body[end + 2 : end + 2 + size]
        at = end + 2 + size + 2
    return bytes(out)


async def open_streams(port: int, paths: list[str], batch: int = 100) -> list[Stream]:
    streams = [Stream(port, path) for path in paths]
    for at in range(0, len(streams), batch):
        await asyncio.gather(*(s.open() for s in streams[at : at + batch]))
    return streams


async def health(client: httpx.AsyncClient, count: int) -> list[float]:
    times = []
    for _ in range(count):
        sent = time.perf_counter()
        response = await client.get("/health")
        times.append((time.perf_counter() - sent) * 1000)
        assert response.status_code == 200, response.text
        await asyncio.sleep(0.01)
    return times


async def start(client: httpx.AsyncClient, goal: str) -> str:
    response = await client.post("/runs", json={"goal": goal, "toolset": "bench", "budget": BUDGET})
    assert response.status_code == 202, response.text
    return str(response.json()["run_id"])


async def until(check: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise SystemExit("timed out waiting for the server")
        await asyncio.sleep(0.1)


async def idle_phase(url: str, port: int, args: Any) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        baseline = await health(client, args.health)
        runs = [await start(client, "approval") for _ in range(args.paused_runs)]

        async def all_paused() -> bool:
            views = [(await client.get(f"/runs/{r}")).json()["status"] for r in runs]
            return all(status == "paused" for status in views)

        await until(all_paused)
        paths = [f"/runs/{runs[n % len(runs)]}/events" for n in range(args.idle)]
        opened = time.perf_counter()
        streams = await open_streams(port, paths)
        open_s = time.perf_counter() - opened
        await asyncio.sleep(1.0)  # backlogs sent: now they are idle
        loaded = await health(client, args.health)
        ok = sum(s.status == 200 for s in streams)
        for stream in streams:
            stream.close()
    return {"baseline": baseline, "loaded": loaded, "ok": ok, "open_s": open_s}


async def live_phase(url: str, port: int, folder: Path, args: Any) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        await asyncio.sleep(1.0)  # the idle streams' slots are given back
        run_id = await start(client, "live")
        path = f"/runs/{run_id}/events"
        streams = await open_streams(port, [path] * args.live)
        (folder / "release").write_text("go")
        await asyncio.wait_for(
            asyncio.gather(*(s.ended.wait() for s in streams)), timeout=args.deadline
        )
        replay = (await open_streams(port, [path]))[0]
        await asyncio.wait_for(replay.ended.wait(), timeout=60)
    expected = replay.messages()
    got = [s.messages() for s in streams]
    for stream in (*streams, replay):
        stream.close()
    identical = sum(messages == expected for messages in got)
    ids = [m[0] for m in expected if m[0] is not None]
    complete = ids == list(range(1, len(ids) + 1)) and expected[-1][1] == "end"
    return {"identical": identical, "events": len(ids), "complete": complete}


async def drive(url: str, folder: Path, args: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    port = int(url.rsplit(":", 1)[1])
    idle = await idle_phase(url, port, args)
    live = await live_phase(url, port, folder, args)
    return idle, live


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=int, default=2000, help="idle streams to hold open")
    parser.add_argument("--paused-runs", type=int, default=20, help="paused runs they follow")
    parser.add_argument("--live", type=int, default=500, help="streams on the live run")
    parser.add_argument("--health", type=int, default=300, help="/health requests timed")
    parser.add_argument("--db", help="a store URL (default: SQLite in a temporary folder)")
    parser.add_argument("--deadline", type=float, default=600)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = serve(Path(tmp), TOOLS, MODEL, db=args.db)
        try:
            idle, live = asyncio.run(drive(url, Path(tmp), args))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    report(args, idle, live)
    if idle["ok"] < args.idle or live["identical"] < args.live or not live["complete"]:
        raise SystemExit("FAILED: a stream was refused, or one missed events (see the table)")


def report(args: Any, idle: dict[str, Any], live: dict[str, Any]) -> None:
    store = "PostgreSQL" if args.db and args.db.startswith("postgres") else "SQLite"
    print(f"event streams on `taskdecomp serve`, {store}, 127.0.0.1, {os.cpu_count()} cores\n")
    print("| measure | value | target |")
    print("|---|---|---|")
    for name, times in (
        ("no stream open", idle["baseline"]),
        ("idle streams open", idle["loaded"]),
    ):
        p50, p99 = percentile(times, 0.5), percentile(times, 0.99)
        target = "p99 <= 50 ms" if times is idle["loaded"] else ""
        print(f"| `/health` p50 / p99, {name} | {p50:.1f} / {p99:.1f} ms | {target} |")
    print(
        f"| idle streams open (200) | {idle['ok']} of {args.idle} on {args.paused_runs} paused "
        f"runs, opened in {idle['open_s']:.1f} s | {args.idle} |"
    )
    same = "yes" if live["identical"] == args.live and live["complete"] else "no"
    print(
        f"| streams on one live run with the identical, complete sequence | {same}: "
        f"{live['identical']} of {args.live}, {live['events']} events each + `end` | all |"
    )


if __name__ == "__main__":
    main()
