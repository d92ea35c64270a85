"""The ``default`` workflow end to end over a real workspace, and how a workflow stops."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from taskdecomp import tool
from taskdecomp.budget import Budget
from taskdecomp.events import Event, StepFinished, StepStarted
from taskdecomp.models import ScriptedModel
from taskdecomp.run import RunResult
from taskdecomp.store import open_store
from taskdecomp.strategies.workflow.api import DEFAULT_BUDGET, run_workflow, workflow_view
from taskdecomp.strategies.workflow.options import WorkflowOptions
from tests.workflow.scenario import (
    ADDED,
    DESIGN,
    FILES,
    TASKS,
    call,
    finish,
    first,
    git,
    make_workspace,
    rules,
)

OPTIONS = WorkflowOptions(min_tasks=3)


def model(extra: list[tuple[str, Any]] = (), **kwargs: Any) -> ScriptedModel:  # type: ignore[assignment]
    """The scenario's script, with ``extra`` rules tried first."""
    pairs = [(pattern, response) for pattern, response in extra]
    pairs += [(rule["match"], rule["response"]) for rule in rules(**kwargs)]
    return ScriptedModel(rules=pairs)


def run(ws: Path, design: Path, scripted: ScriptedModel, **kwargs: Any) -> RunResult:
    kwargs.setdefault("options", OPTIONS)
    return asyncio.run(
        run_workflow("default", workspace=ws, input=design, model=scripted, **kwargs)
    )


def test_the_default_workflow_goes_from_a_design_to_committed_tasks(tmp_path: Path) -> None:
    ws, design = make_workspace(tmp_path)
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    result = run(ws, design, model(), store=store)

    assert result.stop_reason == "success", result.message
    for path, content in FILES.values():
        assert (ws / path).read_text() == content
    assert (ws / ".taskdecomp" / "design.md").read_text() == DESIGN
    # one commit per passed task, its id in the message, holding only its own file
    log = git(ws, "log", "--format=%s").splitlines()
    assert log == ["T5: exports", "T4: div", "T3: mul", "T2: sub", "T1: add", "start"]
    assert git(ws, "show", "--name-only", "--format=", "HEAD~3").split() == ["calc/sub.py"]
    assert git(ws, "status", "--porcelain", "--", "calc").strip() == ""
    tasks = json.loads((ws / ".taskdecomp" / "tasks.json").read_text())
    assert tasks["schemaVersion"] == 1
    assert [(t["id"], t["status"]) for t in tasks["tasks"]] == [
        (t["id"], "passed") for t in TASKS + ADDED
    ]
    status = json.loads((ws / ".taskdecomp" / "status.json").read_text())
    assert status["phase"] == "complete" and status["status"]["reviewClean"] is True

    view = workflow_view(store.load_run(result.run_id))
    assert view is not None and view["stop_reason"] == "success"
    phases = [(p["phase"], p["task"], p["attempt"]) for p in view["phases"]]
    assert phases[:3] == [
        ("design_draft", None, 1),
        ("design_review", None, 1),
        ("task_decomposition", None, 1),
    ]
    assert ("implement_task", "T2", 2) in phases and ("task_spec_check", "T2", 2) in phases
    assert [p for p, _, _ in phases].count("completeness_verification") == 2
    assert phases[-1] == ("code_review", None, 1)
    by_id = {t["id"]: t for t in view["tasks"]}
    assert by_id["T2"]["attempts"] == 1 and by_id["T2"]["feedback"] == "sub(3, 1) gives 4"
    assert by_id["T1"]["attempts"] == 0 and by_id["T1"]["commit"]
    assert json.loads(json.dumps(view, allow_nan=False)) == view  # strict JSON


def test_the_retried_task_saw_its_feedback_and_only_its_own_context(tmp_path: Path) -> None:
    ws, design = make_workspace(tmp_path)
    scripted = model()
    assert run(ws, design, scripted).stop_reason == "success"
    implement = [
        json.loads(request.messages[-1]["content"])
        for request in scripted.calls
        if '"phase": "implement_task"' in request.text()
    ]
    retry = next(r for r in implement if r["task"]["id"] == "T2" and r["attempt"] == 2)
    assert retry["feedback"] == "sub(3, 1) gives 4"
    assert retry["changes"] == ["calc/sub.py"]
    assert "## Work breakdown" in retry["design"]
    # a fresh context: no task list, no status, no other task's results
    assert "tasks" not in retry and "status" not in retry and "previous_phase" not in retry
    assert next(r for r in implement if r["task"]["id"] == "T1")["feedback"] is None


def test_a_change_behind_the_tools_back_fails_the_tasks_check(tmp_path: Path) -> None:
    ws, design = make_workspace(tmp_path)

    @tool(side_effects="idempotent")
    def scribble(path: str, text: str) -> dict[str, Any]:
        """Write a file without asking anyone (a shell tool would)."""
        (ws / path).write_text(text)
        return {"ok": True}

    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    result = run(ws, design, model(out_of_scope=True), tools=[scribble], store=store)

    assert result.stop_reason == "success", result.message
    view = workflow_view(store.load_run(result.run_id))
    assert view is not None
    caught = [p for p in view["phases"] if p["out_of_scope"]]
    assert [(p["phase"], p["task"], p["out_of_scope"]) for p in caught] == [
        ("implement_task", "T4", ["README.md"])
    ]
    t4 = next(t for t in view["tasks"] if t["id"] == "T4")
    assert t4["attempts"] == 1
    assert t4["feedback"] == "changed files outside filesAllowed: README.md"
    assert git(ws, "show", "--name-only", "--format=", "HEAD~1").split() == ["calc/div.py"]


def test_a_write_outside_the_task_is_refused_before_it_happens(tmp_path: Path) -> None:
    ws, design = make_workspace(tmp_path)
    escape = call("write_file", path="calc/mul.py", content="stolen = True\n")
    scripted = model([(f'"phase": "implement_task".*"task": {{"id": "T1".*{first()}', escape)])
    result = run(ws, design, scripted)

    # T1's agent asked to write T3's file: refused, it went on, nothing was written
    assert result.stop_reason == "success", result.message
    assert (ws / "calc" / "mul.py").read_text() == FILES["T3"][1]
    refused = [
        turn["result"]
        for request in scripted.calls
        for turn in json.loads(request.messages[-1]["content"]).get("turns", [])
        if turn["call"]["args"].get("content") == "stolen = True\n"
    ]
    assert refused and refused[0]["ok"] is False
    assert "outside what may be written now: calc/add.py" in refused[0]["refused"]


def test_state_tools_refuse_what_the_workflow_does_not_read(tmp_path: Path) -> None:
    ws, design = make_workspace(tmp_path)
    bogus = call("set_status", fields={"everythingDone": True})
    other = call("update_task", task_id="T4", status="passed")
    scripted = model(
        [
            (f'"phase": "design_review".*{first()}', bogus),
            (
                f'"phase": "design_review".*{first(29)}',
                call("set_status", fields={"designApproved": True}),
            ),
            (f'"phase": "task_spec_check".*"task": {{"id": "T1".*{first()}', other),
            (
                f'"phase": "task_spec_check".*"task": {{"id": "T1".*{first(29)}',
                call("update_task", task_id="T1", status="passed"),
            ),
        ]
    )
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    result = run(ws, design, scripted, store=store)

    assert result.stop_reason == "success", result.message
    answers = [
        turn["result"]
        for request in scripted.calls
        if '"task": {"id": "T1"' in request.text() or '"phase": "design_review"' in request.text()
        for turn in json.loads(request.messages[-1]["content"]).get("turns", [])
        if turn["call"]
        in (
            {"tool": "set_status", "args": bogus["args"]},
            {"tool": "update_task", "args": other["args"]},
        )
    ]
    refusals = {answer["refused"] for answer in answers if answer["ok"] is False}
    assert len(answers) >= 2 and len(refusals) == 2
    assert any("is not one the workflow reads" in text for text in refusals)
    assert any("cannot change 'T4'" in text for text in refusals)
    assert store.load_run(result.run_id).state["workflow"]["status"].get("everythingDone") is None


def stop(tmp_path: Path, extra: list[tuple[str, Any]], **kwargs: Any) -> tuple[RunResult, Path]:
    ws, design = make_workspace(tmp_path)
    return run(ws, design, model(extra), **kwargs), ws


def test_no_verdict_leaves_the_workflow_stuck(tmp_path: Path) -> None:
    result, _ = stop(tmp_path, [('"phase": "design_review"', finish("looked at it"))])
    assert result.stop_reason == "workflow_stuck:design_review"
    assert "no transition of phase 'design_review' holds" in (result.message or "")


def test_a_task_that_keeps_failing_stops_the_run(tmp_path: Path) -> None:
    fail = call("update_task", task_id="T2", status="failed", feedback="still wrong")
    result, ws = stop(
        tmp_path,
        [(f'"phase": "task_spec_check".*"task": {{"id": "T2".*{first()}', fail)],
        options=WorkflowOptions(min_tasks=3, max_task_retries=2),
    )
    assert result.stop_reason == "task_failed:T2"
    assert "failed its spec check 3 times: still wrong" in (result.message or "")
    assert "T2" not in git(ws, "log", "--format=%s")


def test_phase_runs_are_capped(tmp_path: Path) -> None:
    result, _ = stop(tmp_path, [], options=WorkflowOptions(min_tasks=3, max_iterations=4))
    assert result.stop_reason == "max_iterations"
    assert len(result.history) == 4


def test_engine_budgets_hold_across_phases(tmp_path: Path) -> None:
    budget = Budget(max_tool_calls=5, max_seconds=DEFAULT_BUDGET.max_seconds)
    result, _ = stop(tmp_path, [], budget=budget)
    assert result.stop_reason == "max_tool_calls"
    assert result.usage.tool_calls == 6  # the refused sixth is counted


def test_a_workflow_that_starts_at_the_task_loop_needs_a_task_list(tmp_path: Path) -> None:
    from taskdecomp.errors import ConfigError

    ws, _ = make_workspace(tmp_path)
    with pytest.raises(ConfigError, match="give the task list with --tasks FILE"):
        asyncio.run(run_workflow("tasks", workspace=ws, model=model()))


def overlapping(spans: dict[str, tuple[int, int]], a: str, b: str) -> bool:
    return spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]


@pytest.mark.parametrize("parallel", [1, 3])
def test_ready_tasks_with_disjoint_files_run_at_once(tmp_path: Path, parallel: int) -> None:
    ws, design = make_workspace(tmp_path)
    seen: list[tuple[str, str, int]] = []

    def on_event(event: Event) -> None:
        if isinstance(event, StepStarted) and event.step.title.split(" ")[0] in PAIR:
            seen.append(("start", f"{event.step.id} {event.step.title.split(' ')[1]}", 0))
        elif isinstance(event, StepFinished) and event.entry.step_id in ids(seen):
            seen.append(("end", event.entry.step_id, 0))

    # T5 may write the whole package: it overlaps every other task's file
    wide = [*TASKS, {**ADDED[0], "filesAllowed": ["calc/**"], "dependsOn": []}]
    scripted = ScriptedModel(
        rules=[
            (f'"phase": "task_decomposition".*{first()}', call("put_tasks", tasks=wide)),
            ('"phase": "completeness_verification"', finish("complete")),
            *[(rule["match"], rule["response"]) for rule in rules()],
        ],
        latency_ms=10,
    )
    result = run(
        ws,
        design,
        scripted,
        on_event=on_event,
        options=WorkflowOptions(min_tasks=3, max_parallel=parallel),
    )
    assert result.stop_reason == "success", result.message

    spans = {task: (min(at), max(at)) for task, at in _spans(seen).items()}
    together = {(a, b) for a in spans for b in spans if a < b and overlapping(spans, a, b)}
    if parallel == 1:
        assert together == set()
    else:
        # T1, T2 and T4 are ready at once with disjoint files
        assert {("T1", "T2"), ("T1", "T4"), ("T2", "T4")} <= together
    assert not any("T5" in pair for pair in together)  # overlapping files: alone
    # what other tasks wrote meanwhile is theirs: no task was failed for it
    assert [e.observation["out_of_scope"] for e in result.history] == [[]] * len(result.history)
    retried = {e.observation["task"] for e in result.history if e.observation["attempt"] > 1}
    assert retried == {"T2"}
    assert spans["T3"][0] > spans["T1"][1]  # T3 depends on T1
    assert (ws / "calc" / "sub.py").read_text() == FILES["T2"][1]
    assert len(git(ws, "log", "--format=%s").splitlines()) == 6


PAIR = ("implement_task", "task_spec_check")


def ids(seen: list[tuple[str, str, int]]) -> set[str]:
    return {name.split(" ")[0] for kind, name, _ in seen if kind == "start"}


def _spans(seen: list[tuple[str, str, int]]) -> dict[str, list[int]]:
    """Event positions of each task's phase runs (starts and ends)."""
    task_of = {name.split(" ")[0]: name.split(" ")[1] for kind, name, _ in seen if kind == "start"}
    spans: dict[str, list[int]] = {}
    for index, (_, name, _) in enumerate(seen):
        step = name.split(" ")[0]
        spans.setdefault(task_of[step], []).append(index)
    return spans


def test_a_file_may_be_read_again_after_it_changed_but_not_twice_unchanged(
    tmp_path: Path,
) -> None:
    ws, design = make_workspace(tmp_path)
    implement_t1 = '"phase": "implement_task".*"task": {"id": "T1".*'
    read = call("read_file", path="calc/add.py")
    scripted = model(
        [
            (f"{implement_t1}{first()}", call("write_file", path="calc/add.py", content="x\n")),
            (f"{implement_t1}{first(29)}", read),  # changed since: fine
            (
                f"{implement_t1}{first(28)}",
                call("write_file", path="calc/add.py", content=FILES["T1"][1]),
            ),
            (f"{implement_t1}{first(27)}", read),  # changed again: fine
            (f"{implement_t1}{first(26)}", read),  # unchanged: a repeated call
        ]
    )
    result = run(ws, design, scripted)
    assert result.stop_reason == "loop_detected"
    assert [e.observation["phase"] for e in result.history][-1] == "task_decomposition"


def test_an_implementation_cannot_pass_its_own_task(tmp_path: Path) -> None:
    ws, design = make_workspace(tmp_path)
    implement_t1 = '"phase": "implement_task".*"task": {"id": "T1".*'
    cheat = call("update_task", task_id="T1", status="passed")
    scripted = model([(f"{implement_t1}{first(29)}", cheat)])
    result = run(ws, design, scripted)
    assert result.stop_reason == "success", result.message
    answers = [
        turn["result"]
        for request in scripted.calls
        if '"phase": "implement_task"' in request.text()
        for turn in json.loads(request.messages[-1]["content"]).get("turns", [])
        if turn["call"]["tool"] == "update_task"
    ]
    assert answers and answers[0]["ok"] is False
    assert "set by the phase that checks it" in answers[0]["refused"]
