"""JSON schemas for structured output, built from the plan contract and the tool catalog.

:func:`plan_schema` describes the planner's answer (``{"kind": "plan", "steps": [...]}``)
for one set of tools, tightly enough that every answer matching it passes the policy
boundary:

- tool names are an enum, and each step's ``args`` follow that tool's argument schema (one
  ``anyOf`` branch per tool);
- step ``n`` has the id ``step_n``, so ids are unique, and its optional ``depends_on`` may
  only name earlier steps, so dependencies are known and acyclic;
- the plan has between the budget's fewest and most steps (one tuple per length);
- titles and free-text string arguments are bounded, so a constrained model always
  finishes (:data:`TITLE_PATTERN`, :data:`ARG_STRING_MAX_CHARS`).

Providers use it to constrain the model (a grammar on the embedded model, an OpenAI
``response_format`` elsewhere); the policy boundary still validates every answer.

:func:`is_strict_compatible` tells whether a schema meets OpenAI's strict mode (every object
closed and every key required), which the plan schema does not: ``depends_on`` stays
optional, as the contract says.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

TITLE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 ,.:;()'/&%#+=-]{0,59}$"
"""Step titles the schema allows: plain text up to 60 characters, so a small model cannot
ramble or break the JSON inside one (the policy accepts any non-blank title)."""
INSTRUCTION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 ,.:;()'/&%#+=?-]{0,199}$"
"""Instructions the schema allows: plain text up to 200 characters."""
ARG_STRING_MAX_CHARS = 120
"""Longest free-text string argument the schema allows (where the tool sets no bound), so
a constrained small model always finishes its JSON."""


def step_id(position: int) -> str:
    """The id the schema gives the step at 1-based ``position``."""
    return f"step_{position}"


def plan_schema(
    catalog: Iterable[Mapping[str, Any]],
    *,
    min_steps: int,
    max_steps: int,
    instructions: bool = False,
    first: int = 1,
    finished: Sequence[str] = (),
) -> dict[str, Any]:
    """The JSON schema of a plan that uses only the tools in ``catalog``.

    Args:
        catalog: entries as :meth:`~taskdecomp.tools.Toolset.catalog` returns them
            (``name``, ``description``, ``args``).
        min_steps: fewest steps.
        max_steps: most steps.
        instructions: also allow instruction steps (``{"id", "title", "instruction"}``).
        first: the number of the first step's id (``step_<first>``): a revised plan
            continues after the steps already planned.
        finished: ids of finished steps that ``depends_on`` may also name.

    Returns:
        A self-contained schema. Its ``$defs`` hold each tool's arguments
        (``tool__<name>__args``, their own definitions renamed under the tool) and the
        step at each position (``step_<n>``). With no tools, a step may name any tool (the
        policy boundary then refuses the plan).
    """
    defs: dict[str, Any] = {}
    tools = [_tool_args(entry, defs) for entry in catalog]
    ids = [step_id(n) for n in range(first, first + max_steps)]
    for index, position in enumerate(range(first, first + max_steps)):
        earlier = [*finished, *ids[:index]]
        defs[ids[index]] = _position(position, tools, earlier, instructions)
    refs = [{"$ref": f"#/$defs/{name}"} for name in ids]
    lengths = [
        {
            "type": "array",
            "prefixItems": refs[:count],
            "items": False,
            "minItems": count,
            "maxItems": count,
        }
        for count in range(min(min_steps, max_steps), max_steps + 1)
    ]
    return {
        "type": "object",
        "properties": {
            "kind": {"type": "string", "enum": ["plan"]},
            "steps": lengths[0] if len(lengths) == 1 else {"anyOf": lengths},
        },
        "required": ["kind", "steps"],
        "additionalProperties": False,
        "$defs": defs,
    }


def tool_call_variants(catalog: Iterable[Mapping[str, Any]], defs: dict[str, Any]) -> list[Any]:
    """One ``{"tool": <name>, "args": <its schema>}`` property pair per tool.

    Each tool's argument schema is hoisted into ``defs``.
    """
    return [
        {"tool": {"type": "string", "enum": [name]}, "args": {"$ref": ref}}
        for name, ref in (_tool_args(entry, defs) for entry in catalog)
    ]


def _tool_args(entry: Mapping[str, Any], defs: dict[str, Any]) -> tuple[str, str]:
    """Hoist a tool's argument schema into ``defs``; return its name and ``$ref``."""
    name = str(entry["name"])
    args = copy.deepcopy(dict(entry.get("args") or {"type": "object"}))
    own_defs = args.pop("$defs", {})
    renames = {key: f"tool__{name}__defs__{key}" for key in own_defs}
    for key, value in own_defs.items():
        defs[renames[key]] = _bound_strings(_rename_refs(value, renames))
    args = _bound_strings(_rename_refs(args, renames))
    args.pop("title", None)
    args.setdefault("type", "object")
    defs[f"tool__{name}__args"] = args
    return name, f"#/$defs/tool__{name}__args"


def _position(
    position: int, tools: list[tuple[str, str]], earlier: list[str], instructions: bool
) -> dict[str, Any]:
    variants = [
        _step_object(position, {"tool": {"type": "string", "enum": [name]}, "args": {"$ref": ref}})
        for name, ref in tools
    ]
    if not tools:
        variants = [
            _step_object(
                position, {"tool": {"type": "string", "minLength": 1}, "args": {"type": "object"}}
            )
        ]
    if instructions:
        text = {"type": "string", "pattern": INSTRUCTION_PATTERN}
        variants.append(_step_object(position, {"instruction": text}))
    if earlier:
        for variant in variants:
            variant["properties"]["depends_on"] = {
                "type": "array",
                "items": {"type": "string", "enum": earlier},
                "maxItems": len(earlier),
            }
    return variants[0] if len(variants) == 1 else {"anyOf": variants}


def _step_object(position: int, body: dict[str, Any]) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "id": {"type": "string", "enum": [step_id(position)]},
        "title": {"type": "string", "pattern": TITLE_PATTERN},
        **body,
    }
    return {
        "type": "object",
        "properties": properties,
        "required": ["id", "title", *body],
        "additionalProperties": False,
    }


def _bound_strings(value: Any) -> Any:
    if isinstance(value, list):
        return [_bound_strings(item) for item in value]
    if not isinstance(value, dict):
        return value
    out = {key: _bound_strings(item) for key, item in value.items()}
    unbounded = not {"maxLength", "enum", "const", "pattern", "format"} & set(out)
    if out.get("type") == "string" and unbounded:
        out["maxLength"] = ARG_STRING_MAX_CHARS
    return out


def _rename_refs(value: Any, renames: Mapping[str, str]) -> Any:
    if isinstance(value, dict):
        out = {key: _rename_refs(item, renames) for key, item in value.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            out["$ref"] = "#/$defs/" + renames.get(ref[len("#/$defs/") :], ref[8:])
        return out
    if isinstance(value, list):
        return [_rename_refs(item, renames) for item in value]
    return value


def is_strict_compatible(schema: Mapping[str, Any]) -> bool:
    """Whether OpenAI's strict structured-output mode accepts ``schema`` as it is.

    Strict mode wants every object closed (``additionalProperties: false``) with every
    property required, and no ``anyOf`` at the root.
    """
    if "anyOf" in schema or "oneOf" in schema:
        return False
    return _strict(schema) and all(_strict(d) for d in schema.get("$defs", {}).values())


def _strict(node: Any) -> bool:
    if isinstance(node, list):
        return all(_strict(item) for item in node)
    if not isinstance(node, Mapping):
        return True
    if "oneOf" in node:
        return False
    if node.get("type") == "object" or "properties" in node:
        properties = node.get("properties", {})
        if node.get("additionalProperties") is not False:
            return False
        if set(node.get("required", ())) != set(properties):
            return False
    return all(_strict(value) for key, value in node.items() if key != "$defs")
