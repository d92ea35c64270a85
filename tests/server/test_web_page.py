"""The web page in headless Chromium: a DAG run turning done live, an approval, a growing tree.

Debian's ``chromium`` driven by Playwright (never a downloaded browser); the test is skipped
where that browser is not installed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.browser import chromium_page
from tests.server.support import (
    Served,
    ServeProcess,
    approval_plan,
    decomp_model,
    run_model,
    step,
    wait_for,
    write_script,
)

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
    with chromium_page(tmp_path / "profile", init_script=WATCH) as page:
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        yield page
    assert errors == [], errors  # the page's scripts never threw


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


# ---- the page as a new user meets it: long text, narrow screens, URLs, stops, approvals ----

LONG_GOAL = (
    "Prepare an April 2026 monthly sales summary in USD with gross sales, refunds, net sales,"
    " the refund rate and one risk note for manager_id=42"
)
# A tool error with no place to break a line: the event log must not widen the page for it.
LONG_ERROR = "upstream refused https://reports.example.com/" + "x" * 300

FAILING_TOOL = '''

def fail(reason: str) -> str:
    """Fail with the reason given."""
    raise RuntimeError(reason)
'''


def long_titles_plan() -> dict[str, Any]:
    steps = [
        step("fetch_sales", "work", {"name": "sales"}, []),
        step("fetch_refunds", "work", {"name": "refunds"}, []),
        step("kpis", "work", {"name": "kpis"}, ["fetch_sales", "fetch_refunds"]),
        step("summary_for_manager_42", "work", {"name": "summary"}, ["kpis"]),
    ]
    steps[0]["title"] = "Fetch the DAILY GROSS SALES for April 2026 from the WAREHOUSE"
    steps[3]["title"] = "Write the MONTHLY SUMMARY for manager_id=42"
    return {"kind": "plan", "steps": steps}


def failing_plan() -> dict[str, Any]:
    return {
        "kind": "plan",
        "steps": [
            step("first", "work", {"name": "first"}),
            step("boom", "fail", {"reason": LONG_ERROR}),
            step("last", "work", {"name": "last"}),
        ],
    }


@pytest.fixture
def page_config(config: Any, tmp_path: Path, toolset: Path) -> Any:
    """The demo toolset plus a failing tool; a model with long titles, a failure, no match."""
    toolset.write_text(toolset.read_text() + FAILING_TOOL)
    model = write_script(
        tmp_path / "page-model.json",
        ("task decomposition planner.*manager_id=42", long_titles_plan()),
        ("task decomposition planner.*upstream", failing_plan()),
        ("task decomposition planner.*an approval run", approval_plan()),
        ("reporting assistant", "All steps are done."),
    )
    return dataclasses.replace(config, models=(model,))


def start_run(server: Served, goal: str) -> str:
    with server.client() as client:
        response = client.post("/runs", json={"goal": goal, "toolset": "demo"})
        assert response.status_code == 202, response.text
        run_id = str(response.json()["run_id"])
        wait_for(lambda: client.get(f"/runs/{run_id}").json()["status"] in ("ok", "stopped"))
    return run_id


def open_run(page: Any, url: str, run_id: str, *, click: bool = False) -> None:
    """Show the run: by its URL, or by a click on it in the list of runs."""
    if click:
        page.goto(url + "/")
        page.click(f'#runs li[data-run-id="{run_id}"]')
    else:
        page.goto(f"{url}/#/runs/{run_id}")
    page.wait_for_function(
        "id => document.getElementById('run-meta').textContent.includes(id)", arg=run_id
    )
    page.wait_for_selector("#run-status[data-status=ok], #run-status[data-status=stopped]")


NO_OVERFLOW = "document.documentElement.scrollWidth <= window.innerWidth"

CLIPPED = """el => ({text: el.textContent, title: el.title, cut: el.scrollWidth > el.clientWidth,
  ellipsis: getComputedStyle(el).textOverflow === 'ellipsis'})"""

# Each label of each DAG node, and whether its box holds it.
LABELS = """() => [...document.querySelectorAll('#dag .node')].flatMap((g) => {
  const box = g.querySelector('rect').getBoundingClientRect();
  return [...g.querySelectorAll('text')].map((t) => {
    const r = t.getBoundingClientRect();
    return {id: g.dataset.stepId, text: t.textContent, full: g.querySelector('title').textContent,
      inside: r.left >= box.left && r.right <= box.right && r.top >= box.top
        && r.bottom <= box.bottom};
  });
})"""


def test_a_run_reads_whole_at_1280_and_400_px(
    page_config: Any, tmp_path: Path, browser_page: Any
) -> None:
    page = browser_page
    with Served(page_config) as server:
        long_run = start_run(server, LONG_GOAL)
        failed_run = start_run(server, "a run whose upstream fails")
        unmatched_run = start_run(server, "a goal the model has no plan for")
        for width, height in ((1280, 900), (400, 860)):
            page.set_viewport_size({"width": width, "height": height})
            open_run(page, server.url, long_run, click=True)

            # The goal in the list: cut with an ellipsis, whole on hover; whole in the heading.
            listed = page.eval_on_selector(f'#runs li[data-run-id="{long_run}"] .clip', CLIPPED)
            assert listed == {"text": LONG_GOAL, "title": LONG_GOAL, "cut": True, "ellipsis": True}
            assert page.text_content("#run-goal") == LONG_GOAL

            # Every label inside its box; the long ones end in an ellipsis, whole in the tooltip.
            labels = page.evaluate(LABELS)
            assert len(labels) == 8 and all(label["inside"] for label in labels), labels
            sales = next(label for label in labels if label["id"] == "fetch_sales")
            assert sales["text"].endswith("…"), sales
            assert sales["full"].startswith(
                "fetch_sales: Fetch the DAILY GROSS SALES for April 2026 from the WAREHOUSE"
            )

            # Each step's result and trace, on the page without a click.
            result = page.locator('#steps li[data-step-id="kpis"] .result summary')
            assert result.is_visible() and '{"done":"kpis"}' in result.inner_text()
            trace = page.locator('#steps li[data-step-id="kpis"] .trace')
            assert trace.is_visible() and trace.inner_text().split()[1] == "ok"
            assert page.is_hidden("#run-stop")
            assert page.evaluate(NO_OVERFLOW), page.evaluate("document.body.scrollWidth")
            page.screenshot(path=str(tmp_path / f"run-{width}.png"), full_page=True)

            # A stopped run says why: the stop reason and the tool's error, as readable rows.
            open_run(page, server.url, failed_run, click=True)
            page.wait_for_selector("#run-stop:not([hidden])")
            page.wait_for_selector('#event-log li[data-kind="end"]', state="attached")
            assert page.text_content("#stop-reason") == "tool_error:fail"
            assert LONG_ERROR in page.text_content("#stop-message")
            assert page.is_visible('#steps li[data-step-id="boom"] .trace .error')
            row = page.locator('#event-log li[data-kind="StepFinished"]').last
            assert LONG_ERROR in row.locator("summary .clip").get_attribute("title")
            row.locator("summary").click()  # the whole event, opened
            assert '"step_id": "boom"' in row.locator("pre").inner_text()
            assert page.evaluate(NO_OVERFLOW), page.evaluate("document.body.scrollWidth")
            page.screenshot(path=str(tmp_path / f"stopped-{width}.png"), full_page=True)

            open_run(page, server.url, unmatched_run, click=True)
            page.wait_for_selector("#run-stop:not([hidden])")
            assert page.text_content("#stop-reason") == "llm_error:script_no_match"
            assert "no rule matches the plan request" in page.text_content("#stop-message")
            assert page.evaluate(NO_OVERFLOW)
    for name in ("run-1280.png", "run-400.png", "stopped-1280.png", "stopped-400.png"):
        assert (tmp_path / name).stat().st_size > 5000


def test_each_run_and_plan_has_its_own_url(
    page_config: Any, tmp_path: Path, browser_page: Any
) -> None:
    page = browser_page
    with Served(page_config) as server:
        first = start_run(server, LONG_GOAL)
        second = start_run(server, "a run whose upstream fails")
        with server.client() as client:
            plan = client.post("/plans", json={"title": "Conference", "auto_decompose": False})
            plan_id = plan.json()["id"]
        open_run(page, server.url, first)
        page.reload()  # the URL alone brings the run back
        page.wait_for_selector('#steps li[data-step-id="kpis"] .result')
        assert page.text_content("#run-goal") == LONG_GOAL

        page.click(f'#runs li[data-run-id="{second}"]')
        page.wait_for_function("id => location.hash === '#/runs/' + id", arg=second)
        page.wait_for_selector("#run-stop:not([hidden])")
        page.go_back()
        page.wait_for_function(
            "goal => document.getElementById('run-goal').textContent === goal", arg=LONG_GOAL
        )
        assert page.is_hidden("#run-stop")
        page.go_forward()
        page.wait_for_selector("#run-stop:not([hidden])")

        page.set_viewport_size({"width": 400, "height": 860})
        page.click(f'#plans li[data-plan-id="{plan_id}"]')
        page.wait_for_function("id => location.hash === '#/plans/' + id", arg=str(plan_id))
        page.reload()
        page.wait_for_selector("#plan-view:not([hidden])")
        assert page.text_content("#plan-heading") == f"Plan #{plan_id}: Conference"
        page.wait_for_selector('#tree li[data-node-id="1"]')
        assert page.evaluate(NO_OVERFLOW)
        page.screenshot(path=str(tmp_path / "plan-400.png"), full_page=True)
        page.go_back()  # to the run shown before the plan, at 400 px
        page.wait_for_function("id => location.hash === '#/runs/' + id", arg=second)
        page.wait_for_selector("#run-stop:not([hidden])")
        assert page.is_hidden("#plan-view")
        assert page.evaluate(NO_OVERFLOW)


def test_approving_and_rejecting_from_the_page_under_taskdecomp_serve(
    tmp_path: Path, toolset: Path, browser_page: Any
) -> None:
    page = browser_page
    posts: list[dict[str, Any]] = []

    def record(request: Any) -> None:
        if request.method == "POST":
            headers, body = request.headers, request.post_data
            posts.append({"url": request.url, "type": headers.get("content-type"), "body": body})

    page.on("request", record)
    server = ServeProcess(
        ["--tools", f"demo={toolset}", "--model", run_model(tmp_path),
         "--db", str(tmp_path / "runs.db")],
    ).start()  # fmt: skip
    try:
        page.goto(server.url + "/")
        page.wait_for_selector("#toolset option[value=demo]", state="attached")
        page.fill("#goal", "an approval run")
        page.click("#start-run")
        page.wait_for_function("location.hash.startsWith('#/runs/')")
        page.wait_for_selector("#approval:not([hidden])")
        page.click("#approve")
        page.wait_for_selector("#run-status[data-status=ok]")
        assert page.is_visible('#steps li[data-step-id="ship"] .result')
        assert "published report" in page.text_content('#steps li[data-step-id="ship"] .result')

        page.set_viewport_size({"width": 400, "height": 860})
        page.fill("#goal", "another approval run")
        page.click("#start-run")
        page.wait_for_selector("#approval:not([hidden])")
        page.wait_for_selector('#dag .node[data-step-id="ship"][data-state=waiting]')
        assert page.evaluate(NO_OVERFLOW)
        page.screenshot(path=str(tmp_path / "paused-400.png"), full_page=True)
        page.fill("#reject-reason", "not this week")
        page.click("#reject")
        page.wait_for_selector("#run-status[data-status=stopped]")
        assert page.text_content("#stop-reason") == "approval_rejected"
        assert page.text_content("#stop-message") == "rejected: not this week"
        page.screenshot(path=str(tmp_path / "rejected.png"), full_page=True)
    finally:
        server.stop()
    actions = [post["url"].rsplit("/", 1)[-1] for post in posts]
    assert actions == ["runs", "approve", "runs", "reject"], posts
    for post in posts:  # every POST the page makes is JSON, {} when there is nothing to say
        assert post["type"] == "application/json", post
        assert isinstance(json.loads(post["body"]), dict), post


def test_older_runs_come_a_page_at_a_time_when_the_list_has_a_cursor(
    config: Any, browser_page: Any
) -> None:
    page = browser_page
    with Served(config) as server, server.client() as client:
        run_ids = [
            client.post("/runs", json={"goal": f"a dag run {n}", "toolset": "demo"}).json()[
                "run_id"
            ]
            for n in range(55)
        ]
        if "next_cursor" not in client.get("/runs?limit=50").json():
            pytest.skip("GET /runs pages by offset only: the page has no older runs to offer")
        page.goto(server.url + "/")
        page.wait_for_function("document.querySelectorAll('#runs li').length === 50")
        assert page.query_selector(f'#runs li[data-run-id="{run_ids[0]}"]') is None
        page.click("#older-runs")
        page.wait_for_function("document.querySelectorAll('#runs li').length === 55")
        assert page.is_hidden("#older-runs")  # no page left
        page.click(f'#runs li[data-run-id="{run_ids[0]}"]')
        page.wait_for_function("id => location.hash === '#/runs/' + id", arg=run_ids[0])
