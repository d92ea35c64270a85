"""MCP servers that misbehave: hangs, stray output, refused answers, bad schemas, secrets."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcptoys import TOY, Toy

from clitools import CHILD, cli
from listening import free_port, listening
from support import plan_of, step
from taskdecomp import Budget, MCPServer, ScriptedModel, run_sync
from taskdecomp.toolsets import load_toolset
from taskdecomp.toolsets.mcp_client import HOST
from taskdecomp.toolsets.mcp_spec import parse

ODD = Path(__file__).resolve().parent / "servers" / "odd.py"


def odd(mode: str, *args: str, options: tuple[str, ...] = ()) -> str:
    """The ``--tools`` text of one of the misbehaving servers, with taskdecomp's options."""
    return "mcp:" + shlex.join([*options, sys.executable, str(ODD), mode, *args])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid)


def _state(pid: int) -> str:
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    except OSError:
        return "zombie"
    return next((line for line in status.splitlines() if line.startswith("State:")), "").lower()


def gone_soon(pid: int) -> bool:
    deadline = time.monotonic() + 30
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


@pytest.fixture
def short_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Servers get 3 seconds to answer the handshake instead of a minute."""
    monkeypatch.setattr("taskdecomp.toolsets.mcp_client.CONNECT_SECONDS", 3.0)


@pytest.mark.usefixtures("short_start")
def test_a_server_that_never_answers_is_ended_and_named_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pidfile = tmp_path / "hang.pid"
    code, out, err = cli(capsys, "tools", odd("hang", str(pidfile)))
    assert code == 2 and out == ""
    assert "did not answer" not in err or "within 3s" in err
    assert "no answer within 3s" in err and "mcp-" in err and ".log" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert gone_soon(int(pidfile.read_text(encoding="utf-8")))  # before the process exits


def test_a_hanging_server_is_ended_at_exit_with_no_pending_task(tmp_path: Path) -> None:
    pidfile = tmp_path / "hang.pid"
    code = (
        "import taskdecomp.toolsets.mcp_client as c; c.CONNECT_SECONDS = 3.0; "
        "import sys; from taskdecomp.cli import main; main(sys.argv[1:])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "tools", odd("hang", str(pidfile))],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "was destroyed" not in done.stderr and "Traceback" not in done.stderr
    assert gone_soon(int(pidfile.read_text(encoding="utf-8")))


def test_closing_while_a_server_starts_ends_it(tmp_path: Path) -> None:
    pidfile = tmp_path / "hang.pid"
    server = parse("mcp", odd("hang", str(pidfile))[4:])
    from taskdecomp.toolsets.mcp_client import list_tools

    pending = HOST.submit(list_tools(server, tmp_path))
    deadline = time.monotonic() + 60
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    HOST.close()
    assert gone_soon(int(pidfile.read_text(encoding="utf-8")))
    assert pending.done()


def test_a_server_printing_to_stdout_still_works_and_the_terminal_sees_no_traceback(
    tmp_path: Path,
) -> None:
    model = tmp_path / "model.json"
    steps = plan_of(*(step(n, "echo", {"text": f"hi {n}"}) for n in (1, 2, 3)))
    rules = [{"match": "max_plan_steps", "response": steps}]
    model.write_text(json.dumps({"rules": rules, "default": "combined"}), encoding="utf-8")
    done = subprocess.run(
        [*CHILD, "run", "say hi", "--tools", odd("banner"), "--model", f"scripted:{model}",
         "--json"],
        capture_output=True, text=True, timeout=180, cwd=tmp_path,
        env={**os.environ, "TASKDECOMP_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["history"][0]["observation"] == {"result": "echo: hi 1"}
    assert "Traceback" not in done.stderr and "JSONRPC" not in done.stderr
    logs = "".join(p.read_text() for p in (tmp_path / "home" / "logs").glob("mcp-*.log"))
    assert "Failed to parse JSONRPC message" in logs  # the server's log has it instead


def test_an_answer_the_sdk_refuses_is_a_tool_error_and_the_session_stays(
    tmp_path: Path,
) -> None:
    starts = tmp_path / "starts"
    tools = load_toolset(odd("badout", options=(f"--env=ODD_STARTS={starts}",)))

    async def calls() -> tuple[str, str]:
        first = await tools["count"].fn()
        with pytest.raises(Exception, match="Invalid structured content") as refused:
            await tools["bad_out"].fn()
        assert "exited" not in str(refused.value)
        return first, await tools["count"].fn()

    first, after = asyncio.run(calls())
    assert first.startswith("1 from") and after.startswith("2 from")  # the same process
    assert first.split()[-1] == after.split()[-1]
    assert len(starts.read_text().split()) == 1


def test_a_tool_with_an_unusable_schema_is_skipped_and_the_others_stay(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = cli(capsys, "tools", odd("schemas"), "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert [tool["name"] for tool in listed["tools"]] == ["fine"]
    assert set(listed["skipped"]) == {"broken", "remote"}
    assert all("odd.py schemas" in why for why in listed["skipped"].values())
    assert "never fetched" in listed["skipped"]["remote"]
    code, out, _ = cli(capsys, "tools", odd("schemas"))
    assert code == 0 and "skipped 'broken'" in out and "skipped 'remote'" in out


def test_secrets_given_to_a_server_never_reach_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GH_AUTH_SOURCE", "ghp_live_credential_12345")  # a name not secret
    server = MCPServer(
        command=sys.executable, args=[str(ODD), "secret"], env={"GH_AUTH": "${GH_AUTH_SOURCE}"}
    )
    model = ScriptedModel(
        rules=[("max_plan_steps", plan_of(step(1, "whoami", {})))], default="combined"
    )
    seen: list[str] = []
    result = run_sync(
        "who", tools=[server], model=model, budget=Budget(min_plan_steps=1),
        on_event=lambda event: seen.append(repr(event)),
    )  # fmt: skip
    assert result.stop_reason == "tool_error:whoami"
    assert "rejected" in (result.message or "") and "[redacted]" in (result.message or "")
    assert "ghp_live_credential_12345" not in (result.message or "") + "".join(seen)
    literal = MCPServer(url="http://127.0.0.1:9/mcp", headers={"X-Key": "Bearer literal-9876543"})
    literal.launch_headers()
    from taskdecomp.redact import Redactor

    assert "literal-9876543" not in Redactor.from_environ().text("key literal-9876543 here")


@pytest.fixture
def json_http_server(tmp_path: Path) -> Iterator[str]:
    """``odd.py slowhttp`` on a free port: plain JSON answers, no event stream."""
    port = free_port()
    with listening([sys.executable, str(ODD), "slowhttp", str(port)], port):
        yield f"mcp+http://127.0.0.1:{port}/mcp"


@pytest.mark.usefixtures("short_start")
def test_an_http_call_may_outlast_the_connect_timeout(
    tmp_path: Path, json_http_server: str
) -> None:
    hold = load_toolset(json_http_server)["hold"]
    go = tmp_path / "go"

    async def held() -> object:
        call = asyncio.ensure_future(hold.fn(go=str(go)))
        try:
            await asyncio.sleep(6)  # twice the connect timeout
            assert not call.done()
        finally:
            go.touch()
        return await call

    assert asyncio.run(held()) == {"result": "held"}


def test_a_url_with_a_query_is_stored_as_text_that_loads_again() -> None:
    server = parse("mcp+http", "//127.0.0.1:9/mcp?team=a&v=2 --prefix=web")
    assert server.url == "http://127.0.0.1:9/mcp?team=a&v=2"
    scheme, _, rest = server.source.partition(":")
    assert scheme == "mcp+http" and parse(scheme, rest) == server
    with_header = MCPServer(url="https://h/mcp?a=1&b=2", headers={"Authorization": "Bearer ${T}"})
    scheme, _, rest = with_header.source.partition(":")
    assert parse(scheme, rest) == with_header


def test_a_stored_stdio_source_starts_the_server_where_the_run_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    shutil.copy(TOY, here / "toy_copy.py")
    toy = Toy(tmp_path)
    monkeypatch.chdir(here)
    env = [f"--env={name}={value}" for name, value in toy.env.items()]
    stored = load_toolset("mcp:" + shlex.join([*env, sys.executable, "toy_copy.py"])).source
    assert f"--cwd={here}" in (stored or "")
    HOST.close()
    monkeypatch.chdir(elsewhere)
    again = load_toolset(stored or "")
    assert "echo" in again and toy.starts() == 2
