"""What the service benchmarks share: a server in a child process and a light client.

``bench/service.py``, ``service_reads.py``, ``service_streams.py`` and
``service_admission.py`` each start ``taskdecomp serve`` on a free loopback port with a
toolset and a scripted model written to a temporary folder (:func:`serve`), read its memory
from ``/proc`` (:func:`memory_kib`, :func:`rss_mib`), send raw HTTP/1.1 requests on
keep-alive connections (:class:`Keepalive`) and summarise latencies (:func:`percentile`).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

WORK_TOOLS = '''
def work(name: str) -> dict:
    """Do a small piece of work."""
    return {"done": name}
'''
"""A toolset of one quick tool, ``work``."""

DAG_PLAN = {
    "kind": "plan",
    "steps": [
        {"id": "a", "title": "A", "tool": "work", "args": {"name": "a"}, "depends_on": []},
        {"id": "b", "title": "B", "tool": "work", "args": {"name": "b"}, "depends_on": []},
        {"id": "c", "title": "C", "tool": "work", "args": {"name": "c"}, "depends_on": ["a", "b"]},
    ],
}
"""A 3-step DAG plan of ``work`` calls: two steps, then one after both."""

SERVE_CODE = "import sys; from taskdecomp.cli import main; main(sys.argv[1:])"
"""The child process's code: the CLI, given the rest of its command line."""


def dag_model(latency_ms: float) -> dict[str, Any]:
    """A scripted model that plans :data:`DAG_PLAN` and combines, after ``latency_ms``."""
    return {
        "rules": [
            {"match": "task decomposition planner", "response": DAG_PLAN},
            {"match": "reporting assistant", "response": "All done."},
        ],
        "latency_ms": latency_ms,
    }


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0 to 1) of ``values`` by nearest rank; NaN when there are none."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def memory_kib(pid: int) -> dict[str, int]:
    """Process ``pid``'s ``VmRSS`` and ``VmHWM`` (peak) in KiB, those that ``/proc`` shows."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0])
    return found


def rss_mib(pid: int) -> float:
    """Process ``pid``'s resident memory in MiB; NaN when ``/proc`` does not show it."""
    kib = memory_kib(pid).get("VmRSS")
    return float("nan") if kib is None else kib / 1024


def serve(
    folder: Path,
    tools: str,
    model: dict[str, Any],
    *,
    db: str | None = None,
    code: str = SERVE_CODE,
    extra: Sequence[str] = (),
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``taskdecomp serve`` in a child process; the process and its URL once it answers.

    Writes ``tools`` to ``folder/tools.py`` (the toolset ``bench``) and ``model`` to
    ``folder/model.json`` (the scripted model), and serves on a free loopback port with the
    store ``db`` (default: SQLite at ``folder/runs.db``), running ``code`` (default: the CLI)
    with ``extra`` after serve's arguments, without the caller's ``TASKDECOMP_*`` settings.
    Exits when ``GET /health`` has not answered 200 within 30 s.
    """
    (folder / "tools.py").write_text(tools)
    (folder / "model.json").write_text(json.dumps(model))
    port = free_port()
    argv = [
        sys.executable, "-c", code, "serve", "--port", str(port), "--log-level", "warning",
        "--tools", f"bench={folder / 'tools.py'}", "--model", f"scripted:{folder / 'model.json'}",
        "--db", db or str(folder / "runs.db"), *extra,
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKDECOMP_")}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the server did not come up in 30 s")


class Keepalive:
    """One keep-alive HTTP/1.1 connection over asyncio streams: raw requests, no parsing.

    A load generator light enough (tens of microseconds a request) that a hundred clients in
    one process measure the server, not themselves (httpx costs a few milliseconds of CPU a
    request). Answers must carry a ``Content-Length``.
    """

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def open(self) -> None:
        """Connect, unless connected."""
        if self._streams is None:
            self._streams = await asyncio.open_connection(self.host, self.port)

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        """The status and body of ``method path`` (``body``: JSON)."""
        await self.open()
        assert self._streams is not None
        reader, writer = self._streams
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
        if body:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        writer.write(head.encode() + b"\r\n" + body)
        lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        length = next(
            int(line.partition(":")[2])
            for line in lines
            if line.lower().startswith("content-length:")
        )
        return int(lines[0].split()[1]), await reader.readexactly(length)

    def close(self) -> None:
        """Close the connection, if it was opened."""
        if self._streams is not None:
            self._streams[1].close()
            self._streams = None
