"""Workflows: YAML phases, a task loop with spec checks, file permissions in code."""

from taskdecomp.strategies.workflow.api import run_workflow, run_workflow_sync, workflow_view
from taskdecomp.strategies.workflow.definition import (
    BUILT_IN,
    Phase,
    Problem,
    Transition,
    Workflow,
    check_workflow,
    load_workflow,
)
from taskdecomp.strategies.workflow.guards import Guard
from taskdecomp.strategies.workflow.options import WorkflowOptions
from taskdecomp.strategies.workflow.tasklist import TaskList, TaskListError, WorkTask, parse_tasks
from taskdecomp.strategies.workflow.workspace import PathRefused, Workspace, WriteScope

__all__ = [
    "BUILT_IN",
    "Guard",
    "PathRefused",
    "Phase",
    "Problem",
    "TaskList",
    "TaskListError",
    "Transition",
    "WorkTask",
    "Workflow",
    "WorkflowOptions",
    "Workspace",
    "WriteScope",
    "check_workflow",
    "load_workflow",
    "parse_tasks",
    "run_workflow",
    "run_workflow_sync",
    "workflow_view",
]
