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
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from stub_servers.base import Call, StubServer
from stub_servers.base import Reply as Reply
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


class GeminiServer(StubServer[Reply, Seen]):
    """A Gemini API server that replays :class:`Reply` objects in order."""

    poll = 0.05

    def __init__(self) -> None:
        self.json_mode = True
        """Whether ``responseMimeType: application/json`` is taken."""
        self.function_calling = True
        """Whether ``tools`` are taken."""
        super().__init__(keep_alive=True)  # as the API does

    def modes(self) -> list[str]:
        """The output mode of each request that asked for structured output, in order."""
        return [mode for mode in map(_mode, self.requests) if mode is not None]

    def _next(self, call: Call) -> Reply:
        path = urlsplit(call.path).path
        if not path.startswith("/v1beta/models/"):  # answered, not recorded
            return failure(404, f"no such method: {path}")
        return super()._next(call)

    def _seen(self, call: Call) -> Seen:
        url = urlsplit(call.path)
        return Seen(url.path, parse_qs(url.query), call.body, call.headers, call.port)

    def _refusal(self, call: Call, seen: Seen) -> Reply | None:
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

    def _respond(self, responder: Responder, seen: Seen) -> Reply:
        return Reply(body=responded(responder, seen))

    def _fail(self, status: int, text: str) -> Reply:
        return failure(status, text)

    def _events(self, call: Call, reply: Reply) -> list[bytes] | None:
        streamed = urlsplit(call.path).path.endswith(":streamGenerateContent")
        return [event_stream(reply.body)] if streamed else None


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


def serving() -> GeminiServer:
    """A started server, stopped on exit (a context manager)."""
    return GeminiServer()
