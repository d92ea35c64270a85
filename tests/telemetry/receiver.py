"""An OTLP/HTTP trace receiver on 127.0.0.1: it decodes what exporters send it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class Received:
    """One span as the exporter sent it."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    service: str
    links: tuple[str, ...]
    """The trace ids it links to."""


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return (
        getattr(value, kind)
        if kind in ("string_value", "int_value", "bool_value", "double_value")
        else str(value)
    )


class Receiver:
    """Spans received so far, from any number of exporters."""

    def __init__(self) -> None:
        self.spans: list[Received] = []
        self.lock = threading.Lock()
        self.url = ""

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    received = Received(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        service=str(resource.get("service.name")),
                        links=tuple(link.trace_id.hex() for link in span.links),
                    )
                    with self.lock:
                        self.spans.append(received)

    def wait(self, check: Any, *, timeout: float = 60) -> list[Received]:
        """The spans once ``check(spans)`` holds; fails with what arrived after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                spans = list(self.spans)
            if check(spans):
                return spans
            assert time.monotonic() < deadline, [span.name for span in spans]
            time.sleep(0.1)


@contextmanager
def receiving() -> Iterator[Receiver]:
    """A receiver listening on 127.0.0.1 (its ``url`` is the OTLP endpoint) while in use."""
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path == "/v1/traces":
                receiver.take(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
