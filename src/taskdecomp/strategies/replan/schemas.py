"""JSON schemas of the replanner's decision and the executor agent's action.

Like :func:`~taskdecomp.models.schemas.plan_schema`, they constrain a model where the
provider can (a grammar on the embedded model, ``response_format`` elsewhere); the policy
boundary in :mod:`taskdecomp.strategies.replan.boundary` still checks every answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from taskdecomp.models.schemas import plan_schema, tool_call_variants

RESPONSE_MAX_CHARS = 1000
"""Longest answer the respond schema allows, so a constrained model always finishes.

llama.cpp expands a bounded string into one grammar rule per character; past about a
thousand its grammar parser gives up (and llama-cpp-python crashes), so keep it there."""
RESULT_MAX_CHARS = 1000
"""Longest step result the finish schema allows (same bound, same reason)."""


def _closed(properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def decision_schema(
    catalog: Iterable[Mapping[str, Any]],
    *,
    max_steps: int,
    first: int,
    finished: Sequence[str],
) -> dict[str, Any]:
    """``{"kind": "respond", "response": ...}`` or a plan of new steps (ids from ``first``)."""
    plan = plan_schema(
        catalog, min_steps=1, max_steps=max_steps, instructions=True, first=first, finished=finished
    )
    defs = plan.pop("$defs")
    respond = _closed(
        {
            "kind": {"type": "string", "enum": ["respond"]},
            "response": {"type": "string", "minLength": 1, "maxLength": RESPONSE_MAX_CHARS},
        }
    )
    return {"anyOf": [respond, plan], "$defs": defs}


def action_schema(
    catalog: Iterable[Mapping[str, Any]], *, decompose: bool = False
) -> dict[str, Any]:
    """A call of one of the tools in ``catalog`` (with its arguments), or a finish.

    With ``decompose``, also ``{"kind": "decompose", "reason": ...}``.
    """
    defs: dict[str, Any] = {}
    calls = [
        _closed({"kind": {"type": "string", "enum": ["call"]}, **pair})
        for pair in tool_call_variants(catalog, defs)
    ]
    finish = _closed(
        {
            "kind": {"type": "string", "enum": ["finish"]},
            "result": {"type": "string", "minLength": 1, "maxLength": RESULT_MAX_CHARS},
        }
    )
    kinds = [*calls, finish]
    if decompose:
        kinds.append(
            _closed(
                {
                    "kind": {"type": "string", "enum": ["decompose"]},
                    "reason": {"type": "string", "minLength": 1, "maxLength": RESULT_MAX_CHARS},
                }
            )
        )
    return {"anyOf": kinds, "$defs": defs}
