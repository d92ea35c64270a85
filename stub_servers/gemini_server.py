"""A Gemini API server of our own, for the google provider's tests.

Written from the public Gemini API reference (ai.google.dev/api): ``POST
/v1beta/models/{model}:generateContent`` answers one ``GenerateContentResponse``;
``:streamGenerateContent?alt=sse`` answers the same as server-sent events (``data: {...}``),
the text in pieces, ``finishReason`` and ``usageMetadata`` in the last chunk. The key is read
from the ``x-goog-api-key`` header as the API does: none is 403 ``PERMISSION_DENIED``, a wrong
one 400 ``INVALID_ARGUMENT`` with reason ``API_KEY_INVALID``. Errors have the API's body,
``{"error": {"code", "message", "status", "details"}}``.

Replies come from a queue of canned :class:`Reply` objects (like ``fake_openai``), then from
``fallback``. A server may refuse JSON mode or function calling as the API does for models
without them (Gemma): a 400 ``JSON mode is not enabled for models/...``.

Given a :class:`~stub_servers.responder.Responder` (``responder``), a request no canned
reply is left for is answered by what it is, in the mode it asks in: a ``functionCall``
when function calling is forced, the JSON as text under ``responseMimeType``, prose with the
JSON in a code fence when the schema is only stated in the system instruction, else text.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from stub_servers.responder import Asked, Responder, fenced, stated_schema

KEY = "gm-test-key-0123456789abcdef"
"""The key the server takes (long enough to count as a secret)."""

STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


def answer(
    text: str, *, finish: str = "STOP", usage: tuple[int, int] | None = (120, 40)
) -> dict[str, Any]:
    """A ``GenerateContentResponse`` whose one candidate says ``text``."""
    return _response([{"text": text}], finish, usage)


def call(
    args: dict[str, Any], *, name: str = "answer", usage: tuple[int, int] | None = (120, 40)
) -> dict[str, Any]:
    """A ``GenerateContentResponse`` whose one candidate calls function ``name``."""
    return _response([{"functionCall": {"name": name, "args": args}}], "STOP", usage)


def _response(
    parts: list[dict[str, Any]], finish: str, usage: tuple[int, int] | None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}
        ],
        "modelVersion": "gemini-x",
        "responseId": "test-response",
    }
    if usage is not None:
        body["usageMetadata"] = {
            "promptTokenCount": usage[0],
            "candidatesTokenCount": usage[1],
            "totalTokenCount": sum(usage),
        }
    return body


def error_body(
    status: int, message: str, *, details: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The API's error body."""
    error = {"code": status, "message": message, "status": STATUS_NAMES.get(status, "UNKNOWN")}
    if details:
        error["details"] = details
    return {"error": error}


@dataclass
class Reply:
    """One canned reply: a status and JSON body, or a stall that never answers."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    stall: bool = False


def failure(status: int, message: str, **headers: str) -> Reply:
    """An error reply; ``retry_after="2"`` becomes a ``Retry-After`` header."""
    names = {k.replace("_", "-"): v for k, v in headers.items()}
    return Reply(status=status, body=error_body(status, message), headers=names)


def event_stream(body: dict[str, Any], piece: int = 6) -> bytes:
    """A response as ``streamGenerateContent?alt=sse`` sends it: text in pieces, usage last."""
    candidate = body["candidates"][0]
    parts = candidate["content"]["parts"]
    chunks: list[dict[str, Any]] = []
    for part in parts:
        text = part.get("text")
        pieces = [text[i : i + piece] for i in range(0, len(text), piece)] if text else [None]
        for bit in pieces:
            content = {"text": bit} if bit is not None else part
            chunks.append({"candidates": [{"content": {"role": "model", "parts": [content]}}]})
    last = chunks[-1]["candidates"][0]
    last["finishReason"] = candidate["finishReason"]
    if "usageMetadata" in body:
        chunks[-1]["usageMetadata"] = body["usageMetadata"]
    return "".join(f"data: {json.dumps(chunk)}\r\n\r\n" for chunk in chunks).encode()


@dataclass
class Seen:
    """One request as the server received it."""

    path: str
    query: dict[str, list[str]]
    body: dict[str, Any]
    headers: dict[str, str]
    port: int
    """The client's port: one per connection."""

    @property
    def generation(self) -> dict[str, Any]:
        """The request's ``generationConfig`` (empty when it sent none)."""
        config: dict[str, Any] = self.body.get("generationConfig", {})
        return config

    @property
    def system(self) -> str:
        """The text of the request's system instruction."""
        parts = self.body.get("systemInstruction", {}).get("parts", [])
        return "".join(part.get("text", "") for part in parts)


class GeminiServer:
    """A Gemini API server that replays :class:`Reply` objects in order."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.fallback: Reply | None = None
        self.responder: Responder | None = None
        self.requests: list[Seen] = []
        self.json_mode = True
        """Whether ``responseMimeType: application/json`` is taken."""
        self.function_calling = True
        """Whether ``tools`` are taken."""
        self.released = threading.Event()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )

    @property
    def url(self) -> str:
        """The base URL a client is given."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def queue(self, *replies: Reply) -> None:
        """Add ``replies`` to the end of the queue."""
        self.replies.extend(replies)

    def _next(self, seen: Seen) -> Reply:
        with self._lock:
            self.requests.append(seen)
            refused = self._refusal(seen)
            if refused is not None:
                return refused
            if self.replies:
                return self.replies.pop(0)
        if self.responder is not None:
            return Reply(body=responded(self.responder, seen))
        if self.fallback is not None:
            return self.fallback
        return failure(500, "no canned reply left")

    def modes(self) -> list[str]:
        """The output mode of each request that asked for structured output, in order."""
        return [mode for mode in map(_mode, self.requests) if mode is not None]

    def _refusal(self, seen: Seen) -> Reply | None:
        """What the API answers a request this server cannot take, before any reply."""
        key = seen.headers.get("x-goog-api-key")
        if key is None:
            return failure(403, "Method doesn't allow unregistered callers.")
        if key != KEY:
            reason = {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "googleapis.com",
            }
            body = error_body(400, "API key not valid. Please pass a valid API key.")
            body["error"]["details"] = [reason]
            return Reply(status=400, body=body)
        model = seen.path.rsplit("/", 1)[-1].split(":")[0]
        if not self.json_mode and "responseMimeType" in seen.generation:
            return failure(400, f"JSON mode is not enabled for models/{model}")
        if not self.function_calling and "tools" in seen.body:
            return failure(400, f"Function calling is not enabled for models/{model}")
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keeps connections open, as the API does
            disable_nagle_algorithm = True  # headers and body leave at once

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                url = urlsplit(self.path)
                headers = {k.lower(): v for k, v in self.headers.items()}
                if not url.path.startswith("/v1beta/models/"):
                    self._send(failure(404, f"no such method: {url.path}"), False)
                    return
                seen = Seen(
                    path=url.path,
                    query=parse_qs(url.query),
                    body=body,
                    headers=headers,
                    port=self.client_address[1],
                )
                reply = server._next(seen)
                if reply.stall:  # far past any test's timeout: a client must give up first
                    server.released.wait(600)
                    return
                self._send(reply, url.path.endswith(":streamGenerateContent"))

            def _send(self, reply: Reply, stream: bool) -> None:
                data, content_type = json.dumps(reply.body).encode(), "application/json"
                if stream and reply.status == 200:
                    data, content_type = event_stream(reply.body), "text/event-stream"
                self.send_response(reply.status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def start(self) -> None:
        """Serve in a daemon thread."""
        self._thread.start()

    def stop(self) -> None:
        """Let stalled requests go, stop serving and free the port."""
        self.released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def _mode(seen: Seen) -> str | None:
    if seen.body.get("tools"):
        return "tool"
    if "responseJsonSchema" in seen.generation:
        return "native"
    if "responseMimeType" in seen.generation:
        return "json"
    return "prompt" if stated_schema(seen.system)[1] is not None else None


def responded(responder: Responder, seen: Seen) -> dict[str, Any]:
    """A response with ``responder``'s answer to ``seen``, in the mode it asks in."""
    system, stated = stated_schema(seen.system)
    turns = tuple(
        (
            "assistant" if content.get("role") == "model" else "user",
            "".join(part.get("text", "") for part in content.get("parts", [])),
        )
        for content in seen.body.get("contents", [])
    )
    tools = seen.body.get("tools")
    schema = seen.generation.get("responseJsonSchema") or stated
    if tools:
        schema = tools[0]["functionDeclarations"][0]["parametersJsonSchema"]
    value = responder.answer(Asked(system=system, turns=turns, schema=schema))
    if tools:
        return call(value.value)
    if stated is not None and "responseMimeType" not in seen.generation:
        return answer(fenced(value))
    return answer(value.text)


@contextmanager
def serving() -> Iterator[GeminiServer]:
    """A started server, stopped on exit."""
    server = GeminiServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
