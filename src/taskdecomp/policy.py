"""The policy boundary: model output is untrusted input.

:func:`parse_model_json` turns raw model text into JSON values, refusing anything a strict
parser should not accept (NaN, infinity and numbers beyond a float such as ``1e400``,
duplicate keys, deep nesting, NUL, oversized text).
:func:`validate_plan_action` applies the seed's ``validate_plan_action`` rules, in the
seed's order and with its reason codes, plus ``depends_on`` and ``$ref`` checks, and, for
the ``replan`` strategy, instruction steps and revised plans (a finished step's id may not
come back). Both raise :class:`~taskdecomp.stops.StopRun` whose message names the part
that broke the rule and what is allowed (the model is told it when the answer is sent back
to be repaired); nothing downstream ever sees an unchecked plan. :func:`plain_plan` reads
Eino's plain-string plans as instruction steps.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from taskdecomp import jsonsafe
from taskdecomp.budget import MIN_PLAN_STEPS
from taskdecomp.plan import Plan, Step, TaskId, find_cycle
from taskdecomp.refs import check_refs, has_refs
from taskdecomp.stops import StopRun, invalid_plan

MAX_JSON_CHARS = 200_000
"""Longest model text the boundary parses."""
MAX_JSON_DEPTH = 32
"""Deepest nesting of arrays and objects the boundary accepts."""

PLAN_KEYS = frozenset({"kind", "steps"})
STEP_KEYS = frozenset({"id", "title", "tool", "args", "depends_on"})
INSTRUCTION_STEP_KEYS = frozenset({"id", "title", "instruction", "depends_on"})
TITLE_CHARS = 80
"""Longest title given to a plain-string step (its instruction keeps the whole text)."""


class _Rejected(ValueError):
    """Internal: the text is not acceptable JSON."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _Rejected("duplicate key")
    return obj


def _depth(value: Any) -> int:
    """Nesting depth of containers, iteratively (a scalar is 0)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in children)
    return deepest


def parse_model_json(text: str, *, max_chars: int = MAX_JSON_CHARS) -> Any:
    """Parse model text strictly.

    A number JSON cannot carry (``NaN``, ``Infinity``, ``1e400``, ``-1e999``) is refused
    like any other non-JSON text, so no non-finite value ever reaches a tool or the store.

    Raises:
        StopRun: ``invalid_plan:non_json`` with a message saying what was wrong.
    """
    problem: str | None = None
    if len(text) > max_chars:
        problem = f"text is {len(text)} characters, over the cap of {max_chars}"
    elif "\x00" in text:
        problem = "text contains a NUL character"
    else:
        try:
            value = jsonsafe.loads(text, object_pairs_hook=_no_duplicates)
        except (ValueError, RecursionError) as exc:  # StrictJSONError and _Rejected included
            problem = f"not strict JSON: {exc}"
        else:
            if _depth(value) > MAX_JSON_DEPTH:
                problem = f"nesting deeper than {MAX_JSON_DEPTH}"
            else:
                return value
    raise StopRun(invalid_plan("non_json"), message=problem)


def validate_plan_action(
    action: Any,
    *,
    max_plan_steps: int,
    allowed_tools: Collection[str],
    min_plan_steps: int = MIN_PLAN_STEPS,
    allow_instructions: bool = False,
    finished: Collection[TaskId] = frozenset(),
) -> Plan:
    """Validate a parsed planner answer and return the plan it describes.

    The checks and their reason codes follow the seed, in its order; ``depends_on`` and
    ``$ref`` arguments are checked after every step is known.

    Args:
        action: the parsed answer.
        max_plan_steps: most steps.
        allowed_tools: the allowlist.
        min_plan_steps: fewest steps.
        allow_instructions: accept instruction steps (``replan`` strategy).
        finished: steps an earlier revision finished: their ids may not come back, and
            ``depends_on`` and ``$ref`` may name them.

    Raises:
        StopRun: ``invalid_plan:<rule>`` for the first rule the plan breaks, or
            ``bad_ref:<step>`` for a reference to a step the step does not wait for.
    """
    if not isinstance(action, dict):
        raise StopRun(
            invalid_plan("not_object"),
            message='the plan must be one JSON object: {"kind": "plan", "steps": [...]}',
        )
    kind = action.get("kind")
    if kind == "invalid":
        raise StopRun(invalid_plan("non_json"), message="the answer says no plan was made")
    if kind != "plan":
        raise StopRun(invalid_plan("bad_kind"), message=f"kind must be 'plan', got {kind!r}")
    if set(action) - PLAN_KEYS:
        extra = ", ".join(sorted(map(str, set(action) - PLAN_KEYS)))
        raise StopRun(
            invalid_plan("extra_keys"),
            message=f"a plan has only the keys kind and steps; remove: {extra}",
        )
    raw_steps = action.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise StopRun(
            invalid_plan("missing_steps"), message="steps must be a non-empty list of steps"
        )
    size = f"a plan has from {min_plan_steps} to {max_plan_steps} steps"
    if len(raw_steps) < min_plan_steps:
        raise StopRun(
            invalid_plan("min_steps"), message=f"the plan has {len(raw_steps)} steps; {size}"
        )
    if len(raw_steps) > max_plan_steps:
        raise StopRun(
            invalid_plan("max_steps"), message=f"the plan has {len(raw_steps)} steps; {size}"
        )

    steps: list[Step] = []
    seen_ids: set[str] = set()
    for index, raw in enumerate(raw_steps, start=1):
        step = validate_step(raw, index, seen_ids, allowed_tools, allow_instructions)
        if step.id in finished:
            raise StopRun(
                invalid_plan(f"finished_step_id:{step.id}"),
                message=f"step {step.id!r} already ran; a revised plan lists only new steps, "
                "with new ids",
            )
        seen_ids.add(step.id)
        steps.append(step)
    _validate_dependencies(steps, frozenset(finished))
    plan = Plan(steps=tuple(steps))
    for step in plan.steps:
        if has_refs(step.args):  # most steps have none: skip the walk up the DAG
            check_refs(step, plan.ancestors(step.id) | set(finished))
    return plan


def plain_plan(action: Any, *, first: int = 1, taken: Collection[str] = ()) -> Any:
    """A plan given as plain step strings, as instruction steps; anything else unchanged.

    Eino's default ``Plan`` is ``{"steps": ["do x", "do y"]}``: a list of texts, no kind,
    no ids. That (with or without ``"kind": "plan"``), or a bare list of texts, becomes
    ``{"kind": "plan", "steps": [{"id", "title", "instruction"}, ...]}``, each text the
    instruction of a step and, on its first line cut to :data:`TITLE_CHARS`, its title.
    Ids are ``step_<n>`` from ``first`` on, skipping the ``taken`` ones. The result still
    goes through :func:`validate_plan_action`, like any plan.
    """
    texts = action.get("steps") if isinstance(action, dict) else action
    if isinstance(action, dict) and (
        set(action) - PLAN_KEYS or action.get("kind", "plan") != "plan"
    ):
        return action
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        return action
    ids: list[str] = []
    number = first
    for _ in texts:
        while f"step_{number}" in taken:
            number += 1
        ids.append(f"step_{number}")
        number += 1
    steps = [
        {"id": step_id, "title": _title(text), "instruction": text}
        for step_id, text in zip(ids, texts, strict=True)
    ]
    return {"kind": "plan", "steps": steps}


def _title(text: str) -> str:
    first_line = text.strip().split("\n", 1)[0].strip()
    if len(first_line) <= TITLE_CHARS:
        return first_line
    return first_line[: TITLE_CHARS - 3].rstrip() + "..."


def validate_step(
    raw: Any,
    index: int,
    seen_ids: Collection[str],
    allowed_tools: Collection[str],
    allow_instructions: bool = False,
) -> Step:
    """Check the ``index``-th step of a plan on its own, as :func:`validate_plan_action` does.

    ``seen_ids`` are the ids of the steps before it.

    Raises:
        StopRun: ``invalid_plan:<rule>`` for the first rule the step breaks.
    """
    if not isinstance(raw, dict):
        raise StopRun(
            invalid_plan(f"step_{index}_not_object"),
            message=f"step {index} must be a JSON object",
        )
    is_instruction = allow_instructions and "instruction" in raw
    if is_instruction and "tool" in raw:
        raise StopRun(
            invalid_plan(f"step_{index}_tool_and_instruction"),
            message="a step has either a tool (with args) or an instruction, not both",
        )
    keys = INSTRUCTION_STEP_KEYS if is_instruction else STEP_KEYS
    if set(raw) - keys:
        extra = ", ".join(sorted(map(str, set(raw) - keys)))
        raise StopRun(
            invalid_plan(f"step_{index}_extra_keys"),
            message=f"step {index} has keys a step may not have: {extra}; "
            f"allowed: {', '.join(sorted(keys))}",
        )
    step_id = raw.get("id")
    if not isinstance(step_id, str) or not step_id.strip():
        raise StopRun(
            invalid_plan(f"step_{index}_missing_id"), message=f"step {index} needs a text 'id'"
        )
    if step_id in seen_ids or step_id.strip() in seen_ids:
        raise StopRun(
            invalid_plan("duplicate_step_id"),
            message=f"step {index} reuses the id {step_id!r}; give every step its own id",
        )
    title = raw.get("title")
    if not isinstance(title, str) or not title.strip():
        raise StopRun(
            invalid_plan(f"step_{index}_missing_title"),
            message=f"step {index} needs a text 'title'",
        )
    if is_instruction:
        return _instruction_step(raw, index, step_id, title)
    tool = raw.get("tool")
    allowed = ", ".join(sorted(allowed_tools)) or "(none)"
    if not isinstance(tool, str) or not tool.strip():
        raise StopRun(
            invalid_plan(f"step_{index}_missing_tool"),
            message=f"step {index} needs a 'tool'; allowed: {allowed}",
        )
    tool = tool.strip()
    if tool not in allowed_tools:
        raise StopRun(
            invalid_plan(f"tool_not_allowed:{tool}"),
            message=f"tool {tool!r} is not allowed; allowed: {allowed}",
        )
    args = raw.get("args", {})
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise StopRun(
            invalid_plan(f"step_{index}_bad_args"),
            message=f"step {index}'s 'args' must be a JSON object",
        )
    return Step(
        id=TaskId(step_id.strip()),
        title=title.strip(),
        tool=tool,
        args=args,
        depends_on=_depends_on(raw, index),
    )


def _instruction_step(raw: dict[str, Any], index: int, step_id: str, title: str) -> Step:
    instruction = raw.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        raise StopRun(
            invalid_plan(f"step_{index}_missing_instruction"),
            message=f"step {index} needs a text 'instruction'",
        )
    return Step(
        id=TaskId(step_id.strip()),
        title=title.strip(),
        instruction=instruction.strip(),
        depends_on=_depends_on(raw, index),
    )


def _depends_on(raw: dict[str, Any], index: int) -> tuple[TaskId, ...] | None:
    if "depends_on" not in raw:
        return None
    value = raw["depends_on"]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise StopRun(
            invalid_plan(f"step_{index}_bad_depends_on"),
            message="depends_on must be a list of step ids",
        )
    return tuple(dict.fromkeys(TaskId(v.strip()) for v in value))


def _validate_dependencies(steps: list[Step], finished: frozenset[TaskId]) -> None:
    ids = {step.id for step in steps} | finished
    for step in steps:
        for dep in step.depends_on or ():
            if dep not in ids:
                known = ", ".join(sorted(ids))
                raise StopRun(
                    invalid_plan(f"unknown_dependency:{dep}"),
                    message=f"step {step.id!r} depends on {dep!r}, which is no step of the "
                    f"plan; known: {known}",
                )
    edges = {step.id: step.depends_on or () for step in steps}
    cycle = find_cycle(edges)
    if cycle is not None:
        raise StopRun(invalid_plan("cycle"), message="dependency cycle: " + " -> ".join(cycle))
