"""An OpenAI-compatible server of our own: Chat Completions from a queue of canned replies.

:class:`FakeOpenAI` is a stdlib ``http.server`` in a thread that answers ``POST`` requests
from a queue of :class:`Reply` objects, so a caller can make it stall, rate-limit, fail or
truncate; a request with ``stream: true`` gets its completion as server-sent events (a tool
call's arguments as ``delta.tool_calls`` pieces, the usage in a last chunk). It can also
refuse, with 400 as servers without them do, any ``response_format``
(``refuse_response_format``) or any ``tools`` (``refuse_tools``). Given a
:class:`~stub_servers.responder.Responder` (``responder``), it answers any request no canned
reply is left for by what the request is, in the mode it was asked in (a tool call, JSON
content, or prose with the JSON in a code fence when the schema is only stated in the
prompt), so concurrent calls are answered right in any order. The tests (``fake_openai``)
and ``bench/providers.py`` use it.
"""

from __future__ import annotations

import json
from typing import Any

from stub_servers.base import Call, StubServer
from stub_servers.base import Reply as Reply
from stub_servers.responder import Answer, Asked, Responder, fenced, stated_schema
from taskdecomp.models import outputs


def completion(
    content: str | None,
    *,
    finish_reason: str = "stop",
    tokens: tuple[int, int] | None = (120, 40),
    tool_arguments: str | None = None,
) -> dict[str, Any]:
    """A Chat Completions response body; ``tokens=None`` leaves ``usage`` out.

    ``tool_arguments`` makes it a call of the answer tool with those arguments.
    """
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_arguments is not None:
        message["tool_calls"] = [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": outputs.ANSWER_TOOL, "arguments": tool_arguments},
            }
        ]
    body: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }
    if tokens is not None:
        body["usage"] = {
            "prompt_tokens": tokens[0],
            "completion_tokens": tokens[1],
            "total_tokens": sum(tokens),
        }
    return body


def event_stream(body: dict[str, Any], piece: int = 8) -> list[bytes]:
    """A Chat Completions body as the server-sent events of ``stream=True``, in pieces.

    A tool call comes as OpenAI sends one: its id and name first, then its arguments in
    pieces; the usage, when the body has one, in a last chunk with no choices.
    """
    choice = body["choices"][0]
    message = choice["message"]
    content = message["content"] or ""
    base = {"id": body["id"], "object": "chat.completion.chunk", "created": 0}
    base["model"] = body["model"]
    chunks = [
        {**base, "choices": [{"index": 0, "delta": {"content": content[i : i + piece]}}]}
        for i in range(0, len(content), piece)
    ]
    for call in message.get("tool_calls") or []:
        arguments = call["function"]["arguments"]
        head = {"index": 0, "id": call["id"], "type": "function"}
        head["function"] = {"name": call["function"]["name"], "arguments": ""}
        chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [head]}}]})
        chunks.extend(
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [
                                {"index": 0, "function": {"arguments": arguments[i : i + piece]}}
                            ]
                        },
                    }
                ],
            }
            for i in range(0, len(arguments), piece)
        )
    chunks.append(
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]}
    )
    if body.get("usage"):
        chunks.append({**base, "choices": [], "usage": body["usage"]})
    events = [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks] + ["data: [DONE]\n\n"]
    return [event.encode() for event in events]


def error_body(message: str, code: str | None = None) -> dict[str, Any]:
    """An error body as OpenAI sends it."""
    return {"error": {"message": message, "type": "test_error", "code": code}}


class FakeOpenAI(StubServer[Reply, dict[str, Any]]):
    """An OpenAI-compatible server that replays :class:`Reply` objects in order.

    When the queue is empty it keeps answering with ``fallback``; every request body and
    its headers are recorded in ``requests`` and ``headers``. Its :attr:`url` ends in ``/v1``.
    """

    prefix = "/v1"

    def __init__(self, *, keep_alive: bool = False) -> None:
        self.refuse_response_format = False
        """Answer any request with a ``response_format`` 400, as a server without one."""
        self.refuse_tools = False
        """Answer any request with ``tools`` 400, as a server without tool calling."""
        super().__init__(keep_alive=keep_alive)

    def plan_requests(self) -> list[dict[str, Any]]:
        """The requests that asked for an answer matching a schema, in whatever mode."""
        return [r for r in self.requests if _asks_schema(r)]

    def modes(self) -> list[str]:
        """The output mode each schema request was asked in, in order."""
        return [_mode(request) for request in self.plan_requests()]

    def _seen(self, call: Call) -> dict[str, Any]:
        body: dict[str, Any] = call.body
        return body

    def _refusal(self, call: Call, seen: dict[str, Any]) -> Reply | None:
        if self.refuse_response_format and "response_format" in seen:
            return self._fail(400, "'response_format' is not supported")
        if self.refuse_tools and "tools" in seen:
            return self._fail(400, "this model does not support tools")
        return None

    def _respond(self, responder: Responder, seen: dict[str, Any]) -> Reply:
        return Reply(body=responded(responder, seen))

    def _fail(self, status: int, text: str) -> Reply:
        return Reply(status=status, body=error_body(text))

    def _events(self, call: Call, reply: Reply) -> list[bytes] | None:
        return event_stream(reply.body) if call.body.get("stream") else None


def _asks_schema(request: dict[str, Any]) -> bool:
    stated = outputs.schema_instructions({}).partition(":")[0]
    system = [m["content"] for m in request.get("messages", []) if m["role"] == "system"]
    in_prompt = any(stated in content for content in system)
    return in_prompt or "response_format" in request or "tools" in request


def _mode(request: dict[str, Any]) -> str:
    if "tools" in request:
        return "tool"
    response_format = request.get("response_format")
    if response_format is None:
        return "prompt"
    return "native" if response_format["type"] == "json_schema" else "json"


def responded(responder: Responder, request: dict[str, Any]) -> dict[str, Any]:
    """A completion with ``responder``'s answer to ``request``, in the mode it asks in."""
    messages = request.get("messages", [])
    system, stated = stated_schema(
        "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    )
    turns = tuple((m["role"], m["content"]) for m in messages if m["role"] != "system")
    tools = request.get("tools")
    response_format = request.get("response_format") or {}
    if tools:
        schema = tools[0]["function"]["parameters"]
    elif response_format.get("type") == "json_schema":
        schema = response_format["json_schema"]["schema"]
    else:
        schema = response_format.get("schema", stated)
    answer: Answer = responder.answer(Asked(system=system, turns=turns, schema=schema))
    if tools:
        return completion(None, tool_arguments=answer.text, finish_reason="tool_calls")
    if schema is not None and not response_format:
        return completion(fenced(answer))
    return completion(answer.text)
