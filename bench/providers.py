"""Provider benchmark: what our providers add to a call, next to the official SDK's own call.

    python bench/providers.py [--calls 200] [--warmup 20] [--small]

Each provider answers from its stub server on 127.0.0.1 (``stub_servers``: the same servers
the provider tests use, keeping connections open as the real APIs do): ``openai`` (Chat
Completions), ``groq`` (a named host, on the same Chat Completions server), ``anthropic``
(Messages) and ``google`` (the Gemini API). For each, one structured request (a JSON schema,
in ``native`` mode) is sent ``--calls`` times, plain and streamed, three ways, one of each per
round so a busy moment of a shared machine falls on all alike:

- ``ours``: the provider's ``complete()``, the model built from its ``provider:MODEL``
  string as the command line builds it;
- ``raw SDK``: the official SDK sending the same request body with one client made before
  the first call and shared by all, and parsing the answer's JSON: the least a call can cost;
- ``new client``: the same raw call with a new SDK client for each call, which is what a
  provider that makes a client per call pays (loading the CA bundle, a new connection).

The first ``--warmup`` calls of each are left out; the table gives the median and 90th
percentile of the rest, in milliseconds, and ``ratio``: ours over raw SDK, medians. Then the
import time of each provider module and of its SDK, each in a fresh process. ``--small``
runs a few calls for the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: find ``bench``

from bench._serving import percentile
from stub_servers import anthropic_server, gemini_server, openai_server

from taskdecomp.models import Connection, ModelRequest, resolve_model
from taskdecomp.models.base import Model

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"steps": {"type": "array", "items": {"type": "string"}}},
    "required": ["steps"],
    "additionalProperties": False,
}
"""The answer's schema: a small plan."""
ANSWER = json.dumps({"steps": ["fetch the sales", "sum them", "write the report"]})
"""What every server answers, as JSON text."""
SYSTEM = "You are a task decomposition planner. Answer with the plan only."
GOAL = "Report April's net sales."
KEY = "bench-key-0123456789abcdef"
"""The key the OpenAI-compatible server is sent (it takes any)."""

Call = Callable[[Any, bool], Awaitable[Any]]
"""A raw SDK call: given a client and whether to stream, the parsed answer."""


@dataclass(frozen=True, kw_only=True)
class Case:
    """One provider: its model string, and the same call made with its SDK directly."""

    provider: str
    model: str
    """``provider:MODEL``, resolved as the command line does."""
    url: str
    key_env: str
    client: Callable[[], Any]
    """Makes a raw SDK client."""
    call: Call
    module: str
    """The provider's module, for the import times."""
    sdk: str
    """The SDK's module."""


def request(*, streamed: bool) -> ModelRequest:
    """The structured request every provider is sent; a streamed one listens to its text."""
    return ModelRequest(
        phase="plan",
        messages=({"role": "system", "content": SYSTEM}, {"role": "user", "content": GOAL}),
        json_schema=SCHEMA,
        schema_name="plan",
        on_text=(lambda piece: None) if streamed else None,
    )


async def openai_call(client: Any, streamed: bool) -> Any:
    params: dict[str, Any] = {
        "model": "gpt-4.1-mini",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": GOAL}],
        "temperature": 0.0,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "plan", "schema": SCHEMA, "strict": True},
        },
    }
    if not streamed:
        completion = await client.chat.completions.create(**params)
        return json.loads(completion.choices[0].message.content)
    stream = await client.chat.completions.create(
        **params, stream=True, stream_options={"include_usage": True}
    )
    pieces = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    return json.loads("".join(pieces))


async def anthropic_call(client: Any, streamed: bool) -> Any:
    params: dict[str, Any] = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 4096,
        "system": SYSTEM,
        "messages": [{"role": "user", "content": GOAL}],
        "extra_body": {"output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}},
    }
    if not streamed:
        message = await client.messages.create(**params)
        return json.loads(message.content[0].text)
    stream = await client.messages.create(**params, stream=True)
    pieces = [
        event.delta.text
        async for event in stream
        if event.type == "content_block_delta" and event.delta.type == "text_delta"
    ]
    return json.loads("".join(pieces))


async def google_call(client: Any, streamed: bool) -> Any:
    from google.genai import types

    config = types.GenerateContentConfig(
        temperature=0.0,
        system_instruction=SYSTEM,
        response_mime_type="application/json",
        response_json_schema=SCHEMA,
    )
    contents = [types.Content(role="user", parts=[types.Part(text=GOAL)])]
    if not streamed:
        response = await client.models.generate_content(
            model="gemini-2.5-flash", contents=contents, config=config
        )
        return json.loads(response.text)
    stream = await client.models.generate_content_stream(
        model="gemini-2.5-flash", contents=contents, config=config
    )
    return json.loads("".join([chunk.text or "" async for chunk in stream]))


def openai_client(url: str) -> Callable[[], Any]:
    def make() -> Any:
        import openai

        return openai.AsyncOpenAI(api_key=KEY, base_url=url, max_retries=0)

    return make


def anthropic_client(url: str) -> Callable[[], Any]:
    def make() -> Any:
        import anthropic

        return anthropic.AsyncAnthropic(api_key=anthropic_server.KEY, base_url=url, max_retries=0)

    return make


def google_client(url: str) -> Callable[[], Any]:
    def make() -> Any:
        from google import genai
        from google.genai import types

        options = types.HttpOptions(
            base_url=url,
            api_version="v1beta",
            retry_options=types.HttpRetryOptions(attempts=1),
        )
        return genai.Client(api_key=gemini_server.KEY, http_options=options).aio

    return make


@contextmanager
def servers() -> Iterator[list[Case]]:
    """The stub servers, started, answering :data:`ANSWER`; the cases they serve."""
    with ExitStack() as stack:
        chat = openai_server.FakeOpenAI(keep_alive=True)
        chat.fallback = openai_server.Reply(body=openai_server.completion(ANSWER))
        chat.start()
        stack.callback(chat.stop)
        messages = anthropic_server.AnthropicServer(keep_alive=True)
        messages.fallback = anthropic_server.ok(text=ANSWER)
        messages.start()
        stack.callback(messages.stop)
        gemini = gemini_server.GeminiServer()
        gemini.fallback = gemini_server.Reply(body=gemini_server.answer(ANSWER))
        gemini.start()
        stack.callback(gemini.stop)
        yield [
            Case(
                provider="openai", model="openai:gpt-4.1-mini", url=chat.url,
                key_env="BENCH_OPENAI_KEY", client=openai_client(chat.url), call=openai_call,
                module="taskdecomp.models.openai", sdk="openai",
            ),
            Case(
                provider="groq", model="groq:gpt-4.1-mini", url=chat.url,
                key_env="BENCH_OPENAI_KEY", client=openai_client(chat.url), call=openai_call,
                module="taskdecomp.models.hosts", sdk="openai",
            ),
            Case(
                provider="anthropic", model="anthropic:claude-sonnet-4-6", url=messages.url,
                key_env="BENCH_ANTHROPIC_KEY", client=anthropic_client(messages.url),
                call=anthropic_call, module="taskdecomp.models.anthropic", sdk="anthropic",
            ),
            Case(
                provider="google", model="google:gemini-2.5-flash", url=gemini.url,
                key_env="BENCH_GEMINI_KEY", client=google_client(gemini.url), call=google_call,
                module="taskdecomp.models.google", sdk="google.genai",
            ),
        ]  # fmt: skip


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    """Milliseconds ``call`` took; it must answer the plan."""
    start = time.perf_counter()
    answer = await call()
    elapsed = (time.perf_counter() - start) * 1000
    text = answer.text if hasattr(answer, "text") else json.dumps(answer)
    if json.loads(text) != json.loads(ANSWER):
        raise SystemExit(f"a call answered {text!r}, not the plan")
    return elapsed


async def close(client: Any) -> None:
    closing = getattr(client, "aclose", None) or client.close
    await closing()


async def measure(case: Case, *, streamed: bool, calls: int, warmup: int) -> dict[str, list[float]]:
    """Per-call milliseconds of ours, the raw SDK and a new client per call, warm-up left out."""
    connection = Connection(base_url=case.url, api_key_env=case.key_env)
    model: Model = resolve_model(case.model, connection=connection)
    shared = case.client()
    times: dict[str, list[float]] = {"ours": [], "raw": [], "new": []}

    async def fresh() -> Any:
        client = case.client()
        try:
            return await case.call(client, streamed)
        finally:
            await close(client)

    try:
        for round_ in range(warmup + calls):
            ours = await timed(lambda: model.complete(request(streamed=streamed)))
            raw = await timed(lambda: case.call(shared, streamed))
            new = await timed(fresh)
            if round_ >= warmup:
                times["ours"].append(ours)
                times["raw"].append(raw)
                times["new"].append(new)
    finally:
        await close(shared)
    return times


def import_ms(module: str, *, runs: int) -> float:
    """Median milliseconds of importing ``module`` in a fresh process, ``taskdecomp`` already in."""
    code = (
        "import time, importlib, taskdecomp.models.base; start = time.perf_counter(); "
        f"importlib.import_module({module!r}); print((time.perf_counter() - start) * 1000)"
    )
    found = []
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        found.append(float(done.stdout))
    return statistics.median(found)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="Calls of each kind measured.")
    parser.add_argument("--warmup", type=int, default=20, help="Calls left out first.")
    parser.add_argument("--imports", type=int, default=5, help="Fresh processes per import.")
    parser.add_argument("--small", action="store_true", help="A few calls, for the tests.")
    args = parser.parse_args(argv)
    if args.small:
        args.calls, args.warmup, args.imports = 5, 1, 1
    os.environ.update(
        BENCH_OPENAI_KEY=KEY,
        BENCH_ANTHROPIC_KEY=anthropic_server.KEY,
        BENCH_GEMINI_KEY=gemini_server.KEY,
    )
    print(f"providers, native mode, {args.calls} calls each after {args.warmup} left out\n")
    print("| provider | mode | ours ms | ours p90 | raw SDK ms | raw p90 | ratio | new client ms |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    with servers() as cases:
        for case in cases:
            for streamed in (False, True):
                times = asyncio.run(
                    measure(case, streamed=streamed, calls=args.calls, warmup=args.warmup)
                )
                print_row(case.provider, "streamed" if streamed else "plain", times)
    print("\n| module | import ms | SDK | SDK import ms |")
    print("|---|---:|---|---:|")
    for case in cases:
        module = import_ms(case.module, runs=args.imports)
        sdk = import_ms(case.sdk, runs=args.imports)
        print(f"| {case.module} | {module:.1f} | {case.sdk} | {sdk:.1f} |")


def print_row(provider: str, mode: str, times: dict[str, list[float]]) -> None:
    ours, raw, new = (statistics.median(times[k]) for k in ("ours", "raw", "new"))
    print(
        f"| {provider} | {mode} | {ours:.2f} | {percentile(times['ours'], 0.9):.2f} "
        f"| {raw:.2f} | {percentile(times['raw'], 0.9):.2f} | {ours / raw:.2f} | {new:.2f} |"
    )


if __name__ == "__main__":
    main()
