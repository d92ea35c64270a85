"""The web page runs a plan tree in headless Chromium and shows each node's status live.

Debian's ``chromium`` driven by Playwright (never a downloaded browser). The plan is grown
by the server's decomposer; the page's Run buttons start ``tree`` runs of the plan and of
one node, and the run view draws the tree as its nodes start, split and end.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskdecomp.server import ServerConfig
from tests.server.browser import chromium_page
from tests.server.support import Served
from tests.server.tree_support import ANSWER, RESULTS, conference, node_id, tree_model

# Records every status a node of the run's tree takes, with the time.
WATCH = """
window.__nodes = [];
new MutationObserver((records) => {
  for (const r of records) {
    const el = r.target;
    if (r.type === "attributes" && el.matches && el.matches("#run-tree li")) {
      window.__nodes.push({id: Number(el.dataset.nodeId), status: el.dataset.status,
                           t: performance.now()});
    }
    for (const added of r.addedNodes || []) {
      if (!added.querySelectorAll) continue;
      for (const li of added.querySelectorAll("li[data-node-id]")) {
        if (!li.closest("#run-tree")) continue;
        window.__nodes.push({id: Number(li.dataset.nodeId), status: li.dataset.status,
                             t: performance.now()});
      }
    }
  }
}).observe(document, {subtree: true, childList: true, attributes: true,
                      attributeFilter: ["data-status"]});
"""

ALL_OK = """() => {
  const items = [...document.querySelectorAll('#run-tree li')];
  return items.length > 0 && items.every((li) => li.dataset.status === 'ok');
}"""


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Any]:
    with chromium_page(tmp_path / "profile", init_script=WATCH) as opened:
        errors: list[str] = []
        opened.on("pageerror", lambda error: errors.append(str(error)))
        yield opened
    assert errors == [], errors  # the page's scripts never threw


@pytest.fixture
def slow_tree(config: ServerConfig, tmp_path: Path) -> ServerConfig:
    """Every answer of the run's model takes 300 ms: long enough to watch the nodes."""
    model = tree_model(tmp_path / "tree.json", latency_ms=300)
    return dataclasses.replace(config, models=(model, *config.models))


def statuses(page: Any, node: int) -> list[str]:
    """The statuses node ``node`` took on the page, in order, each change once."""
    seen: list[str] = []
    for entry in page.evaluate("window.__nodes"):
        if entry["id"] == node and (not seen or seen[-1] != entry["status"]):
            seen.append(entry["status"])
    return seen


def test_the_plan_page_runs_the_tree_and_the_run_view_follows_each_node(
    slow_tree: ServerConfig, tmp_path: Path, page: Any
) -> None:
    posts: list[dict[str, Any]] = []
    page.on(
        "request",
        lambda request: (
            request.method == "POST"
            and posts.append(
                {
                    "url": request.url,
                    "type": request.headers.get("content-type"),
                    "body": request.post_data,
                }
            )
        ),
    )
    with Served(slow_tree) as server:
        with server.client() as client:
            tree = conference(client)
        plan_id = tree["id"]
        venue, sponsors = node_id(tree, "Venue"), node_id(tree, "Sponsors")
        page.goto(f"{server.url}/#/plans/{plan_id}")
        page.wait_for_selector("#toolset option[value=demo]", state="attached")
        page.wait_for_function("document.querySelectorAll('#tree li').length === 8")
        page.screenshot(path=str(tmp_path / "plan.png"), full_page=True)

        page.click("#run-plan")
        page.wait_for_function("location.hash.startsWith('#/runs/')")
        run_id = page.evaluate("decodeURIComponent(location.hash.slice(7))")
        page.wait_for_selector("#run-tree:not([hidden])")
        page.wait_for_function("document.querySelectorAll('#run-tree li').length === 10")
        page.wait_for_function(ALL_OK)
        page.wait_for_selector("#run-status[data-status=ok]")
        assert page.text_content("#answer") == ANSWER
        assert page.is_hidden(".dag-wrap")  # a tree run is drawn as its tree, not a DAG
        book = f'#run-tree li[data-node-id="{node_id(tree, "Book")}"]'
        assert RESULTS["Book"] in page.text_content(f"{book} > .result")
        split = page.text_content(f'#run-tree li[data-node-id="{sponsors}"] > .tree-why')
        page.screenshot(path=str(tmp_path / "tree-run.png"), full_page=True)
        watched = {node: statuses(page, node) for node in (venue, sponsors)}
        with server.client() as client:
            view = client.get(f"/runs/{run_id}").json()

        # The same run opened by its URL: the tree comes from GET /runs/{id}.
        page.goto(f"{server.url}/#/plans/{plan_id}")
        page.wait_for_function("document.querySelectorAll('#tree li').length === 10")
        page.goto(f"{server.url}/#/runs/{run_id}")
        page.reload()
        page.wait_for_function(ALL_OK)
        reloaded = page.eval_on_selector_all("#run-tree li", "items => items.length")

        # One node's subtree, as it is: the Run button of the node.
        page.goto(f"{server.url}/#/plans/{plan_id}")
        page.wait_for_selector(f'#tree li[data-node-id="{venue}"] > button.run')
        page.select_option("#plan-decompose", "none")
        page.click(f'#tree li[data-node-id="{venue}"] > button.run')
        page.wait_for_function("id => !location.hash.endsWith(id)", arg=run_id)
        page.wait_for_selector("#run-status[data-status=ok]")
        page.wait_for_function(ALL_OK)
        subtree = page.eval_on_selector_all(
            "#run-tree li", "items => items.map((li) => li.querySelector('.tree-name').textContent)"
        )
        page.set_viewport_size({"width": 400, "height": 860})
        wide = page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        page.screenshot(path=str(tmp_path / "node-run-400.png"), full_page=True)

        # A split that waits for a human: approved from the page, its children then run.
        with server.client() as client:
            fresh = conference(client)  # Sponsors unsplit again
            body = {"toolset": "demo", "options": {"approve_decompositions": True}}
            unsplit = node_id(fresh, "Sponsors")
            path = f"/plans/{fresh['id']}/nodes/{unsplit}/runs"
            gated = client.post(path, json=body).json()
        page.goto(f"{server.url}/#/runs/{gated['run_id']}")
        page.wait_for_selector("#approval:not([hidden])")
        asked = page.text_content("#approval-text")
        page.wait_for_selector(f'#run-tree li[data-node-id="{unsplit}"][data-status=decomposed]')
        page.click("#approve")
        page.wait_for_selector("#run-status[data-status=ok]")
        page.wait_for_function(ALL_OK)
        assert page.is_hidden("#approval")

    assert view["status"] == "ok" and all(n["status"] == "ok" for n in view["tree"]["nodes"])
    # Live: the inner node ran while its children did; the split showed before it ended.
    assert watched[venue][-2:] == ["running", "ok"], watched
    assert watched[sponsors][-2:] == ["decomposed", "ok"], watched
    assert split is not None and "too many sponsors to sign at once" in split
    assert reloaded == 10
    assert subtree == [f"[{venue}] Venue", *[
        f"[{node_id(tree, name)}] {name}" for name in ("Shortlist", "Book")
    ]]  # fmt: skip
    assert wide
    assert asked == (
        "A split waits for approval before its 2 subtasks run: Find sponsors, Sign sponsors."
    )
    runs = [post for post in posts if post["url"].endswith("/runs")]
    assert posts[-1]["url"].endswith(f"/runs/{gated['run_id']}/approve")
    assert [post["url"].removeprefix(server.url) for post in runs] == [
        f"/plans/{plan_id}/runs",
        f"/plans/{plan_id}/nodes/{venue}/runs",
    ]
    for post in runs:  # JSON bodies, with the form's choices
        assert post["type"] == "application/json", post
        body = json.loads(post["body"])
        assert body["toolset"] == "demo" and body["model"] == slow_tree.models[0]
    assert [json.loads(post["body"])["options"]["decompose"] for post in runs] == [
        "as-needed",
        "none",
    ]
    for name in ("plan.png", "tree-run.png", "node-run-400.png"):
        assert (tmp_path / name).stat().st_size > 5000
