"""The state tools' checks: agents change the state only as the workflow allows."""

from __future__ import annotations

from typing import Any

import pytest

from taskdecomp.strategies.workflow import load_workflow
from taskdecomp.strategies.workflow.state import (
    StateRefused,
    WorkflowState,
    add_tasks,
    count_failure,
    put_tasks,
    set_status,
    update_task,
)
from tests.strategies.test_workflow_tasklist import task, tasks

ALLOWED = load_workflow("default").status_fields()


def started() -> WorkflowState:
    return put_tasks(WorkflowState(phase="task_decomposition"), tasks())


def test_status_fields_are_the_ones_the_guards_read() -> None:
    state = set_status(
        WorkflowState(phase="design_review"), {"designApproved": True}, allowed=ALLOWED
    )
    assert state.guard_state() == {"status": {"designApproved": True}}
    with pytest.raises(StateRefused, match="'deployToProduction' is not one the workflow reads"):
        set_status(state, {"deployToProduction": True}, allowed=ALLOWED)
    with pytest.raises(StateRefused, match="takes true/false"):
        set_status(state, {"designApproved": {"nested": 1}}, allowed=ALLOWED)
    with pytest.raises(StateRefused, match="at least one"):
        set_status(state, {}, allowed=ALLOWED)


def test_the_task_list_is_put_once_and_checked() -> None:
    state = started()
    assert state.tasks is not None and len(state.tasks.tasks) == 5
    with pytest.raises(StateRefused, match="set already"):
        put_tasks(state, tasks())
    with pytest.raises(StateRefused, match=r"task list refused \(task_count\)"):
        put_tasks(WorkflowState(phase="x"), tasks(count=3))
    assert put_tasks(WorkflowState(phase="x"), tasks(count=3), min_tasks=3).tasks is not None


def test_a_failed_check_keeps_its_feedback_and_the_runner_counts_it_once() -> None:
    state = update_task(started(), "T1", "failed", "criterion 1 is not met: f() returns 2")
    state = update_task(state, "T1", "failed", "still 2")  # the agent said so twice
    assert state.attempts == {} and state.feedback == {"T1": "still 2"}
    assert count_failure(state, "T1").attempts == {"T1": 1}
    state = update_task(state, "T1", "passed")
    assert state.tasks is not None and state.tasks.get("T1").status == "passed"  # type: ignore[union-attr]
    with pytest.raises(StateRefused, match="no task 'T9'"):
        update_task(state, "T9", "passed")
    with pytest.raises(StateRefused, match="cannot be set"):
        update_task(state, "T1", "pending")
    with pytest.raises(StateRefused, match="no task list yet"):
        update_task(WorkflowState(phase="x"), "T1", "passed")


def new(n: int, **extra: Any) -> dict[str, Any]:
    return {**task(n), "dependsOn": [], **extra}


def test_added_tasks_are_checked_against_the_list_and_capped() -> None:
    state = add_tasks(started(), [new(6), new(7, dependsOn=["T6", "T1"])])
    assert state.tasks is not None and [t.id for t in state.tasks.tasks][-2:] == ["T6", "T7"]
    assert state.added == 2
    with pytest.raises(StateRefused, match="duplicate_id:T1"):
        add_tasks(state, [new(1)])
    with pytest.raises(StateRefused, match="unknown_dependency:T99"):
        add_tasks(state, [new(8, dependsOn=["T99"])])
    with pytest.raises(StateRefused, match="only 3 more may be added"):
        add_tasks(state, [new(n) for n in range(8, 12)])
    assert add_tasks(state, [new(n) for n in range(8, 11)]).added == 5
    with pytest.raises(StateRefused, match="non-empty list"):
        add_tasks(state, [])
