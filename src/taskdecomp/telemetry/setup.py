"""Exporting spans from the command line, as the standard ``OTEL_*`` variables ask.

With the ``otel`` extra installed and ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, or ``OTEL_TRACES_EXPORTER``) set, :func:`configure`
sets up the SDK: a ``TracerProvider`` (``service.name`` ``taskdecomp`` unless
``OTEL_SERVICE_NAME`` or ``OTEL_RESOURCE_ATTRIBUTES`` names one), a
``BatchSpanProcessor`` and the OTLP/HTTP exporter (or the console one, on stderr, for
``OTEL_TRACES_EXPORTER=console``), flushed when the process exits. The exporter reads its
own variables (endpoint, headers, timeout). Without the extra: one warning line, and no
export. A process that has set up its own provider keeps it.

Nothing here imports OpenTelemetry unless a variable asks for it.
"""

from __future__ import annotations

import atexit
import sys
from collections.abc import Mapping
from typing import Any

ASKING = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_TRACES_EXPORTER",
)
"""The variables that ask for spans to be exported."""

EXPORTERS = ("otlp", "console")
"""The values of ``OTEL_TRACES_EXPORTER`` understood (``none``: no export)."""

SERVICE = "taskdecomp"
"""``service.name`` unless the environment names the service."""

_done = False


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` asks for spans to be exported."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(environ.get(name, "").strip() for name in ASKING)


def configure(environ: Mapping[str, str]) -> bool:
    """Set up the SDK and its exporter if ``environ`` asks; whether spans are exported.

    Once per process; a provider already set up (by the process itself) is kept.
    """
    global _done
    if _done or not wanted(environ):
        return _done
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        warn("the OpenTelemetry SDK is not installed; pip install 'taskdecomp[otel]'")
        return False
    exporter = _exporter(environ)
    if exporter is None:
        return False
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        _done = True  # the process set up its own provider: spans go where it sends them
        return True
    provider = TracerProvider(resource=Resource.create(_service(environ)))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    atexit.register(provider.shutdown)  # flushes what is batched
    _done = True
    return True


def _exporter(environ: Mapping[str, str]) -> Any:
    """The exporter ``OTEL_TRACES_EXPORTER`` names (default ``otlp``), or ``None``."""
    name = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() or "otlp"
    first = name.split(",")[0].strip()
    if first == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=sys.stderr)  # stdout is --json's, or a JSON-RPC stream
    if first != "otlp":
        warn(f"OTEL_TRACES_EXPORTER={name!r} is not supported; use one of: {', '.join(EXPORTERS)}")
        return None
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if protocol.strip() != "http/protobuf":
        warn(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported; use http/protobuf")
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        warn("the OTLP/HTTP exporter is not installed; pip install 'taskdecomp[otel]'")
        return None
    return OTLPSpanExporter()


def _service(environ: Mapping[str, str]) -> dict[str, str]:
    """``service.name`` for the resource, unless the environment names the service."""
    named = environ.get("OTEL_SERVICE_NAME") or "service.name=" in environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    return {} if named else {"service.name": SERVICE}


def warn(message: str) -> None:
    """One warning line on stderr: spans are not exported, and the run goes on."""
    print(f"taskdecomp: warning: {message}; spans are not exported", file=sys.stderr)
