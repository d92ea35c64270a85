"""The chat agent's structured actions: their arguments, and the boundary they pass.

A chat model answers ``{"reply": "...", "actions": [{"action": "plan_operation/create_plan",
"args": {...}}]}``. That answer is untrusted input, like a plan: it is parsed strictly
(:func:`~taskdecomp.policy.parse_model_json`), and each action is checked on its own (a
known name, allowed by the operator, arguments of the right shape, at most
:data:`MAX_ACTIONS` a turn) before anything runs. A refused action runs nothing and says
why; the others still run. ``docs/actions.md`` documents the same catalog.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from taskdecomp.policy import parse_model_json
from taskdecomp.server.schemas import strategy_names
from taskdecomp.stops import StopRun

MAX_ACTIONS = 5
"""Most actions one chat turn may take."""


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreatePlanArgs(_Args):
    """``plan_operation/create_plan``: a new plan tree with one root."""

    title: str = Field(min_length=1, max_length=2000)
    instruction: str = Field(default="", max_length=20_000)
    auto_decompose: bool | None = None
    """Decompose it breadth-first at once; default: ``DECOMP_AUTO_ON_CREATE``."""


class GetPlanArgs(_Args):
    """``plan_operation/get_plan``: read a plan tree."""

    plan_id: int = Field(ge=1)


class DecomposeTaskArgs(_Args):
    """``task_operation/decompose_task``: decompose one node (single-node mode)."""

    plan_id: int = Field(ge=1)
    node_id: int = Field(ge=1)
    expand_depth: int = Field(default=1, ge=1, le=10)
    mode: Literal["append", "overwrite"] = "append"


def _strategy_choices(schema: dict[str, Any]) -> None:
    """Document the strategies installed when the schema is made, beside ``null``."""
    for choice in schema.get("anyOf", ()):
        if choice.get("type") == "string":
            strategy_names(choice)


class StartRunArgs(_Args):
    """``run_operation/start_run``: start a run with a registered toolset.

    With ``plan_id``: execute that stored plan tree (or ``node_id``'s subtree) with the
    ``tree`` strategy.
    """

    goal: str | None = Field(default=None, min_length=1, max_length=20_000)
    """What the run achieves; needed without ``plan_id`` (with it: the plan's title, or
    the node's name)."""
    toolset: str = Field(min_length=1, max_length=200)
    strategy: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="A registered strategy that starts from a goal; default: plan_execute, "
        "or tree with plan_id.",
        json_schema_extra=_strategy_choices,
    )
    allow: list[str] | None = Field(default=None, max_length=200)
    plan_id: int | None = Field(default=None, ge=1)
    """A stored plan tree to execute."""
    node_id: int | None = Field(default=None, ge=1)
    """With ``plan_id``: execute only this node's subtree."""

    @model_validator(mode="after")
    def _runs_something(self) -> StartRunArgs:
        if self.plan_id is None:
            if self.goal is None:
                raise ValueError("give a goal, or a plan_id to execute a stored plan tree")
            if self.node_id is not None:
                raise ValueError("node_id names a node of plan_id: give the plan too")
        elif self.strategy not in (None, "tree"):
            raise ValueError("a stored plan tree runs with the tree strategy: leave strategy out")
        return self


class RunRefArgs(_Args):
    """``run_operation/get_run``, ``cancel_run``, ``approve_run``: name a run."""

    run_id: str = Field(min_length=1, max_length=200)


class RejectRunArgs(_Args):
    """``run_operation/reject_run``: end a paused run."""

    run_id: str = Field(min_length=1, max_length=200)
    reason: str = Field(min_length=1, max_length=2000)


ARGS: dict[str, type[_Args]] = {
    "plan_operation/create_plan": CreatePlanArgs,
    "plan_operation/get_plan": GetPlanArgs,
    "task_operation/decompose_task": DecomposeTaskArgs,
    "run_operation/start_run": StartRunArgs,
    "run_operation/get_run": RunRefArgs,
    "run_operation/cancel_run": RunRefArgs,
    "run_operation/approve_run": RunRefArgs,
    "run_operation/reject_run": RejectRunArgs,
}
"""Every action and the model of its arguments."""


class _Action(BaseModel):
    model_config = ConfigDict(extra="forbid")
    action: str = Field(min_length=1, max_length=200)
    args: dict[str, Any] = Field(default_factory=dict)


class ChatAnswer(BaseModel):
    """What the chat model answers."""

    model_config = ConfigDict(extra="forbid")
    reply: str = Field(default="", max_length=20_000)
    actions: list[_Action] = Field(default_factory=list)


@dataclass(frozen=True, kw_only=True, slots=True)
class Checked:
    """One action after the boundary: ``args`` when it may run, else ``refused``."""

    action: str
    raw_args: dict[str, Any]
    args: _Args | None = None
    refused: str | None = None
    """Why it may not run: ``unknown_action``, ``action_not_allowed``, ``bad_args:<field>``
    or ``too_many_actions``, then a colon-free explanation after `` - ``."""


def answer_schema() -> dict[str, Any]:
    """JSON schema of :class:`ChatAnswer`, for structured output."""
    return ChatAnswer.model_json_schema()


def parse_answer(text: str) -> tuple[str, list[Checked]] | None:
    """The reply and the checked actions of the chat model's text.

    Text that is not a JSON object is a plain reply without actions.

    Returns:
        ``None`` when the text is JSON that breaks the answer's schema (nothing runs).
    """
    try:
        value = parse_model_json(text)
    except StopRun:
        return text.strip(), []
    if not isinstance(value, dict):
        return None
    try:
        answer = ChatAnswer.model_validate(value)
    except ValidationError:
        return None
    return answer.reply.strip(), [_raw(action) for action in answer.actions]


def check(actions: list[Checked], allowed: Collection[str]) -> list[Checked]:
    """Apply the boundary to each action, in order."""
    checked = []
    for number, item in enumerate(actions):
        checked.append(_check(item, allowed, over=number >= MAX_ACTIONS))
    return checked


def _raw(action: _Action) -> Checked:
    return Checked(action=action.action, raw_args=dict(action.args))


def _check(item: Checked, allowed: Collection[str], *, over: bool) -> Checked:
    name = item.action
    model = ARGS.get(name)
    if over:
        return _refuse(item, "too_many_actions", f"at most {MAX_ACTIONS} actions a turn")
    if model is None:
        return _refuse(item, "unknown_action", f"known actions: {', '.join(ARGS)}")
    if name not in allowed:
        return _refuse(item, "action_not_allowed", "the operator did not allow this action")
    try:
        args = model.model_validate(item.raw_args)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "args"
        return _refuse(item, f"bad_args:{where}", str(first["msg"]))
    return Checked(action=name, raw_args=item.raw_args, args=args)


def _refuse(item: Checked, code: str, why: str) -> Checked:
    return Checked(action=item.action, raw_args=item.raw_args, refused=f"{code} - {why}")


def catalog() -> list[dict[str, Any]]:
    """Every action with the JSON schema of its arguments (what the chat model is shown)."""
    entries = []
    for name, model in ARGS.items():
        schema = model.model_json_schema()
        schema.pop("title", None)
        entries.append(
            {"action": name, "description": inspect.cleandoc(model.__doc__ or ""), "args": schema}
        )
    return entries
