"""What failed attempts already did, told to the next attempt and to the decomposer.

An attempt at a leaf that fails may have made tool calls that worked (a charge, before the
shipping failed). They happened: the next attempt at the leaf sees them with what they
returned (``last_attempt.done``), and a split of the leaf, or of a node whose subtask
failed, is told about them and about the subtasks that finished, so that neither does them
again. What is kept is bounded: the latest :data:`MAX_CALLS` calls of a node, each value cut
to :data:`MAX_CHARS` characters of JSON, and the text for the decomposer to
:data:`MAX_TEXT` characters.
"""

from __future__ import annotations

import json
from typing import Any

from taskdecomp.strategies.tree.shape import Shape
from taskdecomp.tree import NodeId

MAX_CALLS = 20
"""Most tool calls kept for one node, the latest ones."""
MAX_CHARS = 400
"""Longest JSON of one call's arguments or result; longer ones are cut."""
MAX_TEXT = 4000
"""Longest account of what was done, in the text for the decomposer."""


def kept(done: list[dict[str, Any]], turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``done`` with the calls of one more failed attempt (its agent ``turns``), bounded."""
    calls = [
        {
            "tool": turn["call"]["tool"],
            "args": _cut(turn["call"].get("args")),
            "result": _cut(turn.get("result")),
        }
        for turn in turns
        if isinstance(turn.get("call"), dict)
    ]
    return [*done, *calls][-MAX_CALLS:]


def told(shape: Shape, node_id: NodeId, failure: str) -> str:
    """``failure`` with what was done already under ``node_id``, for the decomposer.

    A leaf's failed attempts' calls; for an inner node, the results of the subtasks below
    it that finished (the highest ones) and the calls of the failed attempts below it.
    """
    below = shape.below(node_id)
    lines = [
        f"subtask {_name(shape, kid)!r} finished: {_json(_status(shape, kid)[1])}"
        for kid in below
        if _status(shape, kid)[0] == "ok" and _status(shape, shape.ancestors(kid)[0])[0] != "ok"
    ]
    for done_id in [node_id, *below]:
        record = shape.state.nodes.get(str(done_id))
        name = "this task" if done_id == node_id else f"subtask {_name(shape, done_id)!r}"
        for call in record.done if record is not None else ():
            lines.append(
                f"{name} called {call['tool']} {_json(call['args'])}: {_json(call['result'])}"
            )
    if not lines:
        return failure
    text = "\n- ".join(["Already done, not to be done again (use the results):", *lines])
    if len(text) > MAX_TEXT:
        text = text[: MAX_TEXT - 1] + "\u2026"
    return f"{failure}\n{text}"


def _status(shape: Shape, node_id: NodeId) -> tuple[str, Any]:
    record = shape.state.nodes.get(str(node_id))
    return (record.status, record.result) if record is not None else ("pending", None)


def _name(shape: Shape, node_id: NodeId) -> str:
    node = shape.node(node_id)
    return node.name if node is not None else str(node_id)


def _cut(value: Any) -> Any:
    """``value``, or the start of its JSON when that is longer than :data:`MAX_CHARS`."""
    text = _json(value)
    return value if len(text) <= MAX_CHARS else text[: MAX_CHARS - 1] + "\u2026"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
