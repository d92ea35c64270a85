"""One SDK tracer provider for the process, its spans caught by an in-memory exporter.

OpenTelemetry lets a process set its global provider once, so the first test that needs
spans sets it; each test then reads only the spans of its own runs (``spans`` clears the
exporter before and after it). After these tests the exporter keeps nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from taskdecomp.telemetry import trace_content


class Catching(InMemorySpanExporter):
    """Keeps finished spans while a test listens, and drops them otherwise."""

    listening = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not self.listening:
            return SpanExportResult.SUCCESS
        return super().export(spans)


def _exporter() -> Catching:
    """The exporter the process's provider sends spans to, set up by the first caller.

    Kept on the provider, not in this module: pytest imports this file as ``conftest``,
    and a test module that imports its fixture imports it again, under its package name.
    """
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    caught: Catching | None = getattr(provider, "caught_by_tests", None)
    if caught is None:
        caught = Catching()
        provider.add_span_processor(SimpleSpanProcessor(caught))
        provider.caught_by_tests = caught  # type: ignore[attr-defined]  # one per process
    return caught


@pytest.fixture
def spans() -> Iterator[Catching]:
    """The in-memory exporter, catching the spans this test makes (content off)."""
    caught = _exporter()
    caught.clear()
    caught.listening = True
    trace_content(False)
    yield caught
    caught.listening = False
    caught.clear()
    trace_content(False)
