"""taskdecomp: controllable task-decomposition agents.

An LLM breaks a goal into steps; a policy boundary validates that plan as untrusted input;
a scheduler runs the steps through a tool gateway with an allowlist and budgets; one
combine call writes the answer (``plan_execute``), or a replanner answers once the results
are in (``replan``). Every run ends with an explicit stop reason.

    >>> from taskdecomp import run_sync
    >>> result = run_sync("...", tools="tools.py", model="scripted:script.json")
    >>> result.stop_reason
    'success'

Every name but the exceptions is imported on first use, so ``import taskdecomp`` and the
command line start fast: pydantic, SQLAlchemy, the engine and the model SDKs load only once
a name that needs them is used.
"""

import importlib
import sys
import types
import typing

from taskdecomp.errors import (
    ConfigError,
    CorruptRecordError,
    LeaseLostError,
    ModelError,
    ModelNotFoundError,
    ModelTimeoutError,
    RunLeasedError,
    RunNotFoundError,
    StoreConfigError,
    StoreError,
    StoreValueError,
    StrictJSONError,
    TaskdecompError,
    ToolsetError,
    TreeNotFoundError,
)

if typing.TYPE_CHECKING:
    from taskdecomp.budget import Budget, Usage
    from taskdecomp.decomposition import DecompOptions, DecompositionResult
    from taskdecomp.engine import (
        Environment,
        approve,
        approve_sync,
        reject,
        reject_async,
        resume,
        resume_sync,
        run,
        run_sync,
    )
    from taskdecomp.events import (
        AgentTurn,
        AnswerDelta,
        ApprovalDecided,
        ApprovalRequested,
        Event,
        EventBus,
        ModelCalled,
        ModelProgress,
        NodeDecomposed,
        NodeFinished,
        NodeStarted,
        PlanCreated,
        PlanRepaired,
        PlanRevised,
        ReplanDecided,
        RunStarted,
        RunStopped,
        StepFinished,
        StepStarted,
    )
    from taskdecomp.gateway import ToolGateway, args_hash
    from taskdecomp.models import (
        Model,
        ModelRequest,
        ModelResponse,
        ScriptedModel,
        register_provider,
        resolve_model,
    )
    from taskdecomp.plan import Plan, Step, TaskId
    from taskdecomp.policy import parse_model_json, validate_plan_action
    from taskdecomp.prompting import PromptInput
    from taskdecomp.roles import Roles
    from taskdecomp.run import HistoryEntry, RunId, RunResult, TraceEntry
    from taskdecomp.scale.submit import submit
    from taskdecomp.stops import CODES, StopReason, StopRun, is_known
    from taskdecomp.store import SqlStore, open_store
    from taskdecomp.store.trees import TreeRepository
    from taskdecomp.strategies.decompose import PlanDecomposer
    from taskdecomp.strategies.replan import ReplanOptions
    from taskdecomp.strategies.tree import TreeOptions
    from taskdecomp.strategies.workflow import WorkflowOptions, run_workflow, run_workflow_sync
    from taskdecomp.tools import Retry, Toolset, ToolSpec, load_toolset, tool
    from taskdecomp.toolsets.frameworks import framework_tool, schema_tool
    from taskdecomp.toolsets.mcp_spec import MCPServer
    from taskdecomp.tree import NewNode, NodeId, PlanNode, PlanTree, PlanTreeId

_MODULES: dict[str, tuple[str, ...]] = {
    "taskdecomp.budget": ("Budget", "Usage"),
    "taskdecomp.decomposition": ("DecompOptions", "DecompositionResult"),
    "taskdecomp.engine": (
        "Environment",
        "approve",
        "approve_sync",
        "reject",
        "reject_async",
        "resume",
        "resume_sync",
        "run",
        "run_sync",
    ),
    "taskdecomp.events": (
        "AgentTurn",
        "AnswerDelta",
        "ApprovalDecided",
        "ApprovalRequested",
        "Event",
        "EventBus",
        "ModelCalled",
        "ModelProgress",
        "NodeDecomposed",
        "NodeFinished",
        "NodeStarted",
        "PlanCreated",
        "PlanRepaired",
        "PlanRevised",
        "ReplanDecided",
        "RunStarted",
        "RunStopped",
        "StepFinished",
        "StepStarted",
    ),
    "taskdecomp.gateway": ("ToolGateway", "args_hash"),
    "taskdecomp.models": (
        "Model",
        "ModelRequest",
        "ModelResponse",
        "ScriptedModel",
        "register_provider",
        "resolve_model",
    ),
    "taskdecomp.plan": ("Plan", "Step", "TaskId"),
    "taskdecomp.policy": ("parse_model_json", "validate_plan_action"),
    "taskdecomp.prompting": ("PromptInput",),
    "taskdecomp.roles": ("Roles",),
    "taskdecomp.run": ("HistoryEntry", "RunId", "RunResult", "TraceEntry"),
    "taskdecomp.scale.submit": ("submit",),
    "taskdecomp.stops": ("CODES", "StopReason", "StopRun", "is_known"),
    "taskdecomp.store": ("SqlStore", "open_store"),
    "taskdecomp.store.trees": ("TreeRepository",),
    "taskdecomp.strategies.decompose": ("PlanDecomposer",),
    "taskdecomp.strategies.replan": ("ReplanOptions",),
    "taskdecomp.strategies.tree": ("TreeOptions",),
    "taskdecomp.strategies.workflow": ("WorkflowOptions", "run_workflow", "run_workflow_sync"),
    "taskdecomp.tools": ("Retry", "ToolSpec", "Toolset", "load_toolset", "tool"),
    "taskdecomp.toolsets.frameworks": ("framework_tool", "schema_tool"),
    "taskdecomp.toolsets.mcp_spec": ("MCPServer",),
    "taskdecomp.tree": ("NewNode", "NodeId", "PlanNode", "PlanTree", "PlanTreeId"),
}
"""Where each public name that is imported on first use comes from."""

_LAZY = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [
    "AgentTurn",
    "AnswerDelta",
    "ApprovalDecided",
    "ApprovalRequested",
    "Budget",
    "CODES",
    "ConfigError",
    "CorruptRecordError",
    "DecompOptions",
    "DecompositionResult",
    "Environment",
    "Event",
    "EventBus",
    "HistoryEntry",
    "LeaseLostError",
    "MCPServer",
    "Model",
    "ModelCalled",
    "ModelError",
    "ModelNotFoundError",
    "ModelProgress",
    "ModelRequest",
    "ModelResponse",
    "ModelTimeoutError",
    "NewNode",
    "NodeDecomposed",
    "NodeFinished",
    "NodeId",
    "NodeStarted",
    "Plan",
    "PlanCreated",
    "PlanDecomposer",
    "PlanNode",
    "PlanRepaired",
    "PlanRevised",
    "PlanTree",
    "PlanTreeId",
    "PromptInput",
    "ReplanDecided",
    "ReplanOptions",
    "Retry",
    "Roles",
    "RunId",
    "RunLeasedError",
    "RunNotFoundError",
    "RunResult",
    "RunStarted",
    "RunStopped",
    "ScriptedModel",
    "SqlStore",
    "Step",
    "StepFinished",
    "StepStarted",
    "StopReason",
    "StopRun",
    "StoreConfigError",
    "StoreError",
    "StoreValueError",
    "StrictJSONError",
    "TaskId",
    "TaskdecompError",
    "ToolGateway",
    "ToolSpec",
    "Toolset",
    "ToolsetError",
    "TraceEntry",
    "TreeNotFoundError",
    "TreeOptions",
    "TreeRepository",
    "Usage",
    "WorkflowOptions",
    "approve",
    "approve_sync",
    "args_hash",
    "framework_tool",
    "is_known",
    "load_toolset",
    "open_store",
    "parse_model_json",
    "register_provider",
    "reject",
    "reject_async",
    "resolve_model",
    "resume",
    "resume_sync",
    "run",
    "run_sync",
    "run_workflow",
    "run_workflow_sync",
    "schema_tool",
    "submit",
    "tool",
    "validate_plan_action",
]


def __getattr__(name: str) -> typing.Any:
    """Import a public name's module the first time the name is used (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: object) -> None:
        if name == "run" and isinstance(value, types.ModuleType):
            return  # the import of the submodule taskdecomp.run: the name stays the function
        super().__setattr__(name, value)


# ``taskdecomp.run`` is the engine's entry, as it always was, not the submodule of that name,
# which the import system binds on the package whenever something first imports it.
sys.modules[__name__].__class__ = _Package
