"""Reads over real HTTP: the run and plan lists page in SQL, reads leave the loop free, bad
input is a 422 or a 404 (never a 500 or a 503), on a SQLite file and on PostgreSQL."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from taskdecomp.run import RunId
from taskdecomp.server import ServerConfig
from taskdecomp.store import NewRun, bulk, open_store, rows, schema
from tests.server.support import Served
from tests.store.conftest import pg_url  # noqa: F401  (a fixture, used by name)

STATUSES = ("ok", "stopped", "paused", "queued", "live", "dead", "released")
"""How the seeded runs are stored: ``live``, ``dead`` and ``released`` are stored running
with a lease that holds, one that expired, and none."""
SHOWN = {"live": "running", "dead": "interrupted", "released": "interrupted"}
"""The API's status of those three."""


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, config: ServerConfig) -> ServerConfig:
    """The service's configuration, on each store in turn."""
    if request.param == "sqlite":
        return config
    url = request.getfixturevalue("pg_url")
    return dataclasses.replace(config, store_url=url)


@pytest.fixture
def server(backend: ServerConfig) -> Iterator[Served]:
    with Served(backend) as served:
        yield served


def seed(url: str, count: int) -> list[dict[str, Any]]:
    """Store ``count`` runs in one statement, three to a start time; return them newest first."""
    now = time.time()
    made = []
    for n in range(count):
        run_id = f"r{n:05d}"
        row = rows.new_run(
            NewRun(run_id=RunId(run_id), goal=f"goal {n}", model=None, tools=None, config={}),
            now=now - 10_000 + n // 3,
        )
        kind = STATUSES[n % len(STATUSES)]
        stored = "running" if kind in ("live", "dead", "released") else kind
        row["status"] = stored
        if stored in ("ok", "stopped"):
            row["stop_reason"] = "success" if stored == "ok" else "max_tool_calls"
            row["finished_at"] = row["started_at"] + 1
        if kind in ("live", "dead"):
            row["lease_owner"] = "elsewhere"
            row["lease_expires_at"] = now + (3600 if kind == "live" else -3600)
        made.append(
            row
            | {
                "shown": {"live": "running", "dead": "interrupted", "released": "interrupted"}.get(
                    kind, stored
                )
            }
        )
    store = open_store(url)
    with store.write() as conn:
        bulk.insert_rows(conn, schema.runs, [_columns(row) for row in made])
    store.close()
    made.sort(key=lambda row: (row["started_at"], row["id"]), reverse=True)
    return made


def _columns(row: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in row.items() if name != "shown"}


def pages(client: Any, path: str, **params: Any) -> list[dict[str, Any]]:
    """Every page of a list, following next_cursor."""
    found = []
    while True:
        response = client.get(path, params=params)
        assert response.status_code == 200, response.text
        found.append(response.json())
        cursor = found[-1]["next_cursor"]
        if cursor is None:
            return found
        params["cursor"] = cursor


def test_paging_returns_every_run_once_in_order(server: Served) -> None:
    made = seed(server.config.store_url, 1_050)
    with server.client() as client:
        got = pages(client, "/runs", limit=97)
    assert [len(page["runs"]) for page in got] == [97] * 10 + [80]
    assert all(page["limit"] == 97 and "total" not in page for page in got)
    listed = [run for page in got for run in page["runs"]]
    assert [run["run_id"] for run in listed] == [row["id"] for row in made]
    first, row = listed[0], made[0]
    assert first == {
        "run_id": row["id"],
        "goal": row["goal"],
        "status": row["shown"],
        "stored_status": row["status"],
        "stop_reason": row["stop_reason"],
        "started_at": row["started_at"],
        "finished_at": row["finished_at"],
        "seconds": None if row["finished_at"] is None else row["finished_at"] - row["started_at"],
    }


@pytest.mark.parametrize("status", ["running", "interrupted", "queued", "paused", "ok", "stopped"])
def test_the_status_filter_pages_in_sql(server: Served, status: str) -> None:
    made = seed(server.config.store_url, 700)
    with server.client() as client:
        got = pages(client, "/runs", status=status, limit=30)
    listed = [run for page in got for run in page["runs"]]
    assert [run["run_id"] for run in listed] == [
        row["id"] for row in made if row["shown"] == status
    ]
    assert {run["status"] for run in listed} == {status}


def test_plans_page_by_id_newest_first(served: Served) -> None:
    with served.client() as client:
        made = [
            client.post("/plans", json={"title": f"plan {n}", "auto_decompose": False}).json()["id"]
            for n in range(7)
        ]
        got = pages(client, "/plans", limit=3)
    assert [[plan["id"] for plan in page["plans"]] for page in got] == [
        made[6:3:-1],
        made[3:0:-1],
        made[:1],
    ]
    assert got[0]["plans"][0] == {
        "id": made[6],
        "title": "plan 6",
        "nodes": 1,
        "decomposing": False,
    }


# -- the event loop stays free while the store is read -----------------------------------------


@contextlib.contextmanager
def held(fragment: str) -> Iterator[tuple[threading.Event, threading.Event]]:
    """Hold the first statement holding ``fragment`` in the database driver until released:
    (set once it is held, set it to let it go)."""
    entered, release = threading.Event(), threading.Event()

    def hold(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if fragment in " ".join(statement.split()) and not entered.is_set():
            entered.set()
            release.wait(60)

    event.listen(Engine, "before_cursor_execute", hold)
    try:
        yield entered, release
    finally:
        release.set()
        event.remove(Engine, "before_cursor_execute", hold)


HELD_READS = {
    "/runs": "ORDER BY runs.started_at DESC",
    "/runs/{run}": "FROM attempts",
    "/plans": "ORDER BY plan_trees.id DESC",
    "/plans/{plan}/tree": "ORDER BY plan_nodes.id",
}
"""Each read route, and a statement of its read to hold in the database driver."""


@pytest.mark.parametrize("route", sorted(HELD_READS))
def test_health_answers_while_a_read_is_held(served: Served, route: str) -> None:
    seed(served.config.store_url, 500)
    with served.client() as client:
        plan = client.post("/plans", json={"title": "p", "auto_decompose": False}).json()["id"]
    path = route.format(run="r00042", plan=plan)
    with (
        held(HELD_READS[route]) as (entered, release),
        served.client() as reader,
        served.client() as prober,
        ThreadPoolExecutor(1) as pool,
    ):
        read = pool.submit(reader.get, path, timeout=120)
        assert entered.wait(30), "the read never reached the store"
        health = prober.get("/health", timeout=20)
        assert health.status_code == 200 and health.json() == {"ok": True}
        assert not read.done(), "the read ended before it was let go"
        release.set()
        assert read.result(timeout=120).status_code == 200


HELD_ACTIONS = {
    "/runs/r00042/cancel": "FROM runs",
    "/runs/r00042/approve": "FROM runs",
    "/runs/r00042/resume": "FROM runs",
    "/runs/r00042/reject": "FROM runs",
    "/plans/{plan}/decompose": "FROM plan_nodes",
}
"""Each action route, and a statement of its first store read to hold in the driver."""


@pytest.mark.parametrize("route", sorted(HELD_ACTIONS))
def test_health_answers_while_an_actions_read_is_held(served: Served, route: str) -> None:
    seed(served.config.store_url, 100)
    with served.client() as client:
        plan = client.post("/plans", json={"title": "p", "auto_decompose": False}).json()["id"]
    path = route.format(plan=plan)
    with (
        held(HELD_ACTIONS[route]) as (entered, release),
        served.client() as actor,
        served.client() as prober,
        ThreadPoolExecutor(1) as pool,
    ):
        body = {"reason": "no"} if path.endswith("/reject") else {}
        acted = pool.submit(actor.post, path, json=body, timeout=120)
        assert entered.wait(30), "the action never reached the store"
        health = prober.get("/health", timeout=20)
        assert health.status_code == 200 and health.json() == {"ok": True}
        assert not acted.done(), "the action ended before its read was let go"
        release.set()
        assert acted.result(timeout=120).status_code < 500


# -- bad input ---------------------------------------------------------------------------------


def problem(response: Any, status: int, *words: str) -> dict[str, Any]:
    assert response.status_code == status, (response.request.url, response.text)
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["status"] == status and "Traceback" not in response.text
    for word in words:
        assert word in body["detail"], body
    return body


BUDGET_FIELDS = (
    "max_plan_steps",
    "max_execute_steps",
    "max_tool_calls",
    "max_seconds",
    "max_llm_calls",
    "max_tokens",
    "max_cost_usd",
    "max_parallel",
)
DECOMP_FIELDS = (
    "max_depth",
    "max_children",
    "total_node_budget",
    "retry_limit",
    "concurrency",
    "max_seconds",
)


def test_null_limits_are_refused_with_422(served: Served) -> None:
    with served.client() as client:
        for name in BUDGET_FIELDS:
            body = {"goal": "a dag run", "toolset": "demo", "budget": {name: None}}
            problem(client.post("/runs", json=body), 422, f"budget.{name}")
        for name in DECOMP_FIELDS:
            body = {"title": "T", "auto_decompose": False, "options": {name: None}}
            problem(client.post("/plans", json=body), 422, f"options.{name}")
        plan = client.post("/plans", json={"title": "T", "auto_decompose": False}).json()
        node = plan["nodes"][0]["id"]
        decompose = f"/plans/{plan['id']}/nodes/{node}/decompose"
        problem(client.post(decompose, json={"options": {"max_depth": None}}), 422, "max_depth")
        assert client.get("/runs").json()["runs"] == []  # nothing refused was stored
        kept = client.post("/runs", json={"goal": "a dag run", "toolset": "demo", "budget": {}})
        assert kept.status_code == 202, kept.text


def test_plan_and_node_ids_beyond_the_store_are_404(server: Served) -> None:
    with server.client() as client:
        plan = client.post("/plans", json={"title": "T", "auto_decompose": False}).json()["id"]
        for given in (2**31, 2**63 - 1, 2**63, 10**20, 0, -1):
            for method, path in (
                ("GET", f"/plans/{given}/tree"),
                ("GET", f"/plans/{given}/events"),
                ("POST", f"/plans/{given}/decompose"),
                ("POST", f"/plans/{given}/nodes/1/decompose"),
                ("POST", f"/plans/{plan}/nodes/{given}/decompose"),
            ):
                problem(client.request(method, path), 404, str(given))


RUN_IDS = ("x" * 300, "\x00nul", "é ü", "a b", "..", "%", "'; DROP TABLE runs; --", "\ud800")


def test_a_run_id_of_any_shape_is_404(server: Served) -> None:
    from urllib.parse import quote

    with server.client() as client:
        for run_id in RUN_IDS:
            quoted = quote(run_id.encode("utf-8", "surrogatepass"), safe="").replace(".", "%2E")
            for method, path, body in (
                ("GET", f"/runs/{quoted}", None),
                ("POST", f"/runs/{quoted}/resume", None),
                ("POST", f"/runs/{quoted}/cancel", None),
                ("POST", f"/runs/{quoted}/approve", None),
                ("POST", f"/runs/{quoted}/reject", {"reason": "no"}),
                ("GET", f"/runs/{quoted}/events", None),
            ):
                problem(client.request(method, path, json=body), 404, "no run")


def cursor(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def test_bad_limits_cursors_and_parameters_are_422(served: Served) -> None:
    seed(served.config.store_url, 5)
    with served.client() as client:
        run_cursor = client.get("/runs", params={"limit": 2}).json()["next_cursor"]
        client.post("/plans", json={"title": "a", "auto_decompose": False})
        client.post("/plans", json={"title": "b", "auto_decompose": False})
        plan_cursor = client.get("/plans", params={"limit": 1}).json()["next_cursor"]
        assert run_cursor and plan_cursor
        for path in ("/runs", "/plans"):
            for limit in ("0", "-1", "501", "x", "1.5", ""):
                problem(client.get(path, params={"limit": limit}), 422, "query.limit")
            for bad in (
                "",
                "!!!",
                "bm90IGpzb24",  # "not json"
                cursor({"r": 1}),
                cursor(["r", "1", "r1"]),
                cursor(["r", 1.0]),
                cursor(["p", True]),
                cursor(["p", 0]),
                cursor(["p", 2**63]),
                cursor(["r", 1e400, "r1"]),
                cursor(["r", 1.0, "a\u0000b"]),  # PostgreSQL's text cannot hold a NUL
                cursor(["r", 1.0, "a\nb"]),
                base64.urlsafe_b64encode(b'["r", NaN, "r1"]').decode(),
                "é",
                "x" * 1001,
                plan_cursor if path == "/runs" else run_cursor,
            ):
                problem(client.get(path, params={"cursor": bad}), 422, "cursor")
            problem(client.get(path, params={"offset": 10}), 422, "offset")
        problem(client.get("/runs", params={"status": "nonsense"}), 422, "status")
        problem(client.get("/runs", params={"status": ""}), 422, "status")
        assert client.get("/runs", params={"cursor": run_cursor}).status_code == 200
        assert client.get("/plans", params={"cursor": plan_cursor}).status_code == 200
