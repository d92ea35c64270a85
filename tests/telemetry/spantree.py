"""Reading the spans a test caught: by name, by parent, and drawn as a tree."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan


def named(spans: Sequence[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    """The spans whose name starts with ``prefix``, in the order they ended."""
    return [span for span in spans if span.name.startswith(prefix)]


def one(spans: Sequence[ReadableSpan], prefix: str) -> ReadableSpan:
    found = named(spans, prefix)
    assert len(found) == 1, [span.name for span in spans]
    return found[0]


def parent_of(spans: Sequence[ReadableSpan], span: ReadableSpan) -> ReadableSpan | None:
    """The caught span that is ``span``'s parent (``None``: a root, or not caught)."""
    if span.parent is None:
        return None
    return next((s for s in spans if s.context.span_id == span.parent.span_id), None)


def ancestors(spans: Sequence[ReadableSpan], span: ReadableSpan) -> list[str]:
    """The names of ``span``'s ancestors, nearest first."""
    names: list[str] = []
    above = parent_of(spans, span)
    while above is not None:
        names.append(above.name)
        above = parent_of(spans, above)
    return names


def drawn(spans: Sequence[ReadableSpan]) -> str:
    """The spans as an indented tree, children in the order they started."""
    by_parent: dict[Any, list[ReadableSpan]] = {}
    ids = {span.context.span_id for span in spans}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        key = span.parent.span_id if span.parent and span.parent.span_id in ids else None
        by_parent.setdefault(key, []).append(span)
    lines: list[str] = []

    def draw(key: Any, depth: int) -> None:
        for span in by_parent.get(key, []):
            lines.append("  " * depth + span.name)
            draw(span.context.span_id, depth + 1)

    draw(None, 0)
    return "\n".join(lines)


def text_of(spans: Sequence[ReadableSpan]) -> str:
    """Every attribute value and status message of ``spans``, as one string to search."""
    parts: list[str] = []
    for span in spans:
        parts.extend(str(value) for value in (span.attributes or {}).values())
        parts.append(span.status.description or "")
        parts.extend(str(link.attributes) for link in span.links)
    return "\n".join(parts)
