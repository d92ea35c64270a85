"""Run event streams that share one reader per run: fan-out, cursors, other writers, caps.

On SQLite and on PostgreSQL: many streams of one live run get the same complete sequence
from a single reader; a stream that joins late or reconnects gets exactly the rest; events
a CLI run stores in another process reach the streams (PostgreSQL through NOTIFY, SQLite
through the server's poll); open streams are capped; a client that stops reading is
dropped and loses nothing when it reconnects; ``end`` reports the run's last event.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import psycopg
import pytest

from taskdecomp.errors import ConfigError
from taskdecomp.run import RunId, RunResult
from taskdecomp.server import ServerConfig
from taskdecomp.store import EventRecord, NewRun, open_store
from tests.clitools import CHILD
from tests.server.support import Served, ServeProcess, sse_events, sse_iter, wait_for

PG_URL = os.environ.get("TEST_PG_URL", "postgresql://postgres@127.0.0.1/test")


@pytest.fixture(params=["sqlite", "postgresql"])
def backend_config(request: pytest.FixtureRequest, config: ServerConfig) -> Iterator[ServerConfig]:
    """The test's server config on a SQLite file, or on a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield config
        return
    schema = f"td_{uuid.uuid4().hex[:16]}"
    try:
        admin = psycopg.connect(PG_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL at {PG_URL!r} is not reachable: {exc}")
        pytest.skip(f"PostgreSQL at {PG_URL!r} is not reachable: {exc}")
    with admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    separator = "&" if "?" in PG_URL else "?"
    url = f"{PG_URL}{separator}options={quote(f'-csearch_path={schema}')}"
    yield dataclasses.replace(config, store_url=url)
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA {schema} CASCADE")


def start(client: httpx.Client, goal: str) -> str:
    response = client.post("/runs", json={"goal": goal, "toolset": "demo"})
    assert response.status_code == 202, response.text
    return str(response.json()["run_id"])


@contextlib.contextmanager
def releasing(toolset: Path) -> Iterator[None]:
    """Let blocked runs go on at the end, whatever happened (the test may have failed)."""
    try:
        yield
    finally:
        toolset.with_name("release").write_text("go")


def read_all(server: Served, path: str, out: list[list[dict[str, Any]]], **kw: Any) -> None:
    with server.client() as own:
        out.append(sse_events(own, path, **kw))


def test_many_streams_of_one_live_run_get_the_same_complete_sequence_from_one_reader(
    backend_config: ServerConfig, toolset: Path
) -> None:
    got: list[list[dict[str, Any]]] = []
    with Served(backend_config) as server, releasing(toolset), server.client() as client:
        run_id = start(client, "block")  # waits in its second step for the release file
        readers = [
            threading.Thread(
                daemon=True, target=read_all, args=(server, f"/runs/{run_id}/events", got)
            )
            for _ in range(40)
        ]
        for reader in readers:
            reader.start()
        wait_for(lambda: server.service.streams.slots.open == 40)
        feeds = server.service.streams.feeds
        toolset.with_name("release").write_text("go")  # the rest arrives live
        for reader in readers:
            reader.join(timeout=120)
        replay = sse_events(client, f"/runs/{run_id}/events")
    assert feeds == 1  # forty streams, one reader of the store
    assert len(got) == 40
    assert all(messages == replay for messages in got)
    events, end = replay[:-1], replay[-1]
    assert [m["id"] for m in events] == list(range(1, len(events) + 1))
    finished = [m["data"]["data"]["step_id"] for m in events if m["event"] == "StepFinished"]
    assert finished == ["first", "wait", "last"] and events[-1]["event"] == "RunStopped"
    assert end == {"event": "end", "data": {"status": "ok", "last_seq": len(events)}}


def test_a_late_stream_and_a_reconnect_get_exactly_the_rest(served: Served, toolset: Path) -> None:
    with releasing(toolset), served.client() as client:
        run_id = start(client, "block")  # waits in its second step for the release file
        first: list[dict[str, Any]] = []
        opened = threading.Event()

        def follow() -> None:
            with served.client() as own:
                for message in sse_iter(own, f"/runs/{run_id}/events"):
                    first.append(message)
                    opened.set()
                    if message["event"] == "end":
                        return

        reader = threading.Thread(daemon=True, target=follow)
        reader.start()
        wait_for(lambda: any(m["event"] == "StepFinished" for m in first))
        cut = len(first)
        late: list[list[dict[str, Any]]] = []
        again: list[list[dict[str, Any]]] = []
        joiners = [
            threading.Thread(
                daemon=True, target=read_all, args=(served, f"/runs/{run_id}/events", late)
            ),
            threading.Thread(
                target=read_all,
                args=(served, f"/runs/{run_id}/events", again),
                kwargs={"last_event_id": cut},
            ),
        ]
        for joiner in joiners:
            joiner.start()
        wait_for(lambda: served.service.streams.slots.open == 3)
        feeds = served.service.streams.feeds
        toolset.with_name("release").write_text("go")
        for thread in (reader, *joiners):
            thread.join(timeout=60)
    assert feeds == 1
    assert first[-1]["event"] == "end" and first[-2]["event"] == "RunStopped"
    assert late == [first]
    assert again == [first[cut:]]
    assert [m["id"] for m in first[:-1]] == list(range(1, len(first)))


def test_events_a_cli_run_stores_in_another_process_reach_the_streams(
    backend_config: ServerConfig, toolset: Path
) -> None:
    with Served(backend_config) as server, releasing(toolset), server.client() as client:
        store_url = backend_config.store_url
        cli = subprocess.Popen(
            [*CHILD, "run", "block", "--tools", str(toolset), "--model",
             backend_config.models[0], "--db", store_url, "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
        )  # fmt: skip
        try:
            run_id = wait_for(
                lambda: (
                    (runs := client.get("/runs").json()["runs"])
                    and client.get(f"/runs/{runs[0]['run_id']}").json()["history"]
                    and runs[0]["run_id"]
                ),
                timeout=60,
            )
            path = f"/runs/{run_id}/events"
            before = sse_events(client, path, until="StepFinished")
            got: list[list[dict[str, Any]]] = []
            ahead: list[list[dict[str, Any]]] = []
            readers = [
                threading.Thread(daemon=True, target=read_all, args=(server, path, got)),
                threading.Thread(
                    target=read_all, args=(server, path, ahead), kwargs={"last_event_id": 10_000}
                ),
            ]
            for reader in readers:
                reader.start()
            wait_for(lambda: server.service.streams.slots.open == 2)
            toolset.with_name("release").write_text("go")  # the CLI run goes on and ends
            _out, err = cli.communicate(timeout=60)
            for reader in readers:
                reader.join(timeout=60)
        finally:
            if cli.poll() is None:
                cli.kill()
        reader = open_store(store_url)
        stored = len(reader.load_events(RunId(run_id)))
        reader.close()
    assert cli.returncode == 0, err
    (messages,) = got
    assert messages[: len(before)] == before
    assert [m["id"] for m in messages[:-1]] == list(range(1, stored + 1))
    assert messages[-2]["event"] == "RunStopped"
    end = {"event": "end", "data": {"status": "ok", "last_seq": stored}}
    assert messages[-1] == end
    assert ahead == [[end]]  # a cursor past the end: nothing, then the run's own last_seq


def test_the_caps_on_open_streams_answer_429_with_retry_after(
    config: ServerConfig, toolset: Path
) -> None:
    capped = dataclasses.replace(config, max_streams=3, max_streams_per_client=2)
    other = httpx.HTTPTransport(local_address="127.0.0.2")
    with Served(capped) as server, releasing(toolset), server.client() as client:
        run_id = start(client, "block")
        path = f"/runs/{run_id}/events"
        with (
            server.client() as a1, server.client() as a2, server.client(transport=other) as b1,
            a1.stream("GET", path) as first, a2.stream("GET", path) as second,
        ):  # fmt: skip
            assert first.status_code == second.status_code == 200
            own = client.get(path)  # a third of 127.0.0.1
            with b1.stream("GET", path) as third:  # the first of 127.0.0.2: the third in all
                assert third.status_code == 200
                with httpx.Client(base_url=server.url, transport=httpx.HTTPTransport(
                    local_address="127.0.0.2"
                )) as b2:  # fmt: skip
                    over = b2.get(path)
                    plan = client.post("/plans", json={"title": "T", "instruction": "i"})
                    plan_stream = b2.get(f"/plans/{plan.json()['id']}/events")
        toolset.with_name("release").write_text("go")
        wait_for(lambda: server.service.streams.slots.open == 0)  # closed: slots given back
        after = sse_events(client, path)
    for refused, words in ((own, "per client"), (over, "3 event streams open"), (plan_stream, "")):
        assert refused.status_code == 429, refused.text
        assert refused.headers["content-type"] == "application/problem+json"
        assert int(refused.headers["retry-after"]) > 0
        assert words in refused.json()["detail"]
    assert after[0]["event"] == "RunStarted" and after[-1]["event"] == "end"


def test_a_client_that_stops_reading_is_dropped_and_loses_nothing(
    config: ServerConfig, tmp_path: Path
) -> None:
    small = dataclasses.replace(config, stream_buffer=5, max_streams_per_client=1)
    store = open_store(small.store_url)
    run_id = RunId("slow-reader")
    store.create_run(NewRun(run_id=run_id, goal="g", model=None, tools=None, config={}))
    big = "x" * 64_000
    with Served(small) as server, server.client() as client:
        port = int(server.url.rsplit(":", 1)[1])
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port))
        sock.sendall(
            f"GET /runs/{run_id}/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        )
        wait_for(lambda: server.service.streams.slots.open == 1)
        assert client.get(f"/runs/{run_id}/events").status_code == 429  # the reader's slot
        for segment in range(2, 12):  # 200 events of 64 kB: more than the sockets hold
            records = [EventRecord(kind="Big", at=float(n), data={"n": n, "pad": big})
                       for n in range(20)]  # fmt: skip
            store.reopen_run(run_id, segment=segment, events=records)
        wait_for(lambda: server.service.streams.slots.open == 0, timeout=60)
        assert client.get("/health").json() == {"ok": True}
        received = _drain(sock)
        result = RunResult(run_id=run_id, status="ok", stop_reason="success")
        store.finish_run(run_id, result, events=[EventRecord(kind="RunStopped", at=1.0, data={})])
        ids = [int(line[4:]) for line in received.split("\n") if line.startswith("id: ")]
        last = ids[-1] if ids else 0
        rest = sse_events(client, f"/runs/{run_id}/events", last_event_id=last)
    store.close()
    assert "event: end" not in received
    assert ids == list(range(1, len(ids) + 1)) and len(ids) < 200
    assert [m["id"] for m in rest[:-1]] == list(range(last + 1, 202))
    assert rest[-1] == {"event": "end", "data": {"status": "ok", "last_seq": 201}}


def _drain(sock: socket.socket) -> str:
    """What the server sent until it closed the connection (complete messages only)."""
    sock.settimeout(60)
    chunks = []
    while chunk := sock.recv(1 << 20):
        chunks.append(chunk)
    sock.close()
    text = b"".join(chunks).decode("ascii", "replace").replace("\r\n", "\n")
    return text[: text.rfind("\n\n") + 2]


def test_end_reports_the_runs_last_event_and_cursors_beyond_int64_are_refused(
    served: Served,
) -> None:
    with served.client() as client:
        run_id = start(client, "dag")
        everything = sse_events(client, f"/runs/{run_id}/events")
        last = len(everything) - 1
        top = 2**63 - 1
        at_top = sse_events(client, f"/runs/{run_id}/events?after={top}")
        ahead = sse_events(client, f"/runs/{run_id}/events", last_event_id=last + 5)
        over = [
            client.get(f"/runs/{run_id}/events?after={top + 1}"),
            client.get(f"/runs/{run_id}/events", headers={"Last-Event-ID": str(top + 1)}),
            client.get(f"/runs/{run_id}/events", headers={"Last-Event-ID": "9" * 40}),
            client.get(f"/plans/1/events?after={top + 1}"),
        ]
    end = {"event": "end", "data": {"status": "ok", "last_seq": last}}
    assert everything[-1] == end
    assert at_top == [end] and ahead == [end]
    for response in over:
        assert response.status_code == 422, response.text
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["detail"]


def test_serve_takes_the_caps_from_its_options(config: ServerConfig, toolset: Path) -> None:
    server = ServeProcess([
        "--tools", f"demo={toolset}", "--model", config.models[0], "--db", config.store_url,
        "--max-streams", "10", "--max-streams-per-client", "1",
    ]).start()  # fmt: skip
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            run_id = start(client, "approval")
            wait_for(lambda: client.get(f"/runs/{run_id}").json()["status"] == "paused")
            with (
                httpx.Client(base_url=server.url, timeout=30) as own,
                own.stream("GET", f"/runs/{run_id}/events") as first,
            ):
                second = client.get(f"/runs/{run_id}/events")
                assert first.status_code == 200
    finally:
        server.stop()
    assert second.status_code == 429 and second.headers["retry-after"] == "5"
    assert "1 event streams open, the limit per client" in second.json()["detail"]
    with pytest.raises(ConfigError, match="max_streams must be at least 1"):
        dataclasses.replace(config, max_streams=0)


def test_serve_keeps_its_stream_cap_within_the_open_files_it_may_have(
    config: ServerConfig, toolset: Path
) -> None:
    """Soft limit 200, hard 300: serve raises it to 300 and caps streams at 300 - 128."""
    import resource

    from taskdecomp.server.descriptors import RESERVED
    from tests.server.support import free_port, wait_up

    port = free_port()
    argv = [
        *CHILD, "serve", "--port", str(port), "--log-level", "warning",
        "--tools", f"demo={toolset}", "--model", config.models[0], "--db", config.store_url,
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (200, 300)),
    )
    socks: list[socket.socket] = []
    try:
        url = f"http://127.0.0.1:{port}"
        wait_up(url)
        with httpx.Client(base_url=url, timeout=30) as client:
            run_id = start(client, "approval")
            wait_for(lambda: client.get(f"/runs/{run_id}").json()["status"] == "paused")
            statuses = []
            for _ in range(300 - RESERVED + 10):
                sock = socket.create_connection(("127.0.0.1", port))
                sock.sendall(
                    f"GET /runs/{run_id}/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
                )
                sock.settimeout(30)
                statuses.append(sock.recv(64).split(b" ")[1])
                socks.append(sock)
            assert client.get("/health").json() == {"ok": True}
    finally:
        for sock in socks:
            sock.close()
        proc.terminate()
        _out, err = proc.communicate(timeout=60)
    assert statuses.count(b"200") == 300 - RESERVED and statuses.count(b"429") == 10
    assert f"at most {300 - RESERVED} streams" in err and "Too many open files" not in err
