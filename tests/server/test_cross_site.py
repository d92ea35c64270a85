"""Browsers cannot act cross-site, and the server answers only to its own Host names.

Over real HTTP to uvicorn on 127.0.0.1: forged cross-site requests, bodies that are not
JSON, rebinding Host headers, ``serve --allowed-host`` in a child process, and a hostile page
on another origin in Debian's ``chromium`` (skipped where that browser is not installed).
"""

from __future__ import annotations

import dataclasses
import functools
import http.server
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from taskdecomp.server import ServerConfig
from tests.clitools import CHILD
from tests.server.browser import chromium_page
from tests.server.support import TOOLSET, Served, ServeProcess, free_port, run_model, wait_for

TOKEN = "t0ken-" + "y" * 40
EVIL = "http://evil.example"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}

# The approval tool leaves a file behind when it runs, so a test sees that it never did.
MARKED = TOOLSET.replace(
    '    return "published " + key',
    '    Path(__file__).with_name("published").write_text(key)\n    return "published " + key',
)

REBINDING = ("--host-resolver-rules=MAP evil.example 127.0.0.1",)
"""evil.example resolves to this machine, as a rebinding attacker's name would."""

# A page on another origin that tries to approve a paused run: a no-cors fetch with a
# body, one without, and a form that submits itself into an iframe.
HOSTILE = """<!doctype html>
<html><body>
<iframe name="sink"></iframe>
<form id="form" method="post" action="{target}" target="sink">
  <input name="plan" value="approved by evil">
</form>
<script>
window.__steps = [];
(async () => {{
  for (const init of [{{body: "{{}}"}}, {{}}]) {{
    try {{
      await fetch("{target}", Object.assign({{method: "POST", mode: "no-cors"}}, init));
      window.__steps.push("fetch");
    }} catch (error) {{ window.__steps.push("fetch failed"); }}
  }}
  document.querySelector("iframe").onload = () => window.__steps.push("form");
  document.getElementById("form").submit();
}})();
</script>
</body></html>
"""


@pytest.fixture
def marked(config: ServerConfig, tmp_path: Path) -> ServerConfig:
    path = tmp_path / "marked" / "tools.py"
    path.parent.mkdir()
    path.write_text(MARKED)
    return dataclasses.replace(config, toolsets={"demo": str(path)})


def published(config: ServerConfig) -> Path:
    return Path(config.toolsets["demo"]).with_name("published")


def paused_run(client: httpx.Client) -> str:
    started = client.post("/runs", json={"goal": "an approval run", "toolset": "demo"})
    assert started.status_code == 202, started.text
    run_id = str(started.json()["run_id"])
    wait_for(lambda: client.get(f"/runs/{run_id}").json()["status"] == "paused")
    return run_id


def assert_problem(response: httpx.Response, status: int, *words: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    detail = response.json()["detail"]
    for word in words:
        assert word in detail, detail


def assert_still_paused(client: httpx.Client, config: ServerConfig, run_id: str) -> None:
    view = client.get(f"/runs/{run_id}").json()
    assert view["status"] == "paused" and view["approval"]["subject"]["tool"] == "publish"
    assert not published(config).exists()  # the approval tool never ran
    assert len(client.get("/runs").json()["runs"]) == 1  # and no run was started


def test_a_cross_site_form_cannot_approve_cancel_resume_or_start(marked: ServerConfig) -> None:
    with Served(marked) as server, server.client() as client:
        run_id = paused_run(client)
        other_port = f"http://127.0.0.1:{free_port()}"  # same site, another origin
        forged = [
            ({"Origin": EVIL, **FORM}, "evil.example"),
            ({"Origin": "null", **FORM}, "'null'"),
            ({"Origin": other_port, **FORM}, other_port),
            ({"Sec-Fetch-Site": "cross-site", **FORM}, "cross-site"),
            ({"Origin": server.url, "Sec-Fetch-Site": "same-site"}, "same-site"),
            ({"Origin": EVIL, "Content-Type": "application/json"}, "evil.example"),
        ]
        for path in ("/approve", "/cancel", "/resume"):
            for headers, named in forged:
                for content in (b"", b"plan=x"):  # an empty form, as a browser sends it, or not
                    response = client.post(
                        f"/runs/{run_id}{path}", headers=headers, content=content
                    )
                    assert_problem(response, 403, "refused", named, "--cors-origin")
        started = client.post(
            "/runs", headers={"Origin": EVIL, **FORM}, content=b"goal=approval&toolset=demo"
        )
        assert_problem(started, 403, "evil.example")
        assert_still_paused(client, marked, run_id)


def test_bodies_that_are_not_json_are_refused_even_without_an_origin(
    marked: ServerConfig,
) -> None:
    goal = b'{"goal": "an approval run", "toolset": "demo"}'
    with Served(marked) as server, server.client() as client:
        run_id = paused_run(client)
        approve = f"/runs/{run_id}/approve"
        for path, headers in (
            ("/runs", {"Content-Type": "text/plain"}),
            ("/runs", {"Content-Type": "text/plain;charset=UTF-8"}),
            ("/runs", {"Content-Type": "multipart/form-data; boundary=x"}),
            ("/runs", {}),  # a body with no type at all (a Blob, in a browser)
            (approve, FORM),
            (approve, {"Content-Type": "text/plain"}),
        ):
            response = client.post(path, headers=headers, content=goal)
            assert_problem(response, 415, "JSON only", "application/json")
        empty_form = client.post(approve, headers=FORM)
        assert_problem(empty_form, 415, "x-www-form-urlencoded")
        assert_still_paused(client, marked, run_id)

        # The page's own requests pass: JSON bodies, and body-less POSTs from its origin.
        own = {"Origin": server.url, "Sec-Fetch-Site": "same-origin"}
        dag = client.post("/runs", json={"goal": "a dag run", "toolset": "demo"})
        assert dag.status_code == 202, dag.text
        approved = client.post(approve, headers=own)
        assert approved.status_code == 202, approved.text
        wait_for(lambda: client.get(f"/runs/{run_id}").json()["status"] == "ok")
        assert published(marked).read_text() == "report"


def test_a_rebinding_host_is_refused_and_loopback_names_pass(served: Served) -> None:
    port = served.url.rsplit(":", 1)[1]
    with served.client() as client:
        for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1:{free_port()}",
                     "localhost", f"localhost.:{port}", f"10.0.0.1:{port}"):  # fmt: skip
            for path in ("/runs", "/", "/static/app.js", "/health"):
                response = client.get(path, headers={"Host": host})
                assert_problem(response, 421, repr(host), f"127.0.0.1:{port}", "--allowed-host")
            # A rebound page is its own origin: it still may not start a run.
            started = client.post(
                "/runs",
                headers={"Host": host, "Origin": f"http://{host}"},
                json={"goal": "a dag run", "toolset": "demo"},
            )
            assert_problem(started, 421, repr(host))
        assert client.get("/runs").json()["runs"] == []
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}",
                     f"LOCALHOST:{port}"):  # fmt: skip
            assert client.get("/runs", headers={"Host": host}).status_code == 200, host
            own = {"Host": host, "Origin": f"http://{host.lower()}"}
            started = client.post("/runs", headers=own, json={"goal": "dag", "toolset": "demo"})
            assert started.status_code == 202, (host, started.text)


def raw_request(port: int, request: bytes) -> tuple[bytes, bytes]:
    """Send ``request`` as it is; the answer's head and body."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, content = answer.partition(b"\r\n\r\n")
    return head, content


def test_a_request_without_a_host_is_refused(served: Served) -> None:
    port = int(served.url.rsplit(":", 1)[1])
    head, content = raw_request(port, b"GET /runs HTTP/1.0\r\n\r\n")  # Host is optional in 1.0
    assert head.split(b" ", 2)[1] == b"400", head
    assert b"content-type: application/problem+json" in head.lower()
    assert b"no Host header" in content and b"runs" not in content
    head, _ = raw_request(port, b"GET /runs HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert head.split(b" ", 2)[1] == b"400", head  # uvicorn refuses this one itself


def test_serve_answers_to_allowed_hosts_only(tmp_path: Path, toolset: Path) -> None:
    env = {**os.environ, "TASKDECOMP_API_TOKEN": TOKEN}
    args = ["--tools", f"demo={toolset}", "--model", run_model(tmp_path),
            "--db", str(tmp_path / "runs.db")]  # fmt: skip
    refused = subprocess.run(
        [*CHILD, "serve", *args, "--allowed-host", "http://tasks.example/"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    assert "--allowed-host 'http://tasks.example/' is not a host name" in refused.stderr
    assert "Traceback" not in refused.stderr

    server = ServeProcess(
        [*args, "--allowed-host", "tasks.example", "--allowed-host", "api.example:9"], env=env
    )
    server.start(token=TOKEN, host="0.0.0.0")
    try:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        port = server.port

        def get(host: str) -> httpx.Response:
            return httpx.get(f"{server.url}/runs", headers={**auth, "Host": host}, timeout=30)

        for host in (f"tasks.example:{port}", "tasks.example", "api.example:9",
                     f"127.0.0.1:{port}", f"localhost:{port}"):  # fmt: skip
            assert get(host).status_code == 200, host
        for host in (f"api.example:{port}", f"other.example:{port}", f"192.0.2.7:{port}"):
            assert_problem(get(host), 421, repr(host), "0.0.0.0", "--allowed-host NAME")
            assert "tasks.example" not in get(host).text  # the names are not told to strangers
    finally:
        server.stop()


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[Any]:
    with chromium_page(tmp_path / "profile", args=REBINDING) as page:
        yield page


@pytest.fixture
def hostile_site(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A static site on another port of this machine, the attacker's."""
    root = tmp_path / "hostile"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=site.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, int(site.server_address[1])
    finally:
        site.shutdown()
        site.server_close()


def test_a_hostile_page_in_chromium_cannot_approve(
    marked: ServerConfig, chromium: Any, hostile_site: tuple[Path, int]
) -> None:
    root, site_port = hostile_site
    page = chromium
    with Served(marked) as server, server.client() as client:
        run_id = paused_run(client)
        target = f"{server.url}/runs/{run_id}/approve"
        (root / "index.html").write_text(HOSTILE.format(target=target))
        answers: list[tuple[str, int]] = []
        page.on(
            "response",
            lambda response: (
                answers.append((response.request.resource_type, response.status))
                if response.url == target
                else None
            ),
        )
        page.goto(f"http://localhost:{site_port}/index.html")
        page.wait_for_function("window.__steps.length === 3")
        wait_for(lambda: len(answers) == 3)
        assert page.evaluate("window.__steps") == ["fetch", "fetch", "form"]
        assert sorted(answers) == [("document", 403), ("fetch", 403), ("fetch", 403)]
        assert_still_paused(client, marked, run_id)


def test_a_rebound_name_in_chromium_gets_nothing(served: Served, chromium: Any) -> None:
    port = served.url.rsplit(":", 1)[1]
    page = chromium
    answer = page.goto(f"http://evil.example:{port}/")  # resolved to 127.0.0.1
    assert answer is not None and answer.status == 421
    listing = page.evaluate("fetch('/runs').then(async (r) => [r.status, (await r.json()).detail])")
    assert listing[0] == 421 and "evil.example" in listing[1]
    start = page.evaluate(
        "fetch('/runs', {method: 'POST', headers: {'Content-Type': 'application/json'},"
        " body: JSON.stringify({goal: 'dag', toolset: 'demo'})}).then((r) => r.status)"
    )
    assert start == 421
    with served.client() as client:
        assert client.get("/runs").json()["runs"] == []
