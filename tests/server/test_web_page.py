"""The web page in headless Chromium: a DAG run turning done live, an approval, a growing tree.

Debian's ``chromium`` driven by Playwright (never a downloaded browser); the test is skipped
where that browser is not installed.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.support import Served, decomp_model, run_model

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip

# Records every state a DAG node takes and every size the plan tree has, with the time.
WATCH = """
window.__states = []; window.__treeSizes = [];
new MutationObserver((records) => {
  for (const r of records) {
    const el = r.target;
    if (r.type === "attributes" && el.classList && el.classList.contains("node")) {
      window.__states.push({id: el.dataset.stepId, state: el.dataset.state, t: performance.now()});
    }
  }
  const tree = document.getElementById("tree");
  if (tree) {
    const size = tree.querySelectorAll("li").length;
    const sizes = window.__treeSizes;
    if (!sizes.length || sizes[sizes.length - 1] !== size) sizes.push(size);
  }
}).observe(document, {
  subtree: true, childList: true, attributes: true, attributeFilter: ["data-state"],
});
"""


@pytest.fixture
def browser_page(tmp_path: Path) -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, args=ARGS, headless=True
        )
        context.add_init_script(WATCH)
        page = context.new_page()
        page.set_default_timeout(30_000)
        try:
            yield page
        finally:
            context.close()


def test_the_page_follows_runs_approvals_and_a_growing_tree(
    config, tmp_path: Path, browser_page: Any
) -> None:
    live = dataclasses.replace(
        config,
        models=(run_model(tmp_path, seconds=0.6),),
        decomp_model=decomp_model(tmp_path, latency_ms=400),
    )
    page = browser_page
    with Served(live) as server:
        page.goto(server.url + "/")
        page.wait_for_selector("#toolset option[value=demo]", state="attached")

        # A DAG run: a and b in parallel, then c, then d; each node turns done as it happens.
        page.fill("#goal", "a dag run")
        page.click("#start-run")
        page.wait_for_function("document.querySelectorAll('#dag .node').length === 4")
        for step in "abcd":
            page.wait_for_selector(f'#dag .node[data-step-id="{step}"][data-state=done]')
        page.wait_for_selector("#run-status[data-status=ok]")
        assert page.text_content("#answer") == "All steps are done."
        page.screenshot(path=str(tmp_path / "dag.png"), full_page=True)
        done = {s["id"]: s["t"] for s in page.evaluate("window.__states") if s["state"] == "done"}
        assert set(done) == {"a", "b", "c", "d"}
        assert max(done["a"], done["b"]) + 300 < done["c"] and done["c"] + 300 < done["d"]
        running = {
            s["id"]: s["t"] for s in page.evaluate("window.__states") if s["state"] == "running"
        }
        assert running["c"] < done["c"] and running["d"] < done["d"]  # shown running first

        # A run that waits for a human: the page shows the call, the human approves it.
        page.fill("#goal", "an approval run")
        page.click("#start-run")
        page.wait_for_selector("#approval:not([hidden])")
        assert "publish" in page.text_content("#approval-text")
        page.wait_for_selector('#dag .node[data-step-id="ship"][data-state=waiting]')
        page.click("#approve")
        page.wait_for_selector('#dag .node[data-step-id="ship"][data-state=done]')
        page.wait_for_selector("#run-status[data-status=ok]")
        assert page.is_hidden("#approval")
        page.screenshot(path=str(tmp_path / "approved.png"), full_page=True)

        # A plan tree, decomposed level by level while the page watches.
        page.fill("#plan-title", "Conference")
        page.click("#create-plan")
        page.wait_for_function("document.querySelectorAll('#tree li').length === 8")
        page.wait_for_selector("#jobs li[data-state=done]")
        summary = page.text_content("#jobs li")
        page.screenshot(path=str(tmp_path / "tree.png"), full_page=True)
        sizes = page.evaluate("window.__treeSizes")
        runs_listed = page.eval_on_selector_all("#runs li", "items => items.length")
    assert summary is not None and summary.startswith("Plan #1 got 7 subtasks; node ")
    assert sizes[-1] == 8 and len([s for s in sizes if 0 < s < 8]) >= 1, sizes  # it grew
    assert runs_listed == 2
    for name in ("dag.png", "approved.png", "tree.png"):
        assert (tmp_path / name).stat().st_size > 5000
