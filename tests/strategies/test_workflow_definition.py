"""Workflow files: the built-ins load, every problem is reported with its phase and field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from taskdecomp.errors import WorkflowError
from taskdecomp.strategies.workflow import check_workflow, load_workflow

SEED_PHASES = [
    "design_draft",
    "design_review",
    "design_edit",
    "task_decomposition",
    "implement_task",
    "task_spec_check",
    "completeness_verification",
    "code_review",
    "code_fix",
    "complete",
]


def test_the_default_workflow_is_the_seeds() -> None:
    workflow = load_workflow("default")
    assert (workflow.name, workflow.start) == ("default", "design_draft")
    assert list(workflow.phases) == SEED_PHASES
    assert set(workflow.prompts) == set(SEED_PHASES) - {"complete"}
    assert all(text.strip() for text in workflow.prompts.values())
    assert workflow.phases["task_spec_check"].allowed_writes == (".taskdecomp/*",)
    assert "taskPassed" in workflow.status_fields() and "reviewClean" in workflow.status_fields()


SPEC_PASSED = {"taskPassed": True, "allTasksComplete": True}


@pytest.mark.parametrize(
    ("phase", "status", "expected"),
    [
        ("design_draft", {}, "design_review"),  # auto
        ("design_review", {"designApproved": True}, "task_decomposition"),
        ("design_review", {"designNeedsChanges": True, "designApproved": True}, "design_edit"),
        ("design_review", {}, None),  # stuck
        ("task_spec_check", {"taskFailed": True}, "implement_task"),
        ("task_spec_check", {"taskPassed": True, "hasMoreTasks": True}, "implement_task"),
        ("task_spec_check", SPEC_PASSED, "completeness_verification"),
        ("code_review", {"reviewClean": True}, "complete"),
    ],
)
def test_the_first_transition_whose_guard_holds_is_taken(
    phase: str, status: dict[str, Any], expected: str | None
) -> None:
    assert load_workflow("default").next_phase(phase, {"status": status}) == expected


def test_the_tasks_workflow_starts_at_the_task_loop() -> None:
    workflow = load_workflow("tasks")
    assert workflow.start == "implement_task" and "design_draft" not in workflow.phases


def write(tmp_path: Path, data: Any, *prompts: str) -> Path:
    path = tmp_path / "flow.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    for name in prompts:
        (tmp_path / name).write_text("Do the work.")
    return path


def valid() -> dict[str, Any]:
    return {
        "workflow": {"name": "mine", "version": 1, "start": "work"},
        "phases": {
            "work": {
                "prompt": "work.md",
                "type": "execute",
                "transitions": [{"to": "check", "auto": True}],
            },
            "check": {
                "prompt": "check.md",
                "type": "evaluate",
                "allowed_writes": [".taskdecomp/*"],
                "transitions": [
                    {"to": "work", "when": "status.again == true"},
                    {"to": "done", "when": "status.again != true"},
                ],
            },
            "done": {"type": "terminal"},
        },
    }


def test_a_file_workflow_reads_its_prompts_from_next_to_it(tmp_path: Path) -> None:
    workflow = load_workflow(write(tmp_path, valid(), "work.md", "check.md"))
    assert workflow.prompts == {"work": "Do the work.", "check": "Do the work."}
    assert workflow.next_phase("check", {"status": {"again": False}}) == "done"


def orphan() -> dict[str, Any]:
    return {"prompt": "work.md", "type": "execute", "transitions": [{"to": "done", "auto": True}]}


def problems_of(path: Path) -> dict[tuple[str | None, str], str]:
    return {(p.phase, p.field): p.message for p in check_workflow(path)}


def broken() -> dict[str, Any]:
    data = valid()
    data["workflow"]["start"] = "begin"
    phases = data["phases"]
    phases["work"]["transitions"].append({"to": "nowhere", "auto": True})
    phases["check"]["transitions"][0]["when"] = "status.again === true"
    phases["check"]["prompt"] = "missing.md"
    phases["orphan"] = orphan()
    phases["done"]["transitions"] = [{"to": "work", "auto": True}]
    return data


def test_every_problem_is_reported_with_its_phase_and_field(tmp_path: Path) -> None:
    problems = problems_of(write(tmp_path, broken(), "work.md"))
    assert "no phase 'begin'" in problems[(None, "workflow.start")]
    listed = "no phase 'nowhere'; the phases are: work, check, done, orphan"
    assert listed in problems[("work", "transitions[1].to")]
    assert "unexpected '='" in problems[("check", "transitions[0].when")]
    assert "no prompt file 'missing.md'" in problems[("check", "prompt")]
    assert problems[("done", "transitions")] == "a terminal phase has no transitions"
    assert len(problems) == 5


def test_unreachable_phases_and_no_terminal_are_problems(tmp_path: Path) -> None:
    data = valid()
    del data["phases"]["done"]
    data["phases"]["check"]["transitions"] = [{"to": "work", "auto": True}]
    data["phases"]["orphan"] = {**orphan(), "transitions": [{"to": "work", "auto": True}]}
    problems = [str(p) for p in check_workflow(write(tmp_path, data, "work.md", "check.md"))]
    assert "phase 'orphan', phase: cannot be reached from 'work'" in problems
    assert "phases: no terminal phase: the workflow could never end" in problems


def drop_auto(data: dict[str, Any]) -> None:
    data["phases"]["work"]["transitions"][0].pop("auto")


@pytest.mark.parametrize(
    ("edit", "where", "message"),
    [
        (lambda d: d["phases"]["work"].update(colour="red"), ("work", "colour"), "Extra inputs"),
        (lambda d: d["workflow"].update(author="me"), (None, "workflow.author"), "Extra inputs"),
        (lambda d: d["phases"]["work"].update(type="run"), ("work", "type"), "'execute'"),
        (drop_auto, ("work", "transitions[0]"), "either 'when: GUARD' or 'auto: true'"),
        (lambda d: d.pop("phases"), (None, "phases"), "Field required"),
    ],
)
def test_schema_problems_name_the_phase_and_field(
    tmp_path: Path, edit: Any, where: tuple[str | None, str], message: str
) -> None:
    data = valid()
    edit(data)
    problems = problems_of(write(tmp_path, data, "work.md", "check.md"))
    assert where in problems and message in problems[where], problems


def test_yaml_that_does_not_parse_is_one_problem(tmp_path: Path) -> None:
    (problem,) = check_workflow(write(tmp_path, "workflow: [unclosed\n"))
    assert (problem.phase, problem.field) == (None, "file") and "not YAML" in problem.message


def test_loading_a_broken_workflow_raises_with_every_problem(tmp_path: Path) -> None:
    with pytest.raises(WorkflowError) as raised:
        load_workflow(write(tmp_path, broken(), "work.md"))
    assert len(raised.value.problems) >= 5
    assert "problem(s): " in str(raised.value)


def test_a_missing_file_names_the_built_ins() -> None:
    with pytest.raises(WorkflowError, match="built-in name \\(default, tasks\\)"):
        load_workflow("no/such/flow.yaml")
