"""An MCP server registered with the service (``serve --tools NAME=mcp:...``) and a worker."""

from __future__ import annotations

from pathlib import Path

from mcptoys import Toy

from taskdecomp.scale.registry import Registry
from taskdecomp.server import ServerConfig
from tests.server.support import Served, step, wait_for, write_script


def test_a_run_posted_to_the_service_calls_a_registered_mcp_server(tmp_path: Path) -> None:
    toy = Toy(tmp_path)
    plan = {
        "kind": "plan",
        "steps": [
            step("s1", "add", {"a": 2, "b": 3}, []),
            step("s2", "echo", {"text": "hi"}, []),
            step("s3", "add", {"a": 1, "b": 1}, ["s1"]),
        ],
    }
    model = write_script(
        tmp_path / "model.json",
        ("task decomposition planner", plan),
        ("reporting assistant", "Added and echoed."),
    )
    config = ServerConfig(
        store_url=str(tmp_path / "runs.db"), toolsets={"toys": toy.spec()}, models=(model,)
    )
    with Served(config) as served, served.client() as client:
        listed = client.get("/toolsets").json()["toolsets"]
        assert {tool["name"] for tool in listed[0]["tools"]} >= {"add", "echo", "append"}
        posted = client.post("/runs", json={"goal": "add then echo", "toolset": "toys"})
        assert posted.status_code == 202, posted.text
        run_id = posted.json()["run_id"]
        view = wait_for(
            lambda: (seen := client.get(f"/runs/{run_id}").json())["status"] != "running" and seen
        )
    assert view["status"] == "ok", view
    observations = {entry["plan_step"]["id"]: entry["observation"] for entry in view["history"]}
    assert observations["s1"]["sum"] == 5 and observations["s2"] == {"result": "alpha: hi"}
    assert observations["s3"]["sum"] == 2
    assert sorted(toy.calls()) == ["add", "add", "echo"] and toy.starts() == 1


def test_a_worker_registry_loads_an_mcp_server_by_name(tmp_path: Path) -> None:
    toy = Toy(tmp_path)
    registry = Registry.parse(tools=[f"toys={toy.spec('--prefix=t')}"])
    registry.load()
    toolset = registry.toolset("toys")
    assert {"t_add", "t_echo"} <= set(toolset)
    assert toolset["t_add"].side_effects == "read_only"
    assert toolset["t_append"].side_effects == "unsafe"  # no annotations
