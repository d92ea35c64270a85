"""The token, the bind address, CORS, and no secrets in responses or logs."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import httpx

from tests.clitools import CHILD
from tests.server.support import Served, ServeProcess, run_model, wait_for

TOKEN = "t0ken-" + "x" * 40
API_KEY = "sk-test-secret-key-0123456789"


def test_serve_refuses_a_wide_address_without_a_token(tmp_path: Path, toolset: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TASKDECOMP_API_TOKEN"}
    done = subprocess.run(
        [*CHILD, "serve", "--host", "0.0.0.0", "--tools", f"demo={toolset}",
         "--model", run_model(tmp_path), "--db", str(tmp_path / "runs.db")],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "TASKDECOMP_API_TOKEN" in lines[0] and "0.0.0.0" in lines[0]
    assert "Traceback" not in done.stderr


def test_bound_wide_every_api_request_needs_the_token(tmp_path: Path, toolset: Path) -> None:
    env = {**os.environ, "TASKDECOMP_API_TOKEN": TOKEN, "OPENAI_API_KEY": API_KEY}
    server = ServeProcess(
        ["--tools", f"demo={toolset}", "--model", run_model(tmp_path),
         "--db", str(tmp_path / "runs.db"), "--log-level", "info"],
        env=env,
    )  # fmt: skip
    server.start(token=TOKEN, host="0.0.0.0")
    texts = []
    try:
        url = server.url
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN},
                        {"Authorization": f"Basic {TOKEN}"}):  # fmt: skip
            for method, path in (("GET", "/runs"), ("POST", "/runs"), ("GET", "/openapi.json"),
                                 ("GET", "/runs/x/events"), ("POST", "/chat")):  # fmt: skip
                response = httpx.request(method, url + path, headers=headers, json={}, timeout=10)
                assert response.status_code == 401, (method, path, headers)
                assert response.headers["content-type"] == "application/problem+json"
                assert response.headers["www-authenticate"] == "Bearer"
                texts.append(response.text)
        page = httpx.get(url + "/", timeout=10)
        assert page.status_code == 200 and "<html" in page.text  # the page itself holds no data
        good = {"Authorization": f"Bearer {TOKEN}"}
        started = httpx.post(url + "/runs", json={"goal": "dag", "toolset": "demo"}, headers=good)
        assert started.status_code == 202
        run_id = started.json()["run_id"]
        view = wait_for(
            lambda: (
                (v := httpx.get(f"{url}/runs/{run_id}", headers=good).json())["status"] == "ok"
                and v
            )
        )
        texts += [started.text, str(view), httpx.get(url + "/models", headers=good).text]
        texts.append(httpx.get(f"{url}/runs/{run_id}/events", headers=good, timeout=30).text)
    finally:
        _code, err = server.stop()
    texts.append(err)
    for text in texts:
        assert TOKEN not in text and API_KEY not in text
    assert "GET /runs" in err  # the access log was on, and it holds neither secret


def test_cors_is_off_unless_configured(config, tmp_path: Path) -> None:
    origin = "http://app.example"
    preflight = {"Origin": origin, "Access-Control-Request-Method": "POST"}
    with Served(config) as server, server.client() as client:
        plain = client.get("/runs", headers={"Origin": origin})
        assert "access-control-allow-origin" not in plain.headers
        assert (
            "access-control-allow-origin" not in client.options("/runs", headers=preflight).headers
        )
    with (
        Served(dataclasses.replace(config, cors_origins=(origin,))) as server,
        server.client() as client,
    ):
        answered = client.options("/runs", headers=preflight)
        assert answered.headers["access-control-allow-origin"] == origin
        other = client.get("/runs", headers={"Origin": "http://evil.example"})
        assert "access-control-allow-origin" not in other.headers


def test_a_token_set_on_loopback_is_required_too(config) -> None:
    with Served(dataclasses.replace(config, token=TOKEN)) as server:
        assert httpx.get(server.url + "/runs").status_code == 401
        with server.client() as client:
            assert client.get("/runs").status_code == 200
