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


_EXPORTER = Catching()


def _provider() -> None:
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    trace.set_tracer_provider(provider)


@pytest.fixture
def spans() -> Iterator[Catching]:
    """The in-memory exporter, catching the spans this test makes (content off)."""
    _provider()
    _EXPORTER.clear()
    _EXPORTER.listening = True
    trace_content(False)
    yield _EXPORTER
    _EXPORTER.listening = False
    _EXPORTER.clear()
    trace_content(False)
