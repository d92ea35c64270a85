"""A real service for the tests: uvicorn on 127.0.0.1 (in a thread or a process), httpx."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from taskdecomp.server import ServerConfig, create_app, open_service
from tests.clitools import CHILD
from tests.listening import free_port

TOOLSET = '''
import os, time
from pathlib import Path
from taskdecomp import tool


def work(name: str, seconds: float = 0.0) -> dict:
    """Do some work for a while and say what was done."""
    time.sleep(seconds)
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


def step(step_id: str, tool: str, args: dict[str, Any], deps: list[str] | None = None) -> dict:
    entry: dict[str, Any] = {
        "id": step_id,
        "title": f"{tool} {step_id}",
        "tool": tool,
        "args": args,
    }
    if deps is not None:
        entry["depends_on"] = deps
    return entry


def dag_plan(seconds: float = 0.0) -> dict[str, Any]:
    """a and b in parallel, c after both, d after c."""
    return {
        "kind": "plan",
        "steps": [
            step("a", "work", {"name": "a", "seconds": seconds}, []),
            step("b", "work", {"name": "b", "seconds": seconds}, []),
            step("c", "work", {"name": "c", "seconds": seconds}, ["a", "b"]),
            step("d", "work", {"name": "d", "seconds": seconds}, ["c"]),
        ],
    }


def approval_plan() -> dict[str, Any]:
    return {
        "kind": "plan",
        "steps": [
            step("fetch", "work", {"name": "fetch"}),
            step("check", "work", {"name": "check"}),
            step("ship", "publish", {"key": "report"}),
        ],
    }


def blocking_plan() -> dict[str, Any]:
    return {
        "kind": "plan",
        "steps": [
            step("first", "work", {"name": "first"}),
            step("wait", "block", {"name": "wait"}),
            step("last", "work", {"name": "last"}),
        ],
    }


def tree_children(*names: str, leaf: bool = False) -> dict[str, Any]:
    return {
        "children": [{"name": name, "instruction": f"do {name}", "leaf": leaf} for name in names]
    }


def write_script(
    path: Path, *rules: tuple[str, Any], latency_ms: float = 0, default: Any = None
) -> str:
    body: dict[str, Any] = {
        "rules": [{"match": match, "response": response} for match, response in rules],
        "latency_ms": latency_ms,
    }
    if default is not None:
        body["default"] = default
    path.write_text(json.dumps(body))
    return f"scripted:{path}"


def run_model(tmp_path: Path, *, latency_ms: float = 0, seconds: float = 0.0) -> str:
    """A planner/combiner: goals with 'dag', 'approval' or 'block' get their plan."""
    return write_script(
        tmp_path / "model.json",
        ("task decomposition planner.*dag", dag_plan(seconds)),
        ("task decomposition planner.*approval", approval_plan()),
        ("task decomposition planner.*block", blocking_plan()),
        ("reporting assistant", "All steps are done."),
        latency_ms=latency_ms,
    )


def decomp_model(tmp_path: Path, *, latency_ms: float = 0) -> str:
    """A decomposer: the root 'Conference' gets 3 children, each of those 2 leaves."""
    name = '"target_task": \\{"id": \\d+, "name": '
    return write_script(
        tmp_path / "decomp.json",
        (name + '"Conference"', tree_children("Venue", "Speakers", "Sponsors")),
        (name + '"Venue"', tree_children("Shortlist", "Book", leaf=True)),
        (name + '"Speakers"', tree_children("Call for papers", "Programme", leaf=True)),
        (name + '"Sponsors"', {"error": "timeout"}),
        latency_ms=latency_ms,
        default={"children": []},
    )


@dataclass
class Served:
    """A service on 127.0.0.1 in a thread of this process."""

    config: ServerConfig
    url: str = ""
    server: uvicorn.Server | None = None
    thread: threading.Thread | None = None
    service: Any = None

    def __enter__(self) -> Served:
        port = free_port()
        self.config = dataclasses.replace(self.config, host="127.0.0.1", port=port)
        self.service = open_service(self.config)
        config = uvicorn.Config(
            create_app(self.service), host="127.0.0.1", port=port, log_level="warning"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{port}"
        wait_up(self.url, token=self.config.token)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.server is not None and self.thread is not None
        self.server.should_exit = True
        self.thread.join(timeout=20)

    def client(self, **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.config.token}"} if self.config.token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, **kwargs)


def wait_up(url: str, *, token: str | None = None, timeout: float = 30) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", headers=headers, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"the server at {url} did not come up in {timeout}s")


@dataclass
class ServeProcess:
    """``taskdecomp serve`` in a child process."""

    args: list[str]
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    port: int = 0
    proc: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, token: str | None = None, host: str = "127.0.0.1") -> ServeProcess:
        self.port = free_port()
        argv = [*CHILD, "serve", "--host", host, "--port", str(self.port)]
        self.proc = subprocess.Popen(
            [*argv, "--log-level", "warning", *self.args],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_up(self.url, token=token)
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 120) -> tuple[int, str]:
        """Send ``sig`` and wait for the process to end: its exit code and its output."""
        assert self.proc is not None
        self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out + err


def sse_events(
    client: httpx.Client,
    path: str,
    *,
    last_event_id: int | None = None,
    limit: int = 10_000,
    until: str = "end",
    timeout: float = 60,
) -> list[dict[str, Any]]:
    """Read an SSE stream: each message as {"id", "event", "data"}, up to ``until``."""
    messages: list[dict[str, Any]] = []
    for message in sse_iter(client, path, last_event_id=last_event_id, timeout=timeout):
        messages.append(message)
        if message["event"] == until or len(messages) >= limit:
            break
    return messages


def sse_iter(
    client: httpx.Client, path: str, *, last_event_id: int | None = None, timeout: float = 60
) -> Iterator[dict[str, Any]]:
    """The messages of an SSE stream as they arrive."""
    headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
    deadline = time.monotonic() + timeout
    with client.stream("GET", path, headers=headers, timeout=timeout) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for message in parse_sse(response.iter_lines()):
            yield message
            assert time.monotonic() < deadline, "the stream did not end in time"


def parse_sse(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    current: dict[str, Any] = {}
    for line in lines:
        if not line:
            if "event" in current:
                yield current
            current = {}
            continue
        if line.startswith(":"):
            continue
        key, _, value = line.partition(": ")
        if key == "id":
            current["id"] = int(value)
        elif key == "event":
            current["event"] = value
        elif key == "data":
            current["data"] = json.loads(value)


def wait_for(check: Any, *, timeout: float = 30, every: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(every)
