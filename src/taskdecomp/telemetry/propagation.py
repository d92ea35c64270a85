"""W3C trace context kept with a run: how its later segments find the trace it began in.

A run stores its first trace's context in its config, under ``"trace"`` (a
``traceparent``, and a ``tracestate`` when there is one): ``run`` stores its own span's,
``submit`` and ``POST /runs`` the submitter's. The first segment a queue worker (or the
service) runs is a child of it, so a queued run continues its submitter's trace across
processes; every later segment (a resume, an approval) links to it, in a trace of its own
unless a span of the caller's is current (a library user's), whose child it then is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanContext
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from taskdecomp.telemetry import spans

KEY = "trace"
"""Where a run's config keeps its first trace's context."""

_W3C = TraceContextTextMapPropagator()


def carrier(current: Span | None = None) -> dict[str, str]:
    """The W3C headers of ``current`` (default: the current span); empty when none is recorded."""
    chosen = current if current is not None else trace.get_current_span()
    if not chosen.get_span_context().is_valid:
        return {}
    headers: dict[str, str] = {}
    _W3C.inject(headers, context=trace.set_span_in_context(chosen))
    return headers


def carried(current: Span | None = None) -> dict[str, Any]:
    """``{"trace": headers}`` to merge into a run's config, or ``{}`` without a trace."""
    headers = carrier(current)
    return {KEY: headers} if headers else {}


def stored_context(config: Mapping[str, Any]) -> SpanContext | None:
    """The span context a run's ``config`` keeps, if it keeps a valid one."""
    headers = config.get(KEY)
    if not isinstance(headers, Mapping):
        return None
    context = _W3C.extract({str(k): str(v) for k, v in headers.items()})
    found = trace.get_current_span(context).get_span_context()
    return found if found.is_valid else None


def parent(config: Mapping[str, Any]) -> Context | None:
    """A context whose current span is the one ``config`` keeps (``None``: none kept)."""
    found = stored_context(config)
    if found is None:
        return None
    return trace.set_span_in_context(trace.NonRecordingSpan(found))


def links(config: Mapping[str, Any]) -> list[Link]:
    """A link to the first trace ``config`` keeps, as a resumed segment's span has it."""
    found = stored_context(config)
    return [Link(found, {"taskdecomp.link": "first_trace"})] if found is not None else []


@contextmanager
def submitting(strategy: str) -> Iterator[Span]:
    """The ``submit <strategy>`` span of a run handed to a queue, current while it is.

    Open it around storing and enqueueing the run: merge :func:`carried` of it into the
    queued run's config (the worker's span of the run is its child, so the run continues
    the submitter's trace) and set ``taskdecomp.run.id`` to the id the store returned (a
    second submit of an idempotency key names the first run). A failure is recorded on it.
    """
    with spans.span(f"submit {strategy}", {"taskdecomp.strategy": strategy}) as current:
        yield current
