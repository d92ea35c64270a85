"""taskdecomp: controllable task-decomposition agents.

An LLM breaks a goal into steps; a policy boundary validates that plan as untrusted input;
a scheduler runs the steps through a tool gateway with an allowlist and budgets; one
combine call writes the answer (``plan_execute``), or a replanner answers once the results
are in (``replan``). Every run ends with an explicit stop reason.

    >>> from taskdecomp import run_sync
    >>> result = run_sync("...", tools="tools.py", model="scripted:script.json")
    >>> result.stop_reason
    'success'
"""

from taskdecomp.budget import Budget, Usage
from taskdecomp.decomposition import DecompOptions, DecompositionResult
from taskdecomp.errors import (
    ConfigError,
    CorruptRecordError,
    LeaseLostError,
    ModelError,
    ModelNotFoundError,
    ModelTimeoutError,
    RunLeasedError,
    RunNotFoundError,
    StoreError,
    StoreValueError,
    StrictJSONError,
    TaskdecompError,
    ToolsetError,
    TreeNotFoundError,
)
from taskdecomp.events import (
    AgentTurn,
    ApprovalDecided,
    ApprovalRequested,
    Event,
    EventBus,
    ModelCalled,
    ModelProgress,
    PlanCreated,
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
from taskdecomp.run import HistoryEntry, RunId, RunResult, TraceEntry
from taskdecomp.scale.submit import submit
from taskdecomp.stops import CODES, StopReason, StopRun, is_known
from taskdecomp.store import SqlStore, open_store
from taskdecomp.store.trees import TreeRepository
from taskdecomp.strategies.approval import approve, reject
from taskdecomp.strategies.decompose import PlanDecomposer
from taskdecomp.strategies.plan_execute import resume, run, run_sync
from taskdecomp.strategies.replan import ReplanOptions
from taskdecomp.strategies.workflow import WorkflowOptions, run_workflow
from taskdecomp.tools import Toolset, ToolSpec, load_toolset, tool
from taskdecomp.tree import NewNode, NodeId, PlanNode, PlanTree, PlanTreeId

__all__ = [
    "AgentTurn",
    "ApprovalDecided",
    "ApprovalRequested",
    "Budget",
    "CODES",
    "ConfigError",
    "CorruptRecordError",
    "DecompOptions",
    "DecompositionResult",
    "Event",
    "EventBus",
    "HistoryEntry",
    "LeaseLostError",
    "Model",
    "ModelCalled",
    "ModelError",
    "ModelNotFoundError",
    "ModelProgress",
    "ModelRequest",
    "ModelResponse",
    "ModelTimeoutError",
    "NewNode",
    "NodeId",
    "Plan",
    "PlanCreated",
    "PlanDecomposer",
    "PlanNode",
    "PlanRevised",
    "PlanTree",
    "PlanTreeId",
    "ReplanDecided",
    "ReplanOptions",
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
    "TreeRepository",
    "Usage",
    "WorkflowOptions",
    "approve",
    "args_hash",
    "is_known",
    "load_toolset",
    "open_store",
    "parse_model_json",
    "register_provider",
    "reject",
    "resolve_model",
    "resume",
    "run",
    "run_sync",
    "run_workflow",
    "submit",
    "tool",
    "validate_plan_action",
]
