"""The README's "Serve it" section, done as a new user would: its command, its clicks, its curl.

The command is taken from README.md and run as written, in a child process from the
repository's root, with only a free port added (``TASKDECOMP_HOME``, a temporary directory,
holds the store and the report's outbox). The page is driven in Debian's ``chromium``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.clitools import EXE
from tests.conftest import ROOT
from tests.server import test_web_page
from tests.server.support import free_port, wait_for, wait_up
from tests.server.test_web_page import NO_OVERFLOW

README = ROOT / "README.md"
SECTION = "## Serve it"
REPORT = "sales-2026-04-manager-42.md"

browser_page = test_web_page.browser_page  # Debian's chromium, as the page tests drive it


def readme_section() -> str:
    """The README's "Serve it" section, up to the next heading of its level."""
    text = README.read_text()
    start = text.find(f"\n{SECTION}\n")
    assert start >= 0, f"README.md has no {SECTION!r} section"
    end = text.find("\n## ", start + len(SECTION) + 2)
    return text[start : end if end >= 0 else len(text)]


def bash_commands() -> list[str]:
    """Each command of the section's bash blocks, continuation lines joined, comments kept."""
    blocks = re.findall(r"```bash\n(.*?)```", readme_section(), flags=re.S)
    assert blocks, f"the README's {SECTION!r} section has no ```bash block"
    return [line for block in blocks for line in block.replace("\\\n", " ").splitlines() if line]


def serve_argv() -> list[str]:
    """The section's ``taskdecomp serve`` command, as its words."""
    found = [shlex.split(line) for line in bash_commands() if line.startswith("taskdecomp serve")]
    assert len(found) == 1, f"README's {SECTION!r} has no single `taskdecomp serve` command"
    return found[0]


@dataclass(frozen=True)
class Curl:
    """One curl command of the section: its method, path and JSON body."""

    method: str
    path: str
    body: Any = None


def curl_commands() -> list[Curl]:
    """The section's curl commands, in order."""
    calls = []
    for line in bash_commands():
        if not line.startswith("curl "):
            continue
        words = shlex.split(line, comments=True)
        url = next(word for word in words if word.startswith("localhost:8000/"))
        method = words[words.index("-X") + 1] if "-X" in words else "GET"
        body = json.loads(words[words.index("-d") + 1]) if "-d" in words else None
        calls.append(Curl(method, url.removeprefix("localhost:8000"), body))
    assert calls, f"README's {SECTION!r} has no curl command"
    return calls


def readme_goal() -> str:
    """The goal the section starts its run with (the curl POST's, also given in its prose)."""
    start = curl_commands()[0]
    assert (start.method, start.path) == ("POST", "/runs"), start
    goal = str(start.body["goal"])
    assert f"`{goal}`" in readme_section(), "the prose and the curl POST give different goals"
    return goal


@pytest.fixture
def readme_server(tmp_path: Path, clean_env: Path) -> Iterator[str]:
    """The README's serve command, running from the repository's root; its URL."""
    argv = serve_argv()
    assert argv[:2] == ["taskdecomp", "serve"] and "--port" not in argv, argv
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen(
        [str(EXE), *argv[1:], "--port", str(port)],
        cwd=ROOT,
        env=dict(os.environ),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_up(url, timeout=60)
        except AssertionError:
            proc.terminate()
            proc.wait(timeout=60)
            raise AssertionError((tmp_path / "serve.log").read_text()) from None
        yield url
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
        log.close()


def sent_report(home: Path) -> str:
    """The report ``send_report`` wrote to the outbox in the data directory."""
    path = home / "outbox" / REPORT
    assert path.is_file(), sorted(str(p) for p in home.rglob("*"))
    return path.read_text()


def test_the_readme_serve_command_runs_an_approval_from_the_page(
    readme_server: str, clean_env: Path, tmp_path: Path, browser_page: Any
) -> None:
    page = browser_page
    goal = readme_goal()
    for button in ("Start run", "Approve"):  # the README names the buttons the page has
        assert f"**{button}**" in readme_section(), button
    page.goto(readme_server + "/")
    page.wait_for_selector("#toolset option[value=sales]", state="attached")
    page.get_by_placeholder("Goal").fill(goal)
    page.get_by_role("button", name="Start run").click()
    page.wait_for_function("location.hash.startsWith('#/runs/')")

    page.wait_for_selector("#approval:not([hidden])")
    assert page.text_content("#run-status") == "paused"
    text = page.text_content("#approval-text") or ""
    assert text.startswith("The call of send_report in step step_6 waits for approval"), text
    assert '"net_sales_usd":26825' in text  # the figures the human approves
    assert not (clean_env / "outbox").exists()  # nothing sent before the approval
    page.screenshot(path=str(tmp_path / "paused-1280.png"), full_page=True)
    page.set_viewport_size({"width": 400, "height": 860})
    assert page.evaluate(NO_OVERFLOW), page.evaluate("document.body.scrollWidth")
    page.screenshot(path=str(tmp_path / "paused-400.png"), full_page=True)

    page.get_by_role("button", name="Approve").click()
    page.wait_for_selector("#run-status[data-status=ok]")
    assert page.is_hidden("#approval")
    assert "The report was sent to Anna." in (page.text_content("#answer") or "")
    result = page.locator('#steps li[data-step-id="step_6"] .result')
    assert result.is_visible() and REPORT in result.inner_text()
    report = sent_report(clean_env)
    assert "Net sales: $26,825.00" in report and "Refund rate: 4.86%" in report
    for name in ("paused-1280.png", "paused-400.png"):
        assert (tmp_path / name).stat().st_size > 5000


def test_the_readme_curl_flow_pauses_and_approves(readme_server: str, clean_env: Path) -> None:
    start, paused, approve, done = curl_commands()
    with httpx.Client(base_url=readme_server, timeout=30) as client:
        response = send(client, start)
        assert response.status_code == 202, response.text
        run_id = response.json()["run_id"]
        view = settled(client, paused, run_id)
        assert view["status"] == "paused" and view["approval"]["kind"] == "tool", view
        assert view["approval"]["subject"]["tool"] == "send_report"
        assert not (clean_env / "outbox").exists()

        response = send(client, approve, run_id)
        assert response.status_code == 202, response.text
        view = settled(client, done, run_id)
    assert (view["status"], view["stop_reason"]) == ("ok", "success"), view
    sent = view["history"][-1]
    assert sent["plan_step"]["id"] == "step_6"
    assert sent["observation"] == {"sent_to": 42, "file": str(clean_env / "outbox" / REPORT)}
    assert "Net sales: $26,825.00" in sent_report(clean_env)


def send(client: httpx.Client, curl: Curl, run_id: str = "") -> httpx.Response:
    """What the curl command sends, with RUN_ID filled in."""
    path = curl.path.replace("RUN_ID", run_id)
    if curl.body is None:
        return client.request(curl.method, path)
    return client.request(curl.method, path, json=curl.body)


def settled(client: httpx.Client, curl: Curl, run_id: str) -> Any:
    """The run's view once it no longer waits to start or runs."""

    def view() -> Any:
        response = send(client, curl, run_id)
        assert response.status_code == 200, response.text
        body = response.json()
        return body if body["status"] not in ("queued", "running") else None

    return wait_for(view, timeout=60)
