"""MCP toolsets from the command line: listing, several --tools, a kill -9, HTTP, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcptoys import TOY, Toy

from clitools import CHILD, cli
from listening import free_port, listening
from support import plan_of, step

LOCAL_TOOLS = '''
def double(n: int) -> dict:
    """Double a number."""
    return {"doubled": 2 * n}
'''


def scripted(folder: Path, *steps: dict[str, Any]) -> str:
    path = folder / "model.json"
    rules = [{"match": "max_plan_steps", "response": plan_of(*steps)}]
    path.write_text(json.dumps({"rules": rules, "default": "combined"}), encoding="utf-8")
    return f"scripted:{path}"


def test_tools_lists_an_mcp_servers_tools_with_their_classes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    toy = Toy(tmp_path)
    code, out, _ = cli(capsys, "tools", toy.spec("--prefix=t"), "--json")
    assert code == 0
    listed = {tool["name"]: tool for tool in json.loads(out)["tools"]}
    assert listed["t_add"]["side_effects"] == "read_only"
    assert listed["t_put"]["side_effects"] == "idempotent"
    assert listed["t_append"]["side_effects"] == "unsafe"
    assert listed["t_add"]["args"]["properties"]["a"]["type"] == "integer"
    code, out, _ = cli(capsys, "tools", toy.spec())
    assert code == 0
    assert "7 tools in" in out and "wait_for" in out and "unsafe" in out


def test_run_takes_a_python_toolset_and_an_mcp_server_together(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "local.py").write_text(LOCAL_TOOLS, encoding="utf-8")
    toy = Toy(tmp_path)
    steps = [
        step(1, "double", {"n": 4}),
        step(2, "add", {"a": 1, "b": 2}),
        step(3, "echo", {"text": "hi"}),
    ]
    code, out, err = cli(
        capsys,
        "run", "both", "--tools", "local.py", "--tools", toy.spec(),
        "--model", scripted(tmp_path, *steps), "--json",
    )  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert result["history"][0]["observation"] == {"doubled": 8}
    assert toy.calls() == ["add", "echo"]


def test_two_servers_with_one_tool_name_need_a_prefix(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    alpha, beta = Toy(tmp_path, "alpha"), Toy(tmp_path, "beta")
    code, _, err = cli(capsys, "tools", alpha.spec(), beta.spec())
    assert code == 2
    assert "'echo' is offered by both" in err and "--prefix" in err
    code, out, _ = cli(capsys, "tools", alpha.spec("--prefix=a"), beta.spec(), "--json")
    assert code == 0
    names = {tool["name"] for tool in json.loads(out)["tools"]}
    assert {"a_echo", "echo", "lookup"} <= names


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("mcp:", "names no command"),
        ("mcp:--colour=red python x.py", "is not --NAME=VALUE"),
        ("mcp:--header=A:b python x.py", "--header is for a URL"),
        ("mcp:/no/such/server --flag", "cannot list the tools of MCP server"),
        ("mcp+http:nowhere", "names no server"),
    ],
)
def test_bad_mcp_toolsets_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], spec: str, says: str
) -> None:
    code, out, err = cli(capsys, "tools", spec)
    assert code == 2 and out == ""
    assert says in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_killed_run_never_repeats_an_unsafe_mcp_call_on_resume(tmp_path: Path) -> None:
    toy = Toy(tmp_path)
    started, go = tmp_path / "started", tmp_path / "go"
    (tmp_path / "local.py").write_text(LOCAL_TOOLS, encoding="utf-8")
    model = scripted(
        tmp_path,
        step(1, "double", {"n": 1}),
        step(2, "wait_for", {"started": str(started), "go": str(go)}),
        step(3, "echo", {"text": "after"}),
    )
    env = {**os.environ, "TASKDECOMP_LEASE_SECONDS": "1"}
    args = ["--tools", "local.py", "--tools", toy.spec(), "--model", model, "--json"]
    with subprocess.Popen(
        [*CHILD, "run", "wait", *args], env=env, cwd=tmp_path,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    ) as child:  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while not started.exists() and child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert started.exists(), child.communicate(timeout=5)
            child.send_signal(signal.SIGKILL)
            assert child.wait(timeout=60) == -signal.SIGKILL
        finally:
            go.touch()  # the orphaned server's call ends
            if child.poll() is None:
                child.kill()
    assert toy.calls() == ["wait_for"]
    run_id = _only_run(tmp_path)
    deadline = time.monotonic() + 120
    while True:  # until the dead process's lease has expired
        done = subprocess.run(
            [*CHILD, "resume", run_id, "--json"], env=env, cwd=tmp_path,
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        if "lease" not in done.stderr or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    result = json.loads(done.stdout)
    assert result["stop_reason"] == "interrupted_unknown_outcome:step_2", done.stderr
    assert toy.calls() == ["wait_for"]  # the unsafe call was not made again


def _only_run(folder: Path) -> str:
    from taskdecomp.settings import load_settings
    from taskdecomp.store import open_store

    store = open_store(load_settings().store_url())
    try:
        runs = store.list_runs()
        assert len(runs) == 1, runs
        return str(runs[0].run_id)
    finally:
        store.close()


@pytest.fixture
def http_toy(tmp_path: Path) -> Iterator[tuple[str, Toy]]:
    """The toy server over streamable HTTP on a free port of 127.0.0.1."""
    toy = Toy(tmp_path, "beta")
    port = free_port()
    with listening([sys.executable, str(TOY), "beta", "--http", str(port)], port, env=toy.env):
        yield f"mcp+http://127.0.0.1:{port}/mcp", toy


def test_a_server_over_streamable_http(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, http_toy: tuple[str, Toy]
) -> None:
    url, toy = http_toy
    steps = [step(n, "lookup", {"key": f"k{n}"}) for n in (1, 2, 3)]
    code, out, err = cli(
        capsys, "run", "look", "--tools", f"{url} --prefix=web",
        "--model", scripted(tmp_path, *[{**s, "tool": "web_lookup"} for s in steps]), "--json",
    )  # fmt: skip
    assert code == 0, err
    observations = [entry["observation"] for entry in json.loads(out)["history"]]
    assert observations == [{"result": f"value of k{n}"} for n in (1, 2, 3)]
    assert toy.calls() == ["lookup"] * 3 and toy.starts() == 1
