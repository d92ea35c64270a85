"""The runs API over real HTTP: start, list, show, approve, reject, cancel, resume, errors."""

from __future__ import annotations

from pathlib import Path

from tests.server.support import Served, wait_for


def finished(client, run_id: str, statuses=("ok", "stopped", "paused")) -> dict:
    return wait_for(
        lambda: (view := client.get(f"/runs/{run_id}").json())["status"] in statuses and view
    )


def test_a_run_starts_in_the_background_and_ends_ok(served: Served) -> None:
    with served.client() as client:
        response = client.post("/runs", json={"goal": "a dag run", "toolset": "demo"})
        assert response.status_code == 202, response.text
        run_id = response.json()["run_id"]
        assert response.json()["status"] in ("queued", "running", "ok")
        view = finished(client, run_id)
        assert view["status"] == "ok" and view["stop_reason"] == "success"
        assert view["answer"] == "All steps are done."
        assert [s["id"] for s in view["plan"]] == ["a", "b", "c", "d"]
        assert view["toolset"] == "demo" and "tools" not in view
        listed = client.get("/runs").json()
        assert [run["run_id"] for run in listed["runs"]] == [run_id]
        assert listed["next_cursor"] is None
        assert client.get("/runs", params={"status": "paused"}).json()["runs"] == []


def test_runs_list_pages_and_filters(served: Served) -> None:
    with served.client() as client:
        ids = [
            client.post("/runs", json={"goal": f"dag {n}", "toolset": "demo"}).json()["run_id"]
            for n in range(3)
        ]
        paused = client.post("/runs", json={"goal": "approval", "toolset": "demo"}).json()
        for run_id in ids:
            finished(client, run_id)
        finished(client, paused["run_id"])
        first = client.get("/runs", params={"limit": 2}).json()
        assert [r["run_id"] for r in first["runs"]] == [paused["run_id"], ids[2]]  # newest first
        page = client.get("/runs", params={"limit": 2, "cursor": first["next_cursor"]}).json()
        assert [r["run_id"] for r in page["runs"]] == [ids[1], ids[0]]
        assert page["next_cursor"] is None
        only = client.get("/runs", params={"status": "paused"}).json()
        assert [r["run_id"] for r in only["runs"]] == [paused["run_id"]]
        bad = client.get("/runs", params={"status": "nonsense"})
        assert bad.status_code == 422
        assert bad.headers["content-type"] == "application/problem+json"


def test_a_paused_run_is_approved_and_goes_on(served: Served) -> None:
    with served.client() as client:
        run_id = client.post("/runs", json={"goal": "approval", "toolset": "demo"}).json()["run_id"]
        view = finished(client, run_id)
        assert view["status"] == "paused" and view["approval"]["kind"] == "tool"
        assert view["approval"]["subject"]["tool"] == "publish"
        edited = client.post(
            f"/runs/{run_id}/approve", json={"plan": {"kind": "plan", "steps": []}}
        )
        assert edited.status_code == 409
        assert "replan strategy only" in edited.json()["detail"]
        assert client.get(f"/runs/{run_id}").json()["status"] == "paused"  # nothing written
        approved = client.post(f"/runs/{run_id}/approve")
        assert approved.status_code == 202, approved.text
        view = finished(client, run_id, ("ok", "stopped"))
        assert view["status"] == "ok"
        assert view["history"][-1]["observation"] == "published report"
        again = client.post(f"/runs/{run_id}/approve")
        assert again.status_code == 409
        assert "not waiting for approval" in again.json()["detail"]


def test_a_paused_run_is_rejected_with_a_reason(served: Served) -> None:
    with served.client() as client:
        run_id = client.post("/runs", json={"goal": "approval", "toolset": "demo"}).json()["run_id"]
        finished(client, run_id)
        missing = client.post(f"/runs/{run_id}/reject", json={})
        assert missing.status_code == 422 and "reason" in missing.json()["detail"]
        rejected = client.post(f"/runs/{run_id}/reject", json={"reason": "not today"})
        assert rejected.status_code == 200
        body = rejected.json()
        assert body["status"] == "stopped" and body["stop_reason"] == "approval_rejected"
        assert body["message"] == "rejected: not today"


def test_cancel_stores_the_run_cancelled_and_resume_finishes_it(
    served: Served, toolset: Path
) -> None:
    release = toolset.with_name("release")
    with served.client() as client:
        run_id = client.post("/runs", json={"goal": "block", "toolset": "demo"}).json()["run_id"]
        wait_for(lambda: client.get(f"/runs/{run_id}").json()["history"])  # "first" is done
        cancelled = client.post(f"/runs/{run_id}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["status"] == "stopped"
        assert cancelled.json()["stop_reason"] == "cancelled"
        again = client.post(f"/runs/{run_id}/cancel")
        assert again.status_code == 409 and "not executing" in again.json()["detail"]
        release.write_text("go")
        resumed = client.post(f"/runs/{run_id}/resume")
        assert resumed.status_code == 202, resumed.text
        view = finished(client, run_id, ("ok", "stopped"))
        assert view["status"] == "ok" and view["segments"] == 2
        steps = [entry["plan_step"]["id"] for entry in view["history"]]
        assert steps == ["first", "wait", "last"]
        ended = client.post(f"/runs/{run_id}/resume")
        assert ended.status_code == 409 and "already ended" in ended.json()["detail"]


def test_every_error_is_a_problem_document(served: Served) -> None:
    with served.client() as client:
        cases = [
            (client.get("/runs/nope"), 404, "no run 'nope'"),
            (client.get("/runs/nope/events"), 404, "no run 'nope'"),
            (client.post("/runs/nope/resume"), 404, "no run 'nope'"),
            (client.post("/runs/nope/cancel"), 404, "no run 'nope'"),
            (client.post("/runs/nope/approve"), 404, "no run 'nope'"),
            (client.post("/runs/nope/reject", json={"reason": "x"}), 404, "no run 'nope'"),
            (client.post("/runs", json={"goal": "x"}), 422, "toolset"),
            (client.post("/runs", json={"goal": "x", "toolset": "demo", "extra": 1}), 422, "extra"),
            (
                client.post(
                    "/runs", content=b"{not json", headers={"content-type": "application/json"}
                ),
                422,
                "JSON",
            ),
            (
                client.post("/runs", json={"goal": "x", "toolset": "demo", "idempotency_key": "k"}),
                422,
                "idempotency_key needs a server that queues runs",
            ),
            (
                client.post("/runs", json={"goal": "x", "toolset": "other"}),
                422,
                "unknown toolset 'other'; registered: demo",
            ),
            (
                client.post("/runs", json={"goal": "x", "toolset": "/etc/passwd"}),
                422,
                "unknown toolset",
            ),
            (
                client.post(
                    "/runs", json={"goal": "x", "toolset": "demo", "model": "openai:gpt-5"}
                ),
                422,
                "not offered by this server",
            ),
            (
                client.post("/runs", json={"goal": "x", "toolset": "demo", "allow": ["rm"]}),
                422,
                "tool 'rm' is not in toolset 'demo'",
            ),
            (
                client.post(
                    "/runs", json={"goal": "x", "toolset": "demo", "budget": {"max_seconds": -1}}
                ),
                422,
                "max_seconds",
            ),
            (
                client.post("/runs", json={"goal": "x", "toolset": "demo", "replan": {}}),
                422,
                "replan options",
            ),
            (client.get("/runs/x/events", headers={"Last-Event-ID": "abc"}), 400, "Last-Event-ID"),
            (client.get("/no/such/path"), 404, "Not Found"),
            (client.delete("/runs"), 405, "Method Not Allowed"),
        ]
        for response, status, text in cases:
            assert response.status_code == status, (response.request.url, response.text)
            assert response.headers["content-type"] == "application/problem+json"
            problem = response.json()
            assert problem["status"] == status and text in problem["detail"], problem
            assert "Traceback" not in response.text
            assert "runs.db" not in response.text  # the store's file is the server's business
        assert client.get("/runs").json()["runs"] == []  # nothing refused was stored


def test_a_body_over_the_limit_is_refused(tmp_path: Path, config) -> None:
    import dataclasses

    with (
        Served(dataclasses.replace(config, max_body_bytes=2000)) as server,
        server.client() as client,
    ):
        big = client.post("/runs", json={"goal": "x" * 5000, "toolset": "demo"})
        assert big.status_code == 413
        assert big.headers["content-type"] == "application/problem+json"

        def chunks():
            yield b'{"goal": "'
            for _ in range(10):
                yield b"y" * 500
            yield b'", "toolset": "demo"}'

        streamed = client.post(
            "/runs", content=chunks(), headers={"content-type": "application/json"}
        )
        assert streamed.status_code == 413
        small = client.post("/runs", json={"goal": "dag", "toolset": "demo"})
        assert small.status_code == 202


def test_the_openapi_document_lists_every_endpoint(served: Served) -> None:
    with served.client() as client:
        document = client.get("/openapi.json").json()
    paths = document["paths"]
    for path in (
        "/runs",
        "/runs/{run_id}",
        "/runs/{run_id}/resume",
        "/runs/{run_id}/cancel",
        "/runs/{run_id}/approve",
        "/runs/{run_id}/reject",
        "/runs/{run_id}/events",
        "/plans",
        "/plans/{plan_id}/tree",
        "/plans/{plan_id}/nodes/{node_id}/decompose",
        "/plans/{plan_id}/events",
        "/chat",
    ):
        assert path in paths, path
    assert (
        "text/event-stream" in paths["/runs/{run_id}/events"]["get"]["responses"]["200"]["content"]
    )


def test_the_choices_a_client_has(served: Served) -> None:
    with served.client() as client:
        toolsets = client.get("/toolsets").json()["toolsets"]
        models = client.get("/models").json()
        health = client.get("/health").json()
    assert [t["name"] for t in toolsets] == ["demo"]
    assert sorted(tool["name"] for tool in toolsets[0]["tools"]) == ["block", "publish", "work"]
    assert models == {
        "models": list(served.config.models),
        "default": served.config.models[0],
        "chat": False,
    }
    assert health == {"ok": True}
