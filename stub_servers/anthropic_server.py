"""A Messages API server of our own, written from Anthropic's public API reference.

``POST /v1/messages`` only. Every request must carry the server's
:attr:`AnthropicServer.key` (as ``x-api-key``, or ``Authorization: Bearer`` as SDK 2.x
sends it) and ``anthropic-version``, and a body with ``model``,
``max_tokens`` and ``messages``; a missing one is answered as Anthropic does, with
``{"type": "error", "error": {"type": ..., "message": ...}}``. Answers come from a queue of
canned :class:`Reply` objects, like ``fake_openai``'s: a message (text and ``tool_use``
blocks, usage), an error with its status and headers (``retry-after``), a stall, or raw
bytes. A request with ``"stream": true`` gets its message as the API's server-sent events:
``message_start``, ``ping``, per block ``content_block_start``, ``content_block_delta``
(``text_delta`` or ``input_json_delta``) and ``content_block_stop``, then
``message_delta`` (stop reason, output tokens) and ``message_stop``.

Given a :class:`~stub_servers.responder.Responder` (``responder``), a request no canned
reply is left for is answered by what it is, in the mode it asks in: a ``tool_use`` block
for a forced tool, the JSON as text for ``output_config.format``, prose with the JSON in a
code fence when the schema is only stated in the system prompt, else text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from stub_servers import base
from stub_servers.responder import Asked, Responder, fenced, stated_schema

KEY = "sk-ant-test-0123456789abcdef"
"""The key the server takes."""

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
"""The error type the API names for each status."""


def message(
    *,
    text: str | None = None,
    tool_input: Any = None,
    stop_reason: str | None = None,
    tokens: tuple[int, int] = (120, 40),
    model: str = "claude-x",
) -> dict[str, Any]:
    """A Messages API response body: a text block, a ``tool_use`` block, or both."""
    content: list[dict[str, Any]] = []
    if text is not None:
        content.append({"type": "text", "text": text})
    if tool_input is not None:
        content.append(
            {"type": "tool_use", "id": "toolu_01", "name": "answer", "input": tool_input}
        )
    if stop_reason is None:
        stop_reason = "tool_use" if tool_input is not None else "end_turn"
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]},
    }


def error_body(status: int, text: str) -> dict[str, Any]:
    """An error body as the API sends it."""
    kind = ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": text}}


def sse(body: dict[str, Any], *, usage: bool = True, piece: int = 8) -> bytes:
    """A message as the server-sent events of ``"stream": true``, its text in pieces."""
    start = {**body, "content": [], "stop_reason": None}
    start["usage"] = {"input_tokens": body["usage"]["input_tokens"], "output_tokens": 1}
    if not usage:
        del start["usage"]
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(body["content"]):
        events.extend(_block_events(index, block, piece))
    final: dict[str, Any] = {
        "type": "message_delta",
        "delta": {"stop_reason": body["stop_reason"], "stop_sequence": None},
    }
    if usage:
        final["usage"] = {"output_tokens": body["usage"]["output_tokens"]}
    events += [("message_delta", final), ("message_stop", {"type": "message_stop"})]
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


def _block_events(index: int, block: dict[str, Any], piece: int) -> Iterator[tuple[str, Any]]:
    if block["type"] == "text":
        empty: dict[str, Any] = {"type": "text", "text": ""}
        whole, delta_type, key = block["text"], "text_delta", "text"
    else:
        empty = {**block, "input": {}}
        whole, delta_type, key = json.dumps(block["input"]), "input_json_delta", "partial_json"
    yield (
        "content_block_start",
        {
            "type": "content_block_start",
            "index": index,
            "content_block": empty,
        },
    )
    for at in range(0, len(whole), piece):
        delta = {"type": delta_type, key: whole[at : at + piece]}
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    yield "content_block_stop", {"type": "content_block_stop", "index": index}


@dataclass
class Reply(base.Reply):
    """One canned reply: a status and JSON body (or raw bytes), or a stall."""

    stream_usage: bool = True
    """Whether a streamed reply says its usage."""
    stream_error: str | None = None
    """An error type sent as an ``error`` event after ``message_start`` (200 stream)."""


def ok(**kwargs: Any) -> Reply:
    """A 200 with :func:`message`'s body."""
    usage = kwargs.pop("stream_usage", True)
    return Reply(body=message(**kwargs), stream_usage=usage)


def fail(status: int, text: str, **headers: str) -> Reply:
    """An error reply, with headers such as ``retry_after="0"`` (underscores for dashes)."""
    named = {name.replace("_", "-"): value for name, value in headers.items()}
    return Reply(status=status, body=error_body(status, text), headers=named)


class AnthropicServer(base.StubServer[Reply, Any]):
    """Answers ``POST /v1/messages`` from a queue of :class:`Reply` objects.

    When the queue is empty it answers ``fallback``; every request body (``None`` when it is
    not JSON) and its headers are recorded in ``requests`` and ``headers``.
    """

    def __init__(self, *, keep_alive: bool = False) -> None:
        self.key = KEY
        super().__init__(keep_alive=keep_alive)

    def modes(self) -> list[str]:
        """The output mode of each request that asked for structured output, in order."""
        return [mode for mode in map(_mode, self.requests) if mode is not None]

    def _body(self, data: bytes) -> Any:
        try:
            return super()._body(data)
        except ValueError:
            return None

    def _seen(self, call: base.Call) -> Any:
        return call.body

    def _refusal(self, call: base.Call, seen: Any) -> Reply | None:
        """What the API answers a request that is not well formed, before any reply."""
        path, body, headers = call.path, call.body, call.headers
        if path != "/v1/messages":
            return fail(404, f"no route {path}")
        bearer = headers.get("authorization", "").removeprefix("Bearer ")
        if self.key not in (headers.get("x-api-key"), bearer):  # SDK 2.x sends the bearer form
            return fail(401, "invalid x-api-key")
        if not headers.get("anthropic-version"):
            return fail(400, "anthropic-version: header is required")
        if not isinstance(body, dict):
            return fail(400, "the body must be a JSON object")
        missing = [name for name in ("model", "max_tokens", "messages") if name not in body]
        if missing:
            return fail(400, f"{missing[0]}: Field required")
        choice = body.get("tool_choice")
        names = [tool.get("name") for tool in body.get("tools", [])]
        if choice and choice.get("type") == "tool" and choice.get("name") not in names:
            return fail(400, f"tool_choice: no tool named {choice.get('name')!r}")
        return None

    def _respond(self, responder: Responder, seen: Any) -> Reply:
        return Reply(body=responded(responder, seen))

    def _fail(self, status: int, text: str) -> Reply:
        return fail(status, text)

    def _events(self, call: base.Call, reply: Reply) -> list[bytes] | None:
        if not (isinstance(call.body, dict) and call.body.get("stream")):
            return None
        events = sse(reply.body, usage=reply.stream_usage)
        if reply.stream_error is not None:
            head, _, _ = events.partition(b"event: ping")
            error = {"type": "error", "error": {"type": reply.stream_error, "message": "x"}}
            events = head + f"event: error\ndata: {json.dumps(error)}\n\n".encode()
        return [events]


def _text(content: Any) -> str:
    """A system prompt or message content: a string, or a list of text blocks."""
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content)


def _mode(body: Any) -> str | None:
    if not isinstance(body, dict):
        return None
    if body.get("tools"):
        return "tool"
    if "output_config" in body:
        return "native"
    return "prompt" if stated_schema(_text(body.get("system", "")))[1] is not None else None


def responded(responder: Responder, body: dict[str, Any]) -> dict[str, Any]:
    """A message with ``responder``'s answer to ``body``, in the mode it asks in."""
    system, stated = stated_schema(_text(body.get("system", "")))
    turns = tuple((m["role"], _text(m["content"])) for m in body["messages"])
    tools = body.get("tools")
    schema: dict[str, Any] | None = tools[0]["input_schema"] if tools else None
    wrapped = schema is not None and _wrapped(schema)
    if schema is not None and wrapped:
        schema = schema["properties"]["answer"]
    native = body.get("output_config", {}).get("format", {}).get("schema")
    schema = schema or native or stated
    answer = responder.answer(Asked(system=system, turns=turns, schema=schema))
    if tools:
        return message(tool_input={"answer": answer.value} if wrapped else answer.value)
    return message(text=fenced(answer) if stated is not None else answer.text)


def _wrapped(schema: dict[str, Any]) -> bool:
    """Whether a tool's input schema is the provider's wrapper around a non-object answer."""
    properties = schema.get("properties", {})
    return list(properties) == ["answer"] and properties["answer"].get("type") != "object"


def serve() -> Iterator[AnthropicServer]:
    """A started server for one test, stopped after it (for ``yield from`` in a fixture)."""
    with AnthropicServer() as server:
        yield server
