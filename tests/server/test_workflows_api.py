"""Workflow runs over real HTTP: the example workflow started, streamed, listed and shown.

The operator registers the built-in ``default`` workflow with the example's workspace as
its template; the scripted model of ``examples/workflow`` drives its agents.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from taskdecomp.errors import ConfigError
from taskdecomp.server import ServerConfig
from tests.clitools import cli
from tests.conftest import EXAMPLES
from tests.server.browser import chromium_page
from tests.server.support import Served, ServeProcess, run_model, sse_events, wait_for

SCRIPT = EXAMPLES / "workflow" / "script.json"
DESIGN = (EXAMPLES / "workflow" / "design.md").read_text(encoding="utf-8")
MODEL = f"scripted:{SCRIPT}"
TASKS = {
    "decomposedFrom": "design.md",
    "tasks": [
        {
            "id": "T1",
            "title": "Add calc.add",
            "summary": "add(a, b) in calc/add.py",
            "filesAllowed": ["calc/add.py"],
            "acceptanceCriteria": ["add(1, 2) == 3"],
        }
    ],
}


def slow_script(tmp_path: Path, latency_ms: int) -> str:
    """The example's script with a latency on every call, so a run can be caught running."""
    script = json.loads(SCRIPT.read_text(encoding="utf-8"))
    script["latency_ms"] = latency_ms
    path = tmp_path / "slow.json"
    path.write_text(json.dumps(script), encoding="utf-8")
    return f"scripted:{path}"


def clashing(tmp_path: Path) -> Path:
    """A toolset with a tool named like one of the workflow's own."""
    path = tmp_path / "clash.py"
    path.write_text('def read_file(path: str) -> str:\n    """Read."""\n    return path\n')
    return path


@pytest.fixture
def served(tmp_path: Path, toolset: Path) -> Iterator[Served]:
    config = ServerConfig(
        store_url=str(tmp_path / "runs.db"),
        toolsets={"demo": str(toolset), "clash": str(clashing(tmp_path))},
        models=(run_model(tmp_path), MODEL, slow_script(tmp_path, 150)),
        poll_seconds=0.1,
        workflows={"calc": "default", "tasks": "tasks"},
        workflow_templates={"calc": str(EXAMPLES / "workflow" / "workspace")},
        workspaces=str(tmp_path / "workspaces"),
    )
    with Served(config) as server:
        yield server


def start(client: httpx.Client, name: str = "calc", **body: Any) -> httpx.Response:
    given = {"input": DESIGN, "model": MODEL, "options": {"min_tasks": 3}}
    given.update(body)
    return client.post(f"/workflows/{name}/runs", json=given)


def assert_problem(response: httpx.Response, status: int, *words: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem: dict[str, Any] = response.json()
    assert problem["status"] == status
    for word in words:
        assert word in problem["detail"], problem
    return problem


def test_the_registered_workflows_are_listed_with_their_phases(served: Served) -> None:
    with served.client() as client:
        listed = client.get("/workflows").json()["workflows"]
    assert [entry["name"] for entry in listed] == ["calc", "tasks"]
    calc = listed[0]
    assert calc["workflow"] == "default" and calc["start"] == "design_draft"
    assert calc["template"] is True and calc["needs_tasks"] is False
    names = [phase["name"] for phase in calc["phases"]]
    assert names[0] == "design_draft" and "implement_task" in names and "complete" in names
    assert listed[1]["needs_tasks"] is True


def test_a_workflow_run_is_started_streamed_listed_and_shown(
    served: Served, tmp_path: Path
) -> None:
    with served.client() as client:
        response = start(client)
        assert response.status_code == 202, response.text
        started = response.json()
        run_id = started["run_id"]
        assert started["workflow"]["name"] == "calc"
        assert started["stored_status"] in ("running", "ok")

        events = sse_events(client, f"/runs/{run_id}/events", timeout=120)
        assert events[-1]["event"] == "end"
        assert [event["id"] for event in events[:-1]] == list(range(1, len(events)))

        listed = client.get("/runs").json()["runs"]
        assert [row["status"] for row in listed if row["run_id"] == run_id] == ["ok"]

        shown = wait_for(lambda: done(client, run_id), timeout=60)
    assert (shown["status"], shown["stop_reason"]) == ("ok", "success")
    flow = shown["workflow"]
    assert (flow["name"], flow["workflow"], flow["phase"]) == ("calc", "default", "complete")
    tasks = {task["id"]: task for task in flow["tasks"]}
    assert list(tasks) == ["T1", "T2", "T3", "T4", "T5"]
    assert {task["status"] for task in tasks.values()} == {"passed"}
    assert tasks["T2"]["attempts"] == 1
    assert tasks["T2"]["feedback"] == "sub(3, 1) returns 4, not 2: it adds"
    phases = {phase["name"]: phase for phase in flow["phases"]}
    assert phases["complete"]["state"] == "current"
    assert phases["design_draft"]["state"] == "visited" and phases["design_draft"]["runs"] == 1
    assert sum(phase["runs"] for phase in flow["phases"]) == len(flow["history"]) == 18
    assert [(run["phase"], run["task"]) for run in flow["history"]].count(
        ("implement_task", "T2")
    ) == 2
    workspace = tmp_path / "workspaces" / run_id
    for name in ("add", "sub", "mul", "div"):
        assert (workspace / "calc" / f"{name}.py").is_file()
    assert (workspace / ".taskdecomp" / "input.md").read_text(encoding="utf-8") == DESIGN


def done(client: httpx.Client, run_id: str) -> dict[str, Any] | None:
    shown: dict[str, Any] = client.get(f"/runs/{run_id}").json()
    return shown if shown["status"] in ("ok", "stopped") and not shown["active"] else None


def test_a_workflow_run_is_cancelled_and_resumed_to_its_end(served: Served) -> None:
    slow = served.config.models[2]
    with served.client() as client:
        response = start(client, model=slow)
        assert response.status_code == 202, response.text
        run_id = response.json()["run_id"]
        cancelled = client.post(f"/runs/{run_id}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["stop_reason"] == "cancelled"
        assert cancelled.json()["workflow"]["phase"] != "complete"

        resumed = client.post(f"/runs/{run_id}/resume")
        assert resumed.status_code == 202, resumed.text
        shown = wait_for(lambda: done(client, run_id), timeout=180, every=0.2)
    assert (shown["status"], shown["stop_reason"]) == ("ok", "success")
    assert shown["workflow"]["phase"] == "complete"
    assert {task["status"] for task in shown["workflow"]["tasks"]} == {"passed"}


def test_an_unregistered_workflow_is_404(served: Served) -> None:
    with served.client() as client:
        response = start(client, name="nope")
    assert_problem(response, 404, "'nope'", "calc")


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"options": {"min_tasks": 9, "max_tasks": 3}}, ("min_tasks",)),
        ({"options": {"max_iterations": 0}}, ("max_iterations",)),
        ({"options": {"max_iterations": None}}, ("max_iterations",)),
        ({"budget": {"max_seconds": -1}}, ("max_seconds",)),
        ({"workspace": "/etc"}, ("workspace",)),
        ({"toolset": "nope"}, ("'nope'", "demo")),
        ({"toolset": "clash"}, ("read_file", "clash")),
        ({"model": "openai:gpt-unlisted"}, ("not offered",)),
        ({"input": ""}, ("input",)),
        ({"tasks": {"tasks": [{"id": "T1"}]}}, ("tasks refused",)),
    ],
)
def test_bad_inputs_are_422(
    served: Served, tmp_path: Path, body: dict[str, Any], words: tuple[str, ...]
) -> None:
    with served.client() as client:
        response = start(client, **body)
        assert_problem(response, 422, *words)
        assert client.get("/runs").json()["runs"] == []
    assert list((tmp_path / "workspaces").glob("*")) == []  # no workspace left behind


def test_a_workflow_that_starts_at_the_task_loop_needs_its_tasks(served: Served) -> None:
    with served.client() as client:
        assert_problem(start(client, name="tasks"), 422, "'tasks'", "implement_task")
        bad = {"decomposedFrom": "x", "tasks": [{**TASKS["tasks"][0], "dependsOn": ["T9"]}]}
        assert_problem(start(client, name="tasks", tasks=bad), 422, "tasks refused", "T9")
        assert client.get("/runs").json()["runs"] == []


def test_other_runs_show_no_workflow(served: Served) -> None:
    with served.client() as client:
        response = client.post("/runs", json={"goal": "dag", "toolset": "demo"})
        assert response.status_code == 202, response.text
        assert response.json()["workflow"] is None


def test_serve_registers_workflows_by_name(tmp_path: Path, toolset: Path) -> None:
    server = ServeProcess(
        ["--tools", f"demo={toolset}", "--model", MODEL, "--db", str(tmp_path / "runs.db"),
         "--workflow", "calc=default",
         "--workflow-template", f"calc={EXAMPLES / 'workflow' / 'workspace'}"],
    ).start()  # fmt: skip
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            listed = client.get("/workflows").json()["workflows"]
            started = client.post("/workflows/calc/runs", json={"input": DESIGN})
    finally:
        code, output = server.stop()
    assert [(entry["name"], entry["template"]) for entry in listed] == [("calc", True)]
    assert started.status_code == 202, started.text
    assert code in (0, -signal.SIGTERM), output  # uvicorn re-raises the signal once done
    workspace = tmp_path / "taskdecomp-home" / "workspaces" / started.json()["run_id"]
    assert (workspace / "calc" / "__init__.py").is_file()  # the template, copied


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--workflow", "calc"], ["--workflow 'calc' is not NAME=VALUE"]),
        (["--workflow", "a=default", "--workflow", "a=tasks"], ["names 'a' twice"]),
        (["--workflow-template", "calc=."], ["'calc'", "no --workflow"]),
        (["--workflow", "calc=BROKEN"], ["workflow 'calc'", "phases"]),
        (["--workflow", "calc=default", "--workflow-template", "calc=NOWHERE"], ["not a folder"]),
    ],
)
def test_serve_refuses_a_workflow_it_cannot_run(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    toolset: Path,
    args: list[str],
    words: list[str],
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("workflow: {name: b, start: x}\nphases: {}\n", encoding="utf-8")
    given = [
        arg.replace("BROKEN", str(broken)).replace("NOWHERE", str(tmp_path / "no")) for arg in args
    ]
    code, out, err = cli(
        capsys, "serve", "--tools", f"demo={toolset}", "--model", MODEL,
        "--db", str(tmp_path / "runs.db"), "--port", "0", *given,
    )  # fmt: skip
    assert code == 2, out + err
    assert "serving on" not in out
    for word in words:
        assert word in out + err


def test_workflow_runs_execute_in_the_server_process() -> None:
    with pytest.raises(ConfigError, match="--executor queue"):
        ServerConfig(
            store_url="postgresql://x/y",
            toolsets={"a": "x.py"},
            models=("m",),
            executor="queue",
            workflows={"calc": "default"},
        )


PAGE = '<!doctype html><meta name="viewport" content="width=device-width"><div id="flow"></div>'


@pytest.fixture
def browser_page(tmp_path: Path) -> Iterator[Any]:
    with chromium_page(tmp_path / "profile") as page:
        yield page


def test_the_page_script_draws_a_real_runs_phases_and_tasks(
    served: Served, browser_page: Any, tmp_path: Path
) -> None:
    with served.client() as client:
        run_id = start(client).json()["run_id"]
        run = wait_for(lambda: done(client, run_id), timeout=120)
        other = client.post("/runs", json={"goal": "dag", "toolset": "demo"}).json()
    run["workflow"]["tasks"][0]["title"] = "<b>bold</b> " + "long title " * 20
    page = browser_page
    page.set_viewport_size({"width": 1280, "height": 900})
    page.set_content(PAGE)
    page.add_script_tag(url=served.url + "/static/workflow.js")
    page.add_style_tag(url=served.url + "/static/workflow.css")
    drawn = page.evaluate(
        "run => window.renderWorkflow(document.getElementById('flow'), run) !== null", run
    )
    assert drawn is True

    phases = page.eval_on_selector_all(
        "#flow li.wf-phase", "items => items.map(i => [i.dataset.phase, i.dataset.state])"
    )
    assert phases == [[p["name"], p["state"]] for p in run["workflow"]["phases"]]
    assert page.text_content('#flow li[data-phase="implement_task"] .wf-runs') == "\u00d76"
    rows = page.eval_on_selector_all(
        "#flow table.wf-tasks tbody tr",
        "rows => rows.map(r => [r.dataset.taskId, r.dataset.status])",
    )
    assert rows == [[task, "passed"] for task in ("T1", "T2", "T3", "T4", "T5")]
    feedback = page.get_attribute('#flow tr[data-task-id="T2"] td.wf-col-feedback', "title")
    assert feedback == "sub(3, 1) returns 4, not 2: it adds"
    title = page.get_attribute('#flow tr[data-task-id="T1"] td.wf-col-title', "title")
    assert title == run["workflow"]["tasks"][0]["title"]  # the full text on hover
    assert page.query_selector("#flow b") is None  # text, never HTML
    cut = page.eval_on_selector(
        '#flow tr[data-task-id="T1"] td.wf-col-title',
        "td => [td.scrollWidth > td.clientWidth, getComputedStyle(td).textOverflow]",
    )
    assert cut == [True, "ellipsis"]
    page.click("#flow details.wf-history summary")
    assert page.eval_on_selector_all("#flow .wf-runs-table tbody tr", "r => r.length") == 18
    page.screenshot(path=str(tmp_path / "workflow-1280.png"), full_page=True)

    page.set_viewport_size({"width": 400, "height": 900})
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 400  # the tables scroll inside their own box, not the page
    page.screenshot(path=str(tmp_path / "workflow-400.png"), full_page=True)
    cleared = page.evaluate(
        "run => [window.renderWorkflow(document.getElementById('flow'), run),"
        " document.getElementById('flow').children.length]",
        other,
    )
    assert cleared == [None, 0]
    for name in ("workflow-1280.png", "workflow-400.png"):
        assert (tmp_path / name).stat().st_size > 5000


def test_the_served_page_draws_a_workflow_run_at_its_url(served: Served, browser_page: Any) -> None:
    with served.client() as client:
        run_id = start(client).json()["run_id"]
        run = wait_for(lambda: done(client, run_id), timeout=120)
        other = client.post("/runs", json={"goal": "dag", "toolset": "demo"}).json()["run_id"]
    page = browser_page
    page.goto(f"{served.url}/#/runs/{run_id}")
    page.wait_for_selector("#workflow li.wf-phase")
    phases = page.eval_on_selector_all("#workflow li.wf-phase", "items => items.length")
    assert phases == len(run["workflow"]["phases"])
    rows = page.eval_on_selector_all("#workflow table.wf-tasks tbody tr", "rows => rows.length")
    assert rows == 5
    page.goto(f"{served.url}/#/runs/{other}")  # a run of no workflow: the box goes away
    page.wait_for_function("document.getElementById('workflow').hidden")


def test_a_workflow_run_this_server_does_not_register_shows_the_phases_it_went_through() -> None:
    from taskdecomp.server.workflowruns import shaped

    view = {
        "workflow": "mine", "phase": "review", "phases": [
            {"no": 1, "phase": "draft"}, {"no": 2, "phase": "review"}, {"no": 3, "phase": "draft"},
        ],
        "in_flight": [], "tasks": [], "status_fields": {},
    }  # fmt: skip
    flow = shaped(view, None)
    assert flow["name"] is None
    states = [(p["name"], p["runs"], p["state"]) for p in flow["phases"]]
    assert states == [("draft", 2, "visited"), ("review", 1, "current")]
    assert [p["name"] for p in shaped({**view, "phase": None, "phases": []}, None)["phases"]] == []
