"""The chat agent over HTTP: actions dispatched to the service, and refused at the boundary."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tests.server.support import Served, wait_for, write_script


def act(action: str, reply: str = "", **args: Any) -> dict[str, Any]:
    return {"reply": reply, "actions": [{"action": action, "args": args}]}


CREATE = "plan_operation/create_plan"


def chat_config(config, tmp_path: Path, **changes: Any):
    script = write_script(
        tmp_path / "chat.json",
        ("user-1: plan the conference$", act(CREATE, "On it.", title="Conference")),
        ("user-2: just a plan$", act(CREATE, title="Bare", auto_decompose=False)),
        ("user-2: just a plan.*Created plan #1.*user-3: split node 1$",  # needs the history
         act("task_operation/decompose_task", plan_id=1, node_id=1)),
        ("user-4: run the dag$", act("run_operation/start_run", goal="dag", toolset="demo")),
        ("user-5: use my file$", act("run_operation/start_run", goal="dag", toolset="/etc/passwd")),
        ("user-6: do odd things$", {"reply": "Trying.", "actions": [
            {"action": "shell_operation/run", "args": {"cmd": "rm -rf /"}},
            {"action": "run_operation/approve_run", "args": {"run_id": "x"}},
            {"action": "plan_operation/create_plan", "args": {"title": ""}},
            {"action": "plan_operation/create_plan", "args": {"title": "T", "path": "/etc"}},
        ]}),
        ("user-7: too much$", {"reply": "", "actions": [
            {"action": "plan_operation/get_plan", "args": {"plan_id": 1}} for _ in range(7)
        ]}),
        ("user-8: hello$", "Hello! I can plan and run things."),
        ("user-9: broken$", {"reply": "x", "actions": "not a list"}),
        ("user-10: show plan 1$", act("plan_operation/get_plan", plan_id=1)),
        ("user-11: show run nope$", act("run_operation/get_run", run_id="nope")),
        ("user-12: fail$", {"error": "timeout"}),
        default={"reply": "I did not understand.", "actions": []},
    )  # fmt: skip
    allowed = tuple(a for a in config.chat_actions if a != "run_operation/approve_run")
    return dataclasses.replace(config, chat_model=script, chat_actions=allowed, **changes)


def say(client, text: str, conversation: str | None = None) -> dict[str, Any]:
    response = client.post("/chat", json={"message": text, "conversation_id": conversation})
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_create_plan_is_dispatched_and_the_result_becomes_a_sentence(config, tmp_path) -> None:
    with Served(chat_config(config, tmp_path)) as server, server.client() as client:
        turn = say(client, "user-1: plan the conference")
        plans = client.get("/plans").json()["plans"]
    assert [p["title"] for p in plans] == ["Conference"]
    (action,) = turn["actions"]
    assert action["status"] == "done" and action["action"] == "plan_operation/create_plan"
    sponsors = action["result"]["result"]["failed_nodes"][0]
    assert turn["reply"] == (
        "On it. Created plan #1 'Conference'. Plan #1 got 7 subtasks; node "
        f"{sponsors} was not processed because the model did not answer."
    )


def test_decompose_task_runs_the_single_node_mode(config, tmp_path) -> None:
    with Served(chat_config(config, tmp_path)) as server, server.client() as client:
        first = say(client, "user-2: just a plan")
        assert first["reply"] == "Created plan #1 'Bare'."
        turn = say(client, "user-3: split node 1", first["conversation_id"])
        tree = client.get("/plans/1/tree").json()
    assert turn["actions"][0]["status"] == "done"
    assert turn["actions"][0]["result"]["mode"] == "single_node"
    assert turn["reply"] == "Plan #1 got 0 subtasks."  # 'Bare' is not in the decomposer's script
    assert [n["name"] for n in tree["nodes"]] == ["Bare"]


def test_start_run_uses_the_same_code_as_post_runs(config, tmp_path) -> None:
    with Served(chat_config(config, tmp_path)) as server, server.client() as client:
        turn = say(client, "user-4: run the dag")
        run_id = turn["actions"][0]["result"]["run_id"]
        assert turn["reply"] == f"Started run {run_id}."
        view = wait_for(lambda: (v := client.get(f"/runs/{run_id}").json())["status"] == "ok" and v)
        assert view["toolset"] == "demo"
        refused = say(client, "user-5: use my file")
    assert refused["actions"][0]["status"] == "failed"
    assert "unknown toolset '/etc/passwd'; registered: demo" in refused["reply"]


def test_actions_that_break_the_boundary_are_refused_and_nothing_runs(config, tmp_path) -> None:
    with Served(chat_config(config, tmp_path)) as server, server.client() as client:
        turn = say(client, "user-6: do odd things")
        assert client.get("/plans").json()["plans"] == []
        too_many = say(client, "user-7: too much")
    reasons = [a.get("reason") for a in turn["actions"]]
    assert reasons == [
        "unknown_action", "action_not_allowed", "bad_args:title", "bad_args:path",
    ]  # fmt: skip
    assert all(a["status"] == "refused" for a in turn["actions"])
    assert turn["reply"].startswith("Trying. I did not run shell_operation/run (unknown_action")
    statuses = [a["status"] for a in too_many["actions"]]
    assert statuses == ["failed"] * 5 + ["refused"] * 2  # plan 1 does not exist; 5 at most
    assert too_many["actions"][-1]["reason"] == "too_many_actions"


def test_plain_text_and_malformed_answers(config, tmp_path) -> None:
    with Served(chat_config(config, tmp_path)) as server, server.client() as client:
        hello = say(client, "user-8: hello")
        broken = say(client, "user-9: broken")
        missing = say(client, "user-11: show run nope")
    assert hello["reply"] == "Hello! I can plan and run things." and hello["actions"] == []
    assert broken["actions"] == []
    assert broken["reply"].startswith("I could not act on my own answer")
    assert missing["actions"][0]["status"] == "failed"
    assert "no run 'nope'" in missing["reply"]


def test_chat_is_off_without_a_chat_model(served: Served) -> None:
    with served.client() as client:
        response = client.post("/chat", json={"message": "hi"})
        bad = client.post("/chat", json={"text": "hi"})
    assert response.status_code == 404 and "--chat-model" in response.json()["detail"]
    assert bad.status_code == 422


def test_a_failing_chat_model_is_a_502_problem(config, tmp_path) -> None:
    with Served(chat_config(config, tmp_path)) as server, server.client() as client:
        response = client.post("/chat", json={"message": "user-12: fail"})
    assert response.status_code == 502
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["detail"] == "the chat model failed: scripted timeout"
