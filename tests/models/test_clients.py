"""SDK clients made once per event loop, not per call, and one TLS context per process."""

from __future__ import annotations

import asyncio
import gc
import json
import ssl

from stub_servers import anthropic_server, openai_server

from taskdecomp.models import ModelRequest
from taskdecomp.models.anthropic import AnthropicModel
from taskdecomp.models.base import Model
from taskdecomp.models.clients import PerLoop, tls_context
from taskdecomp.models.openai import OpenAIModel

SCHEMA = {"type": "object", "properties": {"total": {"type": "integer"}}, "required": ["total"]}
PLAIN = ModelRequest(
    phase="plan", messages=({"role": "user", "content": "Sum it."},), json_schema=SCHEMA
)
STREAMED = ModelRequest(
    phase="plan",
    messages=({"role": "user", "content": "Sum it."},),
    json_schema=SCHEMA,
    on_text=lambda piece: None,
)


class Client:
    """A client that knows whether it was closed."""

    def __init__(self, made: list[Client]) -> None:
        self.closed = False
        made.append(self)


async def close(client: Client) -> None:
    await asyncio.sleep(0)  # closing may suspend, as an HTTP client's does
    client.closed = True


def test_one_client_per_loop_closed_when_the_loop_ends() -> None:
    made: list[Client] = []
    clients = PerLoop(lambda: Client(made), close)

    async def use() -> list[Client]:
        first = await clients.get()
        together = await asyncio.gather(*(clients.get() for _ in range(5)))
        assert not first.closed
        return [first, *together]

    seen = asyncio.run(use())
    assert len(made) == 1 and all(client is made[0] for client in seen)
    assert made[0].closed  # asyncio.run shut the loop's async generators down
    again = asyncio.run(use())
    assert len(made) == 2 and again[0] is made[1] and made[1].closed


def test_a_loop_that_ended_is_not_kept() -> None:
    clients = PerLoop(lambda: Client([]), close)

    async def use() -> None:
        await clients.get()

    for _ in range(5):
        asyncio.run(use())
    gc.collect()
    assert len(clients._kept) == 0  # neither the ended loops nor their closed clients


def test_the_tls_context_is_made_once_and_verifies_servers() -> None:
    context = tls_context()
    assert context is tls_context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def openai(server: openai_server.FakeOpenAI) -> Model:
    return OpenAIModel("gpt-4.1-mini", base_url=server.url, timeout=5.0)


def anthropic(server: anthropic_server.AnthropicServer) -> Model:
    return AnthropicModel("claude-x", api_key=server.key, base_url=server.url, timeout=5.0)


def twice_in_two_loops(target: Model) -> None:
    """Two calls (plain, then streamed) in one loop, then two more in another."""

    async def twice() -> None:
        for request in (PLAIN, STREAMED):
            response = await target.complete(request)
            assert json.loads(response.text) == {"total": 3}

    asyncio.run(twice())
    asyncio.run(twice())
    gc.collect()  # an unclosed client would warn now, and warnings are errors


def test_openai_calls_in_one_loop_share_a_connection() -> None:
    server = openai_server.FakeOpenAI(keep_alive=True)
    server.fallback = openai_server.Reply(body=openai_server.completion('{"total": 3}'))
    server.start()
    try:
        twice_in_two_loops(openai(server))
    finally:
        server.stop()
    ports = server.ports
    assert ports[0] == ports[1] and ports[2] == ports[3] and ports[1] != ports[2]


def test_anthropic_calls_in_one_loop_share_a_connection() -> None:
    server = anthropic_server.AnthropicServer(keep_alive=True)
    server.fallback = anthropic_server.ok(text='{"total": 3}')
    server.start()
    try:
        twice_in_two_loops(anthropic(server))
    finally:
        server.stop()
    ports = server.ports
    assert ports[0] == ports[1] and ports[2] == ports[3] and ports[1] != ports[2]
