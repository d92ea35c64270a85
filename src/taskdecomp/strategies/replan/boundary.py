"""The policy boundary for the replanner's decisions and the executor agent's actions.

Both answers are untrusted model output, parsed strictly and checked before anything acts
on them:

- a **decision** (:func:`validate_decision`) is ``{"kind": "respond", "response": "..."}``
  or a revised plan ``{"kind": "plan", "steps": [...]}`` (the remaining steps only). A
  plan goes through the same rules as a first plan (allowlist, ids, dependencies, cycles,
  step limits) and its ids may not reuse a finished step's; it fails with
  ``invalid_plan:<rule>``. A plan of plain step strings (Eino's default ``Plan``) is taken
  as instruction steps. An answer that is neither fails with ``invalid_replan:<rule>``.
- an **action** (:func:`validate_action`) is ``{"kind": "call", "tool": NAME, "args":
  {...}}`` or ``{"kind": "finish", "result": ...}``; it fails with
  ``invalid_action:<rule>``, and a refused call never reaches the gateway.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from taskdecomp.plan import Plan, TaskId
from taskdecomp.policy import parse_model_json, plain_plan, validate_plan_action
from taskdecomp.stops import StopRun, with_detail

RESPOND_KEYS = frozenset({"kind", "response"})
CALL_KEYS = frozenset({"kind", "tool", "args"})
FINISH_KEYS = frozenset({"kind", "result"})
DECOMPOSE_KEYS = frozenset({"kind", "reason"})


@dataclass(frozen=True, kw_only=True, slots=True)
class Respond:
    """The replanner's final answer."""

    response: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Call:
    """The executor agent calls a tool."""

    tool: str
    args: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class Finish:
    """The executor agent finished the step; ``result`` is the step's result."""

    result: Any


@dataclass(frozen=True, kw_only=True, slots=True)
class Decompose:
    """The executor agent says the task is too big: it should be split first."""

    reason: str


def invalid_replan(rule: str, message: str = "") -> StopRun:
    """``invalid_replan:<rule>``."""
    return StopRun(with_detail("invalid_replan", rule), message=message)


def invalid_action(rule: str, message: str = "") -> StopRun:
    """``invalid_action:<rule>``."""
    return StopRun(with_detail("invalid_action", rule), message=message)


def _parse(text: str, family: str) -> Any:
    """Strict JSON, with the parse failure reported in ``family``."""
    try:
        return parse_model_json(text)
    except StopRun as stop:
        rule = stop.reason.partition(":")[2] or "non_json"
        raise StopRun(with_detail(family, rule), message=stop.message) from None


def validate_decision(
    text: str,
    *,
    allowed_tools: Collection[str],
    max_plan_steps: int,
    finished: Collection[TaskId],
    first: int = 1,
    taken: Collection[str] = (),
) -> Respond | Plan:
    """Parse and check the replanner's answer.

    Eino's shapes are accepted too: ``{"steps": ["do x", ...]}`` (plain step strings, made
    instruction steps with ids ``step_<n>`` from ``first``, none of them in ``taken``) and
    ``{"response": "..."}`` without a kind.

    Raises:
        StopRun: ``invalid_replan:<rule>`` (``non_json``, ``not_object``, ``bad_kind``,
            ``extra_keys``, ``missing_response``), or, for a plan, ``invalid_plan:<rule>``
            or ``bad_ref:<step>``.
    """
    action = plain_plan(_parse(text, "invalid_replan"), first=first, taken=taken)
    if not isinstance(action, dict):
        raise invalid_replan("not_object", "the answer must be a JSON object")
    if set(action) == {"response"}:  # Eino's Response
        action = {"kind": "respond", **action}
    kind = action.get("kind")
    if kind == "plan":
        return validate_plan_action(
            action,
            max_plan_steps=max_plan_steps,
            allowed_tools=allowed_tools,
            min_plan_steps=1,
            allow_instructions=True,
            finished=finished,
        )
    if kind != "respond":
        raise invalid_replan("bad_kind", f"kind must be 'respond' or 'plan', got {kind!r}")
    if set(action) - RESPOND_KEYS:
        extra = ", ".join(sorted(map(str, set(action) - RESPOND_KEYS)))
        raise invalid_replan("extra_keys", f"a respond answer has only kind and response: {extra}")
    response = action.get("response")
    if not isinstance(response, str) or not response.strip():
        raise invalid_replan("missing_response", "respond needs a non-empty 'response' text")
    return Respond(response=response.strip())


def validate_action(
    text: str, *, allowed_tools: Collection[str], decompose: bool = False
) -> Call | Finish | Decompose:
    """Parse and check one executor agent action (``decompose`` allows that kind too).

    Raises:
        StopRun: ``invalid_action:<rule>``: ``non_json``, ``not_object``, ``bad_kind``,
            ``extra_keys``, ``missing_tool``, ``tool_not_allowed:<name>``, ``bad_args`` or
            ``missing_result``.
    """
    action = _parse(text, "invalid_action")
    if not isinstance(action, dict):
        raise invalid_action("not_object", "the action must be a JSON object")
    kind = action.get("kind")
    kinds = {"call": CALL_KEYS, "finish": FINISH_KEYS}
    if decompose:
        kinds["decompose"] = DECOMPOSE_KEYS
    keys = kinds.get(kind) if isinstance(kind, str) else None
    if keys is None:
        named = " or ".join(repr(name) for name in kinds)
        raise invalid_action("bad_kind", f"kind must be {named}, got {kind!r}")
    if set(action) - keys:
        extra = ", ".join(sorted(map(str, set(action) - keys)))
        raise invalid_action("extra_keys", f"unexpected keys in a {kind} action: {extra}")
    if kind == "decompose":
        reason = action.get("reason")
        return Decompose(reason=reason.strip() if isinstance(reason, str) else "")
    if kind == "finish":
        if "result" not in action or action["result"] is None:
            raise invalid_action("missing_result", "finish needs the step's 'result'")
        return Finish(result=action["result"])
    tool = action.get("tool")
    if not isinstance(tool, str) or not tool.strip():
        raise invalid_action("missing_tool", "call needs a 'tool' name")
    tool = tool.strip()
    if tool not in allowed_tools:
        allowed = ", ".join(sorted(allowed_tools)) or "(none)"
        raise invalid_action(
            f"tool_not_allowed:{tool}", f"tool {tool!r} is not allowed; allowed: {allowed}"
        )
    args = action.get("args", {})
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise invalid_action("bad_args", "a call's 'args' must be a JSON object")
    return Call(tool=tool, args=args)
