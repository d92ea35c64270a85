"""What every stub server shares: a queue of canned replies, served in a thread on 127.0.0.1.

:class:`StubServer` records each ``POST``, answers it from its queue (then from its
:class:`~stub_servers.responder.Responder`, then from ``fallback``) and writes the reply,
whole or as a stream of pieces. A subclass keeps only its provider's wire format: what it
records of a request, what it refuses, its error body and its streamed events.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Generic, Self, TypeVar

from stub_servers.responder import Responder


@dataclass
class Reply:
    """One canned reply: a status and JSON body (or raw bytes), or a stall that never answers."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    stall: bool = False
    raw: bytes | None = None
    """Sent as it is instead of ``body`` as JSON, with ``content_type``."""
    content_type: str = "application/json"
    pause: float = 0.0
    """Seconds between two events of a streamed answer."""
    cut_after: int | None = None
    """Close the connection after this many events of a streamed answer (a dropped link)."""


@dataclass
class Call:
    """One ``POST`` as it arrived: its path (with the query), JSON body, headers and port."""

    path: str
    body: Any
    headers: dict[str, str]
    port: int


R = TypeVar("R", bound=Reply)
S = TypeVar("S")


class StubServer(Generic[R, S]):
    """A server that answers ``POST`` requests from a queue of replies ``R``.

    Each request is recorded in ``requests`` (as the subclass's ``S``), with its headers in
    ``headers`` and the client's port, one per connection, in ``ports``. When the queue is
    empty it answers from ``responder``, then ``fallback``, then with a 500.
    """

    prefix: ClassVar[str] = ""
    """The path the base URL ends with."""
    poll: ClassVar[float] = 0.5
    """Seconds between two looks at whether the server was told to stop."""

    def __init__(self, *, keep_alive: bool = False) -> None:
        self.keep_alive = keep_alive
        """Keep connections open between requests (HTTP/1.1), as the real API does."""
        self.ports: list[int] = []
        """The client's port of each request: one per connection."""
        self.replies: list[R] = []
        self.fallback: R | None = None
        self.responder: Responder | None = None
        self.requests: list[S] = []
        self.headers: list[dict[str, str]] = []
        self.released = threading.Event()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(self.poll,), daemon=True
        )

    @property
    def url(self) -> str:
        """The base URL a client is given."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}{self.prefix}"

    def queue(self, *replies: R) -> None:
        """Add ``replies`` to the end of the queue."""
        self.replies.extend(replies)

    def start(self) -> None:
        """Serve in a daemon thread."""
        self._thread.start()

    def stop(self) -> None:
        """Let stalled requests go, stop serving and free the port."""
        self.released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # What a subclass says of its wire format.

    def _body(self, data: bytes) -> Any:
        """A request's body from its bytes."""
        return json.loads(data or b"{}")

    def _seen(self, call: Call) -> S:
        """What ``requests`` keeps of ``call``."""
        raise NotImplementedError

    def _refusal(self, call: Call, seen: S) -> R | None:
        """What the server answers a request it does not take, before any queued reply."""
        return None

    def _respond(self, responder: Responder, seen: S) -> R:
        """``responder``'s answer to a request, in the mode it asks in."""
        raise NotImplementedError

    def _fail(self, status: int, text: str) -> R:
        """An error reply with the provider's error body."""
        raise NotImplementedError

    def _events(self, call: Call, reply: R) -> list[bytes] | None:
        """The pieces of a streamed answer when ``call`` asks for a stream, else ``None``."""
        return None

    # The machinery.

    def _next(self, call: Call) -> R:
        seen = self._seen(call)
        with self._lock:
            self.ports.append(call.port)
            self.requests.append(seen)
            self.headers.append(call.headers)
            reply = self._refusal(call, seen)
            if reply is None and self.replies:
                reply = self.replies.pop(0)
        if reply is not None:
            return reply
        if self.responder is not None:
            return self._respond(self.responder, seen)
        if self.fallback is not None:
            return self.fallback
        return self._fail(500, "no canned reply left")

    def _answer(self, handler: BaseHTTPRequestHandler, call: Call) -> None:
        reply = self._next(call)
        if reply.stall:  # far past any test's timeout: a client must give up first
            self.released.wait(600)
            return
        events = self._events(call, reply) if reply.raw is None and reply.status == 200 else None
        if events is not None:
            write(handler, reply, events, "text/event-stream")
            return
        data = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
        write(handler, reply, [data], reply.content_type)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if stub.keep_alive else "HTTP/1.0"
            disable_nagle_algorithm = True  # headers and body leave at once

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = stub._body(self.rfile.read(length))
                headers = {k.lower(): v for k, v in self.headers.items()}
                stub._answer(self, Call(self.path, body, headers, self.client_address[1]))

        return Handler


def write(
    handler: BaseHTTPRequestHandler, reply: Reply, pieces: list[bytes], content_type: str
) -> None:
    """Send ``reply``'s status and headers, then ``pieces`` with its pauses and cut."""
    handler.send_response(reply.status)
    handler.send_header("content-type", content_type)
    handler.send_header("content-length", str(sum(map(len, pieces))))
    for name, value in reply.headers.items():
        handler.send_header(name, value)
    handler.end_headers()
    for sent, piece in enumerate(pieces):
        if reply.cut_after is not None and sent >= reply.cut_after:
            handler.wfile.flush()
            handler.close_connection = True
            return
        handler.wfile.write(piece)
        if reply.pause:
            handler.wfile.flush()
            time.sleep(reply.pause)
