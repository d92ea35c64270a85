"""Plan trees over HTTP: create_plan, the tree, single-node decomposition, plan streams."""

from __future__ import annotations

import dataclasses

from tests.server.support import Served, sse_iter, wait_for


def job_done(client, plan_id: int) -> dict:
    return wait_for(
        lambda: (
            (t := client.get(f"/plans/{plan_id}/tree").json())["jobs"]
            and all(job["state"] != "running" for job in t["jobs"])
            and t
        )
    )


def test_create_plan_decomposes_it_in_the_background(served: Served) -> None:
    with served.client() as client:
        response = client.post("/plans", json={"title": "Conference"})
        assert response.status_code == 202, response.text
        created = response.json()
        plan_id = created["id"]
        assert created["job"]["mode"] == "plan_bfs"
        tree = job_done(client, plan_id)
    names = [node["name"] for node in tree["nodes"]]
    assert names == [
        "Conference", "Venue", "Shortlist", "Book", "Speakers", "Call for papers", "Programme",
        "Sponsors",
    ]  # fmt: skip
    sponsors = next(n["id"] for n in tree["nodes"] if n["name"] == "Sponsors")
    job = tree["jobs"][0]
    assert job["state"] == "done"
    assert job["summary"] == (
        f"Plan #{plan_id} got 7 subtasks; node {sponsors} was not processed because the model "
        "did not answer."
    )
    assert job["result"]["failed_nodes"] == [sponsors]


def test_create_plan_without_decomposing_and_one_node_on_demand(served: Served) -> None:
    with served.client() as client:
        created = client.post("/plans", json={"title": "Conference", "auto_decompose": False})
        assert created.status_code == 201 and created.json()["job"] is None
        plan_id = created.json()["id"]
        root = created.json()["nodes"][0]["id"]
        assert [p["id"] for p in client.get("/plans").json()["plans"]] == [plan_id]
        started = client.post(f"/plans/{plan_id}/nodes/{root}/decompose", json={"expand_depth": 1})
        assert started.status_code == 202 and started.json()["mode"] == "single_node"
        tree = job_done(client, plan_id)
        assert [n["name"] for n in tree["nodes"]] == ["Conference", "Venue", "Speakers", "Sponsors"]
        again = client.post(f"/plans/{plan_id}/nodes/{root}/decompose", json={"mode": "overwrite"})
        assert again.status_code == 202
        tree = wait_for(
            lambda: (t := job_done(client, plan_id))["jobs"][-1]["state"] == "done" and t
        )
    assert [n["name"] for n in tree["nodes"]] == ["Conference", "Venue", "Speakers", "Sponsors"]
    assert tree["jobs"][-1]["result"]["stats"]["nodes_created"] == 3


def test_one_decomposition_at_a_time_per_plan(config, tmp_path) -> None:
    from tests.server.support import decomp_model

    slow = dataclasses.replace(config, decomp_model=decomp_model(tmp_path, latency_ms=3000))
    with Served(slow) as server, server.client() as client:
        created = client.post("/plans", json={"title": "Conference"})
        assert created.status_code == 202
        plan_id = created.json()["id"]
        busy = client.post(f"/plans/{plan_id}/decompose")
        root = created.json()["nodes"][0]["id"]
        node = client.post(f"/plans/{plan_id}/nodes/{root}/decompose")
        listed = client.get("/plans").json()["plans"]
    for response in (busy, node):
        assert response.status_code == 409
        assert response.json()["detail"] == (
            f"plan {plan_id} is being decomposed; wait for that to end"
        )
    assert listed[0]["decomposing"] is True


def test_a_stored_plan_is_decomposed_breadth_first_on_request(served: Served) -> None:
    with served.client() as client:
        plan_id = client.post("/plans", json={"title": "Conference", "auto_decompose": False})
        plan_id = plan_id.json()["id"]
        started = client.post(f"/plans/{plan_id}/decompose")
        assert started.status_code == 202 and started.json()["mode"] == "plan_bfs"
        tree = job_done(client, plan_id)
    assert len(tree["nodes"]) == 8 and tree["jobs"][0]["result"]["stats"]["levels"] == 2


def test_plan_errors_are_problem_documents(served: Served) -> None:
    with served.client() as client:
        plan_id = client.post("/plans", json={"title": "X", "auto_decompose": False}).json()["id"]
        cases = [
            (client.get("/plans/999/tree"), 404, "no plan tree has id 999"),
            (client.get("/plans/999/events"), 404, "no plan tree has id 999"),
            (client.post("/plans/999/decompose"), 404, "no plan tree has id 999"),
            (client.post(f"/plans/{plan_id}/nodes/999/decompose"), 404, "has no node 999"),
            (client.post("/plans", json={}), 422, "title"),
            (client.post(f"/plans/{plan_id}/nodes/1/decompose", json={"mode": "x"}), 422, "mode"),
            (
                client.post("/plans", json={"title": "Y", "options": {"max_depth": 0}}),
                422,
                "max_depth",
            ),
            (client.get("/plans/abc/tree"), 422, "plan_id"),
        ]
        for response, status, text in cases:
            assert response.status_code == status, (response.request.url, response.text)
            assert response.headers["content-type"] == "application/problem+json"
            assert text in response.json()["detail"], response.json()


def test_the_plan_stream_sends_every_node_as_written_and_replays(config, tmp_path) -> None:
    from tests.server.support import decomp_model

    slow = dataclasses.replace(config, decomp_model=decomp_model(tmp_path, latency_ms=200))
    with Served(slow) as server, server.client() as client:
        plan_id = client.post("/plans", json={"title": "Conference"}).json()["id"]
        live: list[dict] = []
        for message in sse_iter(client, f"/plans/{plan_id}/events"):
            live.append(message)
            if message["event"] == "decomposition" and message["data"]["state"] == "done":
                break
        first = next(m["id"] for m in live if m["event"] == "node")
        replay = []
        for message in sse_iter(client, f"/plans/{plan_id}/events", last_event_id=first):
            replay.append(message)
            if message["event"] == "decomposition" and message["data"]["state"] == "done":
                break
    nodes = [m for m in live if m["event"] == "node"]
    assert [m["id"] for m in nodes] == sorted(m["id"] for m in nodes)
    assert len(nodes) == 8 and nodes[0]["data"]["name"] == "Conference"
    assert [m["data"]["depth"] for m in nodes][:4] == [0, 1, 1, 1]
    jobs = [m["data"]["state"] for m in live if m["event"] == "decomposition"]
    assert jobs[0] == "running" and jobs[-1] == "done"
    assert [m for m in replay if m["event"] == "node"] == nodes[1:]  # after the first node


def test_a_client_following_the_stream_sees_an_overwrite(served: Served) -> None:
    with served.client() as client:
        plan_id = client.post("/plans", json={"title": "Conference"}).json()["id"]
        job_done(client, plan_id)
        held: dict[int, str] = {}
        jobs = 0
        for message in sse_iter(client, f"/plans/{plan_id}/events"):
            if message["event"] == "node":
                held[message["data"]["id"]] = message["data"]["name"]
            elif message["event"] == "removed":
                for node_id in message["data"]["node_ids"]:
                    held.pop(node_id)
            elif message["event"] == "decomposition" and message["data"]["state"] == "done":
                jobs += 1
                if jobs == 1:
                    root = min(held)
                    body = {"mode": "overwrite"}
                    started = client.post(f"/plans/{plan_id}/nodes/{root}/decompose", json=body)
                    assert started.status_code == 202
                else:
                    break
        tree = client.get(f"/plans/{plan_id}/tree").json()
    assert held == {node["id"]: node["name"] for node in tree["nodes"]}
    assert sorted(held.values()) == ["Conference", "Speakers", "Sponsors", "Venue"]
