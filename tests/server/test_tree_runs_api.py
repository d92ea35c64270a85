"""Runs of stored plan trees over real HTTP: the routes, the run's tree, its events, errors.

A plan is grown by the server's decomposer, then executed by the ``tree`` strategy through
``POST /plans/{id}/runs`` (or one node's subtree), with a scripted run model that answers
the executor, the decomposer and the roll-ups; on a SQLite file and on PostgreSQL.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from taskdecomp.server import ServerConfig
from taskdecomp.server.actions import catalog
from tests.server.support import Served, decomp_model, sse_events, wait_for, write_script
from tests.server.test_openapi_client import check, document, plain
from tests.server.tree_support import (
    ANSWER,
    RESULTS,
    SPONSORS,
    conference,
    ended,
    node_id,
    tree_model,
)
from tests.store.conftest import pg_url  # noqa: F401  (a fixture, used by name)


@pytest.fixture
def tree_config(config: ServerConfig, tmp_path: Path) -> ServerConfig:
    """The test service with the tree model first (the default) beside the usual one."""
    return dataclasses.replace(config, models=(tree_model(tmp_path / "tree.json"), *config.models))


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tree_config: ServerConfig) -> ServerConfig:
    if request.param == "sqlite":
        return tree_config
    return dataclasses.replace(tree_config, store_url=request.getfixturevalue("pg_url"))


@pytest.fixture
def server(backend: ServerConfig) -> Iterator[Served]:
    with Served(backend) as served:
        yield served


def by_name(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {node["name"]: node for node in view["tree"]["nodes"]}


def shown(client: httpx.Client, run_id: str) -> dict[str, dict[str, Any]]:
    """The run's nodes by name as ``GET /runs/{id}`` shows them; empty before it has a tree."""
    view = client.get(f"/runs/{run_id}").json()
    return by_name(view) if view["tree"] is not None else {}


def test_a_plan_is_executed_and_grows_where_a_task_asks_to_be_split(server: Served) -> None:
    with server.client() as client:
        tree = conference(client)
        plan_id = tree["id"]
        started = client.post(f"/plans/{plan_id}/runs", json={"toolset": "demo"})
        assert started.status_code == 202, started.text
        run = started.json()
        assert run["status"] == "queued" and run["goal"] == "Conference"
        assert run["config"]["strategy"] == "tree"
        assert run["config"]["tree"]["plan_id"] == plan_id
        assert run["config"]["tree"]["node_id"] is None
        assert run["config"]["tree"]["decompose"] == "as-needed"
        view = ended(client, run["run_id"])
        events = sse_events(client, f"/runs/{run['run_id']}/events")
        grown = client.get(f"/plans/{plan_id}/tree").json()

    assert view["status"] == "ok" and view["stop_reason"] == "success", view["message"]
    assert view["answer"] == ANSWER
    nodes = by_name(view)
    assert view["tree"]["plan_id"] == plan_id and view["tree"]["root"] is None
    assert {name: node["status"] for name, node in nodes.items()} == dict.fromkeys(
        ["Conference", "Venue", "Shortlist", "Book", "Speakers", "Call for papers",
         "Programme", "Sponsors", "Find sponsors", "Sign sponsors"], "ok",
    )  # fmt: skip
    for name, result in RESULTS.items():
        assert nodes[name]["result"] == result and nodes[name]["leaf"] is True
    assert nodes["Sponsors"]["leaf"] is False
    assert nodes["Sponsors"]["split"] == (
        "the executor asked to split the task: too many sponsors to sign at once"
    )
    assert nodes["Sponsors"]["result"] == "Sponsors: 3 signed of 4 found"
    assert [nodes[n]["depth"] for n in ("Conference", "Venue", "Book", "Find sponsors")] == [
        0, 1, 2, 2,
    ]  # fmt: skip
    # The split's children were written into the stored tree the user sees.
    sponsors = node_id(tree, "Sponsors")
    written = [n["name"] for n in grown["nodes"] if n["parent_id"] == sponsors]
    assert written == ["Find sponsors", "Sign sponsors"]
    assert len(grown["nodes"]) == len(tree["nodes"]) + 2
    # The leaf that called a tool did so through the gateway, traced like a step.
    assert [(entry["tool"], entry["ok"]) for entry in view["trace"]] == [("work", True)]

    kinds = Counter(message["event"] for message in events)
    assert kinds["NodeFinished"] == 10 and kinds["NodeDecomposed"] == 1
    assert events[-1]["event"] == "end"
    starts = Counter(m["data"]["data"]["name"] for m in events if m["event"] == "NodeStarted")
    assert starts == Counter({**dict.fromkeys(nodes, 1), "Sponsors": 2})  # a leaf, then split
    started_nodes = {m["data"]["data"]["node_id"]: m["data"]["data"] for m in events
                     if m["event"] == "NodeStarted"}  # fmt: skip
    book = node_id(tree, "Book")
    assert started_nodes[book] == {
        "node_id": book, "name": "Book", "parent_id": node_id(tree, "Venue"), "leaf": True,
    }  # fmt: skip
    finished = {m["data"]["data"]["node_id"]: m["data"]["data"] for m in events
                if m["event"] == "NodeFinished"}  # fmt: skip
    assert finished[book] == {
        "node_id": book, "status": "ok", "result": RESULTS["Book"], "error": None,
    }  # fmt: skip
    (split,) = [m["data"]["data"] for m in events if m["event"] == "NodeDecomposed"]
    assert split["node_id"] == sponsors
    assert split["children"] == [nodes["Find sponsors"]["id"], nodes["Sign sponsors"]["id"]]
    assert split["reason"].endswith("too many sponsors to sign at once")
    seqs = [m["id"] for m in events if "id" in m]
    assert seqs == sorted(seqs) and len(seqs) == len(set(seqs))


def test_one_node_runs_its_subtree_as_it_is(server: Served) -> None:
    with server.client() as client:
        tree = conference(client)
        venue = node_id(tree, "Venue")
        body = {
            "toolset": "demo",
            "goal": "Book a venue in Berlin",
            "options": {"decompose": "none"},
        }
        started = client.post(f"/plans/{tree['id']}/nodes/{venue}/runs", json=body)
        assert started.status_code == 202, started.text
        run = started.json()
        assert run["goal"] == "Book a venue in Berlin"
        assert run["config"]["tree"] | {"plan_id": 0} == run["config"]["tree"] | {
            "plan_id": 0, "node_id": venue, "decompose": "none",
        }  # fmt: skip
        view = ended(client, run["run_id"])
        plain_goal = client.post(
            f"/plans/{tree['id']}/nodes/{venue}/runs", json={"toolset": "demo"}
        )
        assert plain_goal.status_code == 202 and plain_goal.json()["goal"] == "Venue"
        ended(client, plain_goal.json()["run_id"])
        after = client.get(f"/plans/{tree['id']}/tree").json()
        options = {"plan_id": tree["id"], "node_id": venue, "decompose": "none"}
        body = {"goal": "Venue", "toolset": "demo", "strategy": "tree", "options": options}
        by_post = ended(client, client.post("/runs", json=body).json()["run_id"])
        body = {"goal": "Sponsors", "toolset": "demo", "strategy": "tree"}
        from_goal = ended(client, client.post("/runs", json=body).json()["run_id"])
        plans = client.get("/plans").json()["plans"]
    assert view["status"] == "ok", view["message"]
    assert view["answer"] == "Venue: Hall 7, booked for 12 May"
    assert view["tree"]["root"] == venue
    assert [(n["name"], n["depth"], n["status"]) for n in view["tree"]["nodes"]] == [
        ("Venue", 0, "ok"), ("Shortlist", 1, "ok"), ("Book", 1, "ok"),
    ]  # fmt: skip
    assert len(after["nodes"]) == len(tree["nodes"])  # executed as it is: nothing added
    # POST /runs with the tree strategy: a stored tree named in the options, or a new one.
    assert by_post["status"] == "ok" and by_post["tree"]["root"] == venue
    assert by_post["answer"] == view["answer"]
    assert from_goal["status"] == "ok" and from_goal["answer"] == "Sponsors: 3 signed of 4 found"
    assert from_goal["tree"]["plan_id"] == plans[0]["id"] != tree["id"]
    assert [n["name"] for n in from_goal["tree"]["nodes"]] == ["Sponsors", *SPONSORS]


def test_bad_requests_are_problems_and_store_nothing(
    tree_config: ServerConfig, tmp_path: Path
) -> None:
    slow = dataclasses.replace(tree_config, decomp_model=decomp_model(tmp_path, latency_ms=3000))
    with Served(slow) as server, server.client() as client:
        plan_id = client.post("/plans", json={"title": "Conference"}).json()["id"]
        busy = client.post(f"/plans/{plan_id}/runs", json={"toolset": "demo"})
        other = client.post("/plans", json={"title": "Other", "auto_decompose": False}).json()
        foreign = other["nodes"][0]["id"]
        run = f"/plans/{other['id']}/runs"
        demo = {"toolset": "demo"}
        cases = [
            (busy, 409, f"plan {plan_id} is being decomposed"),
            (client.post("/plans/999/runs", json=demo), 404, "no plan tree has id 999"),
            (client.post(f"/plans/{plan_id}/nodes/999/runs", json=demo), 404,
             f"plan {plan_id} has no node 999"),
            (client.post(f"/plans/{plan_id}/nodes/{foreign}/runs", json=demo), 404,
             f"plan {plan_id} has no node {foreign}"),
            (client.post("/plans/abc/runs", json=demo), 422, "plan_id"),
            (client.post(run), 422, "body"),
            (client.post(run, json={}), 422, "body.toolset"),
            (client.post(run, json={"toolset": "nope"}), 422, "unknown toolset 'nope'"),
            (client.post(run, json=demo | {"model": "x"}), 422, "model 'x' is not offered"),
            (client.post(run, json=demo | {"allow": ["rm"]}), 422, "tool 'rm' is not in"),
            (client.post(run, json=demo | {"options": {"decompose": "sometimes"}}), 422,
             "body.options.decompose"),
            (client.post(run, json=demo | {"options": {"plan_id": 2}}), 422,
             "body.options.plan_id"),
            (client.post(run, json=demo | {"options": {"node_retries": -1}}), 422,
             "body.options.node_retries"),
            (client.post(run, json=demo | {"budget": {"max_seconds": 0}}), 422,
             "body.budget.max_seconds"),
            (client.post(run, json=demo | {"goal": ""}), 422, "body.goal"),
        ]  # fmt: skip
        for response, status, text in cases:
            assert response.status_code == status, (response.request.url, response.text)
            assert response.headers["content-type"] == "application/problem+json"
            assert text in response.json()["detail"], response.json()
        assert client.get("/runs").json()["runs"] == []  # nothing refused was stored


def test_a_decomposition_waits_for_approval_before_its_children_run(server: Served) -> None:
    options = {"approve_decompositions": True}
    with server.client() as client:
        tree = conference(client)
        run = client.post(
            f"/plans/{tree['id']}/runs", json={"toolset": "demo", "options": options}
        ).json()
        paused = ended(client, run["run_id"], ("paused", "ok", "stopped"))
        nodes = by_name(paused)
        approved = client.post(f"/runs/{run['run_id']}/approve", json={})
        assert approved.status_code == 202, approved.text
        view = ended(client, run["run_id"])
    assert paused["status"] == "paused" and paused["stop_reason"] == "awaiting_approval"
    assert paused["approval"]["kind"] == "plan"
    titles = [step["title"] for step in paused["approval"]["subject"]["plan"]]
    assert titles == ["Find sponsors", "Sign sponsors"]
    assert nodes["Sponsors"]["status"] == "decomposed"
    assert nodes["Find sponsors"]["status"] == nodes["Sign sponsors"]["status"] == "pending"
    assert nodes["Book"]["status"] == "ok"  # the other branches went on meanwhile
    assert view["status"] == "ok" and view["answer"] == ANSWER
    assert by_name(view)["Sign sponsors"]["result"] == RESULTS["Sign sponsors"]


def test_a_cancelled_tree_run_resumes_without_redoing_finished_nodes(
    tree_config: ServerConfig, tmp_path: Path, toolset: Path
) -> None:
    blocking = dataclasses.replace(
        tree_config, models=(tree_model(tmp_path / "blocking.json", block="Programme"),)
    )
    with Served(blocking) as server, server.client() as client:
        tree = conference(client)
        run_id = client.post(f"/plans/{tree['id']}/runs", json={"toolset": "demo"}).json()["run_id"]
        wait_for(
            lambda: (
                (nodes := shown(client, run_id))
                and nodes["Book"]["status"] == nodes["Call for papers"]["status"] == "ok"
                and nodes["Programme"]["status"] == "running"
            ),
            timeout=60,
        )
        cancelled = client.post(f"/runs/{run_id}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["stop_reason"] == "cancelled"
        held = by_name(cancelled.json())
        toolset.with_name("release").write_text("go")
        resumed = client.post(f"/runs/{run_id}/resume")
        assert resumed.status_code == 202, resumed.text
        view = ended(client, run_id)
        events = sse_events(client, f"/runs/{run_id}/events")
    assert held["Programme"]["status"] != "ok" and held["Conference"]["status"] != "ok"
    assert view["status"] == "ok" and view["segments"] == 2 and view["answer"] == ANSWER
    assert by_name(view)["Programme"]["result"] == RESULTS["Programme"]
    finished = Counter(m["data"]["data"]["node_id"] for m in events if m["event"] == "NodeFinished")
    assert set(finished.values()) == {1}  # every node ended once, over both segments
    assert finished[node_id(tree, "Book")] == 1


def test_the_line_is_shared_with_post_runs(
    tree_config: ServerConfig, tmp_path: Path, toolset: Path
) -> None:
    one = dataclasses.replace(
        tree_config,
        models=(tree_model(tmp_path / "blocking.json", block="Book"),),
        max_running=1,
        max_queued=0,
    )
    with Served(one) as server, server.client() as client:
        tree = conference(client)
        first = client.post(f"/plans/{tree['id']}/runs", json={"toolset": "demo"})
        assert first.status_code == 202
        wait_for(
            lambda: client.get(f"/runs/{first.json()['run_id']}").json()["status"] == "running"
        )
        full = client.post(f"/plans/{tree['id']}/runs", json={"toolset": "demo"})
        also = client.post("/runs", json={"goal": "dag", "toolset": "demo"})
        toolset.with_name("release").write_text("go")
        view = ended(client, first.json()["run_id"])
        listed = client.get("/runs").json()["runs"]
    for refused in (full, also):
        assert refused.status_code == 429, refused.text
        assert int(refused.headers["Retry-After"]) >= 1
        assert refused.headers["content-type"] == "application/problem+json"
    assert view["status"] == "ok"
    assert [run["run_id"] for run in listed] == [first.json()["run_id"]]


def test_the_routes_are_in_the_contract_and_a_tree_run_reads_as_documented(
    tree_config: ServerConfig,
) -> None:
    with Served(tree_config) as server, server.client() as client:
        doc = document(server)
        tree = conference(client)
        speakers = node_id(tree, "Speakers")
        started = client.post(
            f"/plans/{tree['id']}/nodes/{speakers}/runs", json={"toolset": "demo"}
        )
        check(doc, "RunView", started.json())
        run_id = started.json()["run_id"]
        ended(client, run_id)
        wait_for(lambda: not server.service.runs.is_active(run_id), timeout=60)
        view = client.get(f"/runs/{run_id}").json()
        other = client.post("/runs", json={"goal": "dag", "toolset": "demo"}).json()
        ended(client, other["run_id"])
        flat = client.get(f"/runs/{other['run_id']}").json()
    assert view == plain(server.service.runs.view(run_id))  # nothing dropped on the way
    check(doc, "RunView", view)
    assert [node["name"] for node in view["tree"]["nodes"]] == [
        "Speakers", "Call for papers", "Programme",
    ]  # fmt: skip
    assert "tree" in flat and flat["tree"] is None  # any other run: null
    check(doc, "RunView", flat)

    paths = doc["paths"]
    for path, operation in (
        ("/plans/{plan_id}/runs", "start_plan_run"),
        ("/plans/{plan_id}/nodes/{node_id}/runs", "start_node_run"),
    ):
        post = paths[path]["post"]
        assert post["operationId"] == operation
        answers = set(post["responses"])
        assert {"202", "403", "404", "409", "415", "421", "422", "429", "500", "503"} <= answers
        assert post["responses"]["202"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/RunView"
        }
        body = post["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": "#/components/schemas/TreeRunIn"}
    schemas = doc["components"]["schemas"]
    assert schemas["TreeRunIn"]["required"] == ["toolset"]
    options = schemas["TreeOptionsIn"]["properties"]
    assert options["decompose"]["enum"] == ["as-needed", "upfront", "none"]
    assert set(options) == {
        "decompose", "max_depth", "max_nodes", "max_children", "node_retries", "redecompose",
        "approve_decompositions", "max_agent_turns",
    }  # fmt: skip
    status = schemas["RunTreeNode"]["properties"]["status"]
    assert status["enum"] == ["pending", "running", "ok", "failed", "decomposed"]


TOKEN = "tree-t0ken-" + "z" * 30


def test_the_token_and_the_browser_guards_cover_the_new_routes(tree_config: ServerConfig) -> None:
    with Served(dataclasses.replace(tree_config, token=TOKEN)) as server:
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        with server.client() as client:
            plan = client.post("/plans", json={"title": "Conference", "auto_decompose": False})
            root = plan.json()["nodes"][0]["id"]
        attempts = []
        for path in (f"/plans/{plan.json()['id']}/runs", f"/plans/1/nodes/{root}/runs"):
            url, body = server.url + path, {"toolset": "demo"}
            attempts += [
                (httpx.post(url, json=body, timeout=30), 401),
                (httpx.post(url, json=body, headers=bearer | {"Origin": "http://evil.example"},
                            timeout=30), 403),
                (httpx.post(url, json=body, headers=bearer | {"Sec-Fetch-Site": "cross-site"},
                            timeout=30), 403),
                (httpx.post(url, content=b"toolset=demo", timeout=30, headers=bearer | {
                    "Content-Type": "application/x-www-form-urlencoded"}), 415),
            ]  # fmt: skip
        with server.client() as client:
            stored = client.get("/runs").json()["runs"]
            own = client.post(
                f"/plans/{plan.json()['id']}/runs",
                json={"toolset": "demo"},
                headers={"Origin": server.url, "Sec-Fetch-Site": "same-origin"},
            )
    for response, status in attempts:
        assert response.status_code == status, response.text
        assert response.headers["content-type"] == "application/problem+json"
    assert stored == []  # none of them started a run
    assert own.status_code == 202, own.text  # the page itself may


START = "run_operation/start_run"


def test_the_chat_agent_runs_a_plan_or_a_node(tree_config: ServerConfig, tmp_path: Path) -> None:
    def act(**args: Any) -> dict[str, Any]:
        return {"reply": "", "actions": [{"action": START, "args": args}]}

    chat = write_script(
        tmp_path / "chat.json",
        ("user-1: run plan 1$", act(plan_id=1, toolset="demo")),
        ("user-2: run the venue$", act(plan_id=1, node_id=2, toolset="demo", goal="Book it")),
        ("user-3: replan it$", act(plan_id=1, toolset="demo", strategy="replan")),
        ("user-4: a node alone$", act(node_id=2, toolset="demo", goal="x")),
        ("user-5: nothing$", act(toolset="demo")),
        ("user-6: run plan 99$", act(plan_id=99, toolset="demo")),
        ("user-7: run node 99$", act(plan_id=1, node_id=99, toolset="demo")),
        ("user-8: a goal$", act(goal="dag", toolset="demo")),
        default={"reply": "?", "actions": []},
    )
    with (
        Served(dataclasses.replace(tree_config, chat_model=chat)) as server,
        server.client() as client,
    ):
        tree = conference(client)
        assert tree["id"] == 1 and node_id(tree, "Venue") == 2  # what the script names
        turns = {n: say(client, text) for n, text in enumerate(MESSAGES, start=1)}
        whole = turns[1]["actions"][0]["result"]["run_id"]
        venue = turns[2]["actions"][0]["result"]["run_id"]
        views = {run_id: ended(client, run_id) for run_id in (whole, venue)}
        flat = client.get(f"/runs/{turns[8]['actions'][0]['result']['run_id']}").json()
        listed = client.get("/runs").json()["runs"]

    assert turns[1]["reply"] == f"Started run {whole} of plan #1."
    assert turns[2]["reply"] == f"Started run {venue} of node 2 of plan #1."
    assert views[whole]["status"] == "ok" and views[whole]["answer"] == ANSWER
    assert views[whole]["config"]["strategy"] == "tree" and views[whole]["goal"] == "Conference"
    assert views[venue]["goal"] == "Book it" and views[venue]["tree"]["root"] == 2
    assert views[venue]["answer"] == "Venue: Hall 7, booked for 12 May"
    for n, why in (
        (3, "leave strategy out"),
        (4, "node_id names a node of plan_id"),
        (5, "give a goal, or a plan_id"),
    ):
        (action,) = turns[n]["actions"]
        assert action["status"] == "refused" and action["reason"].startswith("bad_args"), action
        assert why in action["message"]
    for n, why in ((6, "no plan tree has id 99"), (7, "plan 1 has no node 99")):
        (action,) = turns[n]["actions"]
        assert action["status"] == "failed" and why in action["message"], action
    assert flat["config"]["strategy"] == "plan_execute" and flat["tree"] is None
    assert len(listed) == 3  # refused and failed actions started nothing


MESSAGES = (
    "user-1: run plan 1",
    "user-2: run the venue",
    "user-3: replan it",
    "user-4: a node alone",
    "user-5: nothing",
    "user-6: run plan 99",
    "user-7: run node 99",
    "user-8: a goal",
)


def say(client: httpx.Client, text: str) -> dict[str, Any]:
    response = client.post("/chat", json={"message": text})
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_the_chat_model_is_shown_how_to_run_a_plan() -> None:
    (entry,) = [item for item in catalog() if item["action"] == START]
    assert {"plan_id", "node_id"} <= set(entry["args"]["properties"])
    assert "required" not in entry["args"] or "goal" not in entry["args"]["required"]
    strategy = entry["args"]["properties"]["strategy"]["anyOf"][0]
    assert {"plan_execute", "replan", "tree"} <= set(strategy["enum"])
    assert "stored plan tree" in entry["description"]
