"""The ``openai`` provider: OpenAI and every OpenAI-compatible server.

``openai:MODEL`` (or a bare ``openai``, meaning ``$OPENAI_MODEL``) talks to the Chat
Completions API through the official SDK. The same client serves vLLM, Ollama, the llama.cpp
server and LM Studio when ``OPENAI_BASE_URL`` (or ``--base-url``) points at them.

What a call does:

- **Structured output.** A request with a JSON schema is asked for in an output mode
  (:mod:`taskdecomp.models.outputs`): ``native`` sends ``response_format`` ``json_schema``
  (``strict`` when the schema meets strict mode's rules, see
  :func:`~taskdecomp.models.schemas.is_strict_compatible`); ``tool`` forces one function
  tool, :data:`~taskdecomp.models.outputs.ANSWER_TOOL`, whose arguments are the answer;
  ``json`` sends ``{"type": "json_object", "schema": ...}`` (the form the llama-cpp-python
  server applies as a grammar; others ignore the schema key) with the schema in the system
  message; ``prompt`` sends no ``response_format`` at all, states the schema in the system
  message and takes the first complete JSON value of the answer
  (:func:`~taskdecomp.models.outputs.extract_json`). It starts at the mode the connection
  names (``--output-mode``), else ``native``. A server that refuses a mode (a 400, 422 or
  5xx whose message names what the mode uses: ``response_format``, ``json_schema``, tools;
  :func:`~taskdecomp.models.outputs.refuses`) is asked again at once in the next mode, not
  retried; each mode is tried at most once, down to ``prompt``. The mode that worked after
  such a refusal is remembered per server (provider, base URL and model) for the rest of
  the process (:data:`~taskdecomp.models.outputs.MEMORY`), so no later call or model object
  probes again.
- **Streaming.** When the caller listens (``ModelRequest.on_text``), the answer is streamed:
  each piece goes to ``on_text`` (a tool call's arguments in ``tool`` mode; from the JSON
  value's first bracket on in ``prompt`` mode) and the tokens so far to
  ``ModelRequest.progress``. The server's usage is asked for
  (``stream_options.include_usage``).
- **Connections.** One SDK client per event loop, shared by the calls a run makes and closed
  when the loop ends (:class:`~taskdecomp.models.clients.PerLoop`), so a call pays neither
  for loading the CA bundle nor for a new connection.
- **Timeouts.** One attempt may take ``OPENAI_TIMEOUT_SECONDS``; past that the call fails
  with :class:`~taskdecomp.errors.ModelTimeoutError` (``llm_timeout``), not retried.
- **Retries.** 408, 409, 429, 5xx and connection failures are retried with exponential
  backoff and jitter (honouring ``Retry-After``), up to :attr:`RetryPolicy.attempts`
  attempts. The SDK's own retries are off so there is one policy. Every call runs inside
  the run's ``max_seconds`` deadline, so retries never outlive the run.
- **Errors.** What is left becomes :class:`~taskdecomp.errors.ModelError` with a kind for
  ``llm_error:<kind>``: ``auth``, ``permission``, ``not_found``, ``bad_request``,
  ``quota``, ``rate_limit``, ``server``, ``connection``, ``bad_response`` (a 200 whose
  body is not a chat completion: HTML, cut-off JSON) or ``http_<status>``, and a message
  that says how to fix it. The API key never appears in a message.
- **Usage.** Tokens come from the response's ``usage``; a server that sends none gets them
  estimated, and the response says so (``ModelResponse.estimated``). The cost comes from
  :func:`taskdecomp.models.prices.cost_usd` under ``openai`` whatever the base URL (the
  model the server names, else the one asked for); ``None`` when the price is unknown.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ValidationError

from taskdecomp.errors import ConfigError, ModelError, ModelTimeoutError
from taskdecomp.models import outputs, prices
from taskdecomp.models.base import Message, ModelRequest, ModelResponse, estimate_tokens
from taskdecomp.models.clients import PerLoop, tls_context
from taskdecomp.models.connection import Connection
from taskdecomp.models.http_errors import (
    Endpoint,
    Failure,
    connection_error,
    retryable,
    status_error,
)
from taskdecomp.models.outputs import OutputMode
from taskdecomp.models.retry import Retry, listened, retry_after, with_retries
from taskdecomp.models.retry import RetryPolicy as RetryPolicy
from taskdecomp.models.schemas import is_strict_compatible
from taskdecomp.settings import OpenAISettings, load_openai_settings, reveal

if TYPE_CHECKING:
    import openai


class _Function(BaseModel):
    name: str | None = None
    arguments: str | dict[str, Any] | None = None
    """A JSON text, as OpenAI sends it; an object from a server that decodes it first."""

    def text(self) -> str:
        if isinstance(self.arguments, dict):
            return json.dumps(self.arguments, ensure_ascii=False)
        return self.arguments or ""


class _ToolCall(BaseModel):
    function: _Function


class _Message(BaseModel):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(BaseModel):
    message: _Message
    finish_reason: str | None = None


class _Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int


class _Completion(BaseModel):
    """What is read from a Chat Completions body; the rest is ignored."""

    model: str | None = None
    choices: list[_Choice]
    usage: _Usage | None = None


def openai_model(
    name: str = "",
    *,
    base_url: str | None = None,
    settings: OpenAISettings | None = None,
    connection: Connection | None = None,
) -> OpenAIModel:
    """The model an ``openai:NAME`` string means, configured from the ``OPENAI_*`` settings.

    Args:
        name: the model; empty means ``$OPENAI_MODEL`` (default ``gpt-4.1-mini``).
        base_url: overrides ``OPENAI_BASE_URL`` (the CLI's ``--base-url``).
        settings: the settings to use; default: read the environment and ``.env``.
        connection: overrides the settings it sets (base URL, the variable holding the
            key, timeout, headers) and names the first output mode; ``base_url`` wins over
            its base URL.

    Raises:
        ConfigError: a setting does not parse, the key's variable is not set, or OpenAI
            itself is used without a key.
    """
    settings = settings or load_openai_settings()
    connection = connection or Connection()
    key = reveal(settings.api_key)
    if connection.api_key_env is not None:
        key = connection.api_key()
    return OpenAIModel(
        name or settings.model,
        api_key=key,
        base_url=base_url or connection.base_url or settings.base_url,
        timeout=connection.timeout or settings.timeout_seconds,
        headers=connection.headers,
        output_mode=connection.output_mode or "native",
    )


class OpenAIModel:
    """A model behind the OpenAI Chat Completions API.

    Args:
        model: the model name the server knows, e.g. ``gpt-4.1-mini``.
        api_key: the key; required for OpenAI itself, optional for a server at ``base_url``.
        base_url: an OpenAI-compatible server, e.g. ``http://127.0.0.1:8000/v1``.
        timeout: seconds one attempt may take.
        headers: extra HTTP headers sent with every request (a proxy's routing header).
        retry: how failed attempts are repeated.
        max_output_tokens: cap on the answer's length (``max_tokens``); default: the server's.
        temperature: sampling temperature; 0 (the seed's) keeps plans repeatable.
        output_mode: the first output mode a request with a JSON schema is asked in; a mode
            this server is known (in this process) to refuse is skipped.

    Raises:
        ConfigError: no API key for OpenAI's own endpoint, or a bad argument.
    """

    provider: ClassVar[str] = "openai"
    """The name prices and the mode memory know this dialect's servers by."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        headers: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
        max_output_tokens: int | None = None,
        temperature: float = 0.0,
        output_mode: OutputMode = "native",
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not model:
            raise ConfigError("the openai model needs a name: 'openai:gpt-4.1-mini'")
        if timeout <= 0:
            raise ConfigError(f"the openai timeout must be positive seconds, got {timeout!r}")
        if not api_key and base_url is None:
            raise ConfigError(
                "OPENAI_API_KEY is not set: export OPENAI_API_KEY='sk-...' for OpenAI, or "
                "point --base-url / OPENAI_BASE_URL at an OpenAI-compatible server"
            )
        self._model = model
        self._api_key = api_key or "unused"  # compatible servers often want no key
        self._base_url = base_url
        self._timeout = timeout
        self._headers = dict(headers or {})
        self._retry = retry or RetryPolicy()
        self._max_output_tokens = max_output_tokens
        self._temperature = temperature
        self._sleep = sleep
        self._first_mode = outputs.output_mode(output_mode)
        self._server = (self.provider, (base_url or "").rstrip("/"), model)
        self._clients: PerLoop[openai.AsyncOpenAI] = PerLoop(self._client, _close)

    streams = True
    """Answers can arrive piece by piece (``ModelRequest.on_text`` asks for it)."""

    @property
    def name(self) -> str:
        """The model string, ``openai:MODEL``."""
        return f"openai:{self._model}"

    def estimate_cost(self, tokens_in: int) -> float | None:
        """What sending ``tokens_in`` prompt tokens costs; ``None`` when the price is unknown."""
        return prices.cost_usd(self.provider, self._model, tokens_in, 0)

    @property
    def output_mode(self) -> OutputMode:
        """The output mode the next call with a JSON schema starts in.

        The mode given to the constructor, or the one this server (base URL and model) last
        answered in during this process, whichever comes later in the fallback order.
        """
        return outputs.MEMORY.first(self._server, self._first_mode)

    @property
    def base_url(self) -> str | None:
        """The server, or ``None`` for OpenAI's own."""
        return self._base_url

    def __repr__(self) -> str:
        return f"OpenAIModel({self._model!r}, base_url={self._base_url!r})"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send one chat completion, retrying what is worth retrying.

        Raises:
            ModelTimeoutError: an attempt took longer than the timeout.
            ModelError: the server refused the call, kept failing after the retries, or
                answered with something that is not a chat completion (``bad_response``).
        """
        request, heard = listened(request)
        return await with_retries(
            functools.partial(self._attempt, await self._clients.get(), request),
            self.output_mode,
            self._retry,
            self._sleep,
            heard=heard,
        )

    def _client(self) -> openai.AsyncOpenAI:
        """A new SDK client: the process's TLS context, no retries of its own."""
        import openai

        return openai.AsyncOpenAI(
            api_key=self._api_key,
            base_url=self._base_url,
            timeout=self._timeout,
            default_headers=self._headers or None,
            max_retries=0,
            http_client=openai.DefaultAsyncHttpxClient(verify=tls_context(), timeout=self._timeout),
        )

    async def _attempt(
        self, client: openai.AsyncOpenAI, request: ModelRequest, mode: OutputMode
    ) -> ModelResponse:
        send = functools.partial(self._send, client, request)
        return await outputs.in_modes(send, mode, outputs.fallbacks(mode), self._server)

    async def _send(
        self, client: openai.AsyncOpenAI, request: ModelRequest, mode: OutputMode
    ) -> ModelResponse:
        import openai

        try:
            if request.on_text is not None:
                response = await self._streamed(client, request, mode)
            else:
                raw = await client.chat.completions.with_raw_response.create(
                    **self._params(request, mode)
                )
                content_type = raw.headers.get("content-type", "")
                response = self._response(raw.content, content_type, request, mode)
        except openai.APITimeoutError:
            raise ModelTimeoutError(
                f"{self.name} did not answer within {self._timeout:g}s; raise "
                "OPENAI_TIMEOUT_SECONDS or pick a faster model"
            ) from None
        except openai.APIConnectionError as exc:
            raise Retry(self._connection_error(exc), None, mode) from None
        except openai.APIStatusError as exc:
            error = self._status_error(exc)
            failed: Exception = error
            if retryable(_failure(exc, self._scrub)):
                failed = Retry(error, retry_after(exc.response.headers), mode)
            if request.json_schema is not None and outputs.refuses(
                mode, exc.status_code, exc.response.text
            ):  # this server does not take the mode: the next one, at once
                raise outputs.Refused(failed) from None
            raise failed from None
        return response

    async def _streamed(
        self, client: openai.AsyncOpenAI, request: ModelRequest, mode: OutputMode
    ) -> ModelResponse:
        """Send the call with ``stream=True``, handing each piece to ``request.on_text``."""
        import openai

        stream = await client.chat.completions.create(
            **self._params(request, mode), stream=True, stream_options={"include_usage": True}
        )
        reader = _StreamReader(request, mode)
        content_type = stream.response.headers.get("content-type", "")
        try:
            if "text/event-stream" not in content_type:
                body = await stream.response.aread()
                raise self._bad_response(body, content_type)
            async for chunk in stream:
                reader.read(chunk)
        except (openai.APIError, ValueError) as exc:  # a body that is not an event stream
            if isinstance(exc, openai.APIStatusError | openai.APIConnectionError):
                raise
            raise ModelError(
                "bad_response", f"{self.name} sent a stream that is not chat completion chunks"
            ) from None
        finally:
            await stream.close()
        return self._answer(reader.answer(), reader.finish, reader.usage, reader.model, request)

    def _params(self, request: ModelRequest, mode: OutputMode) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self._model,
            "messages": [dict(message) for message in request.messages],
            "temperature": self._temperature,
        }
        if self._max_output_tokens is not None:
            params["max_tokens"] = self._max_output_tokens
        schema = request.json_schema
        if schema is None:
            return params
        strict = is_strict_compatible(schema)
        if mode == "native":
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": request.schema_name, "schema": schema, "strict": strict},
            }
        elif mode == "tool":
            function: dict[str, Any] = {
                "name": outputs.ANSWER_TOOL,
                "description": f"Give the {request.schema_name} as this function's arguments.",
                "parameters": schema,
            }
            if strict:
                function["strict"] = True
            params["tools"] = [{"type": "function", "function": function}]
            params["tool_choice"] = {"type": "function", "function": {"name": outputs.ANSWER_TOOL}}
        else:
            params["messages"] = _with_schema(request.messages, schema)
            if mode == "json":
                params["response_format"] = {"type": "json_object", "schema": schema}
        return params

    def _response(
        self, body: bytes, content_type: str, request: ModelRequest, mode: OutputMode
    ) -> ModelResponse:
        try:
            completion = _Completion.model_validate_json(body)
        except ValidationError:
            raise self._bad_response(body, content_type) from None
        if not completion.choices:
            return self._answer("", "stop", completion.usage, completion.model, request)
        choice = completion.choices[0]
        calls = choice.message.tool_calls or []
        arguments = calls[0].function.text() if calls else None
        text = _answer_text(choice.message.content or "", arguments, request, mode)
        return self._answer(text, choice.finish_reason, completion.usage, completion.model, request)

    def _answer(
        self,
        text: str,
        finish: str | None,
        usage: _Usage | Any,
        served: str | None,
        request: ModelRequest,
    ) -> ModelResponse:
        """The response: the server's token counts, or estimates marked as such."""
        if usage is not None:
            tokens_in, tokens_out = usage.prompt_tokens, usage.completion_tokens
        else:
            tokens_in = estimate_tokens(request.text())
            tokens_out = estimate_tokens(text) if text else 0
        return ModelResponse(
            text=text,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            cost_usd=self._cost(served, tokens_in, tokens_out),
            finish_reason=finish,
            estimated=usage is None,
        )

    def _cost(self, served: str | None, tokens_in: int, tokens_out: int) -> float | None:
        """What the call cost; ``None`` when neither model's price is known.

        The model the server names (a dated snapshot, an Azure deployment's model) is
        priced first, then the one asked for.
        """
        for name in (served, self._model):
            cost = prices.cost_usd(self.provider, name, tokens_in, tokens_out) if name else None
            if cost is not None:
                return cost
        return None

    def _bad_response(self, body: bytes, content_type: str) -> ModelError:
        where = self._base_url or "OpenAI"
        kind = content_type.split(";")[0].strip() or "no content type"
        start = " ".join(body[:120].decode("utf-8", "replace").split())
        return ModelError(
            "bad_response",
            f"{self.name}: {where!r} answered 200 but not with a chat completion "
            f"({kind}, {len(body)} bytes, starting {self._scrub(start)!r}); check that "
            "--base-url / OPENAI_BASE_URL is the server's OpenAI API (it usually ends in /v1)",
        )

    def _endpoint(self) -> Endpoint:
        return Endpoint(
            model=self.name,
            name=self._model,
            where=self._base_url or "OpenAI",
            key_hint="set a valid OPENAI_API_KEY",
            model_hint="pick another with --model or OPENAI_MODEL",
        )

    def _connection_error(self, exc: openai.APIConnectionError) -> ModelError:
        return connection_error(
            self._endpoint(), _cause(exc), url_hint="--base-url / OPENAI_BASE_URL"
        )

    def _status_error(self, exc: openai.APIStatusError) -> ModelError:
        failure = _failure(exc, self._scrub)
        return status_error(self._endpoint(), failure, attempts=self._retry.attempts)

    def _scrub(self, text: str) -> str:
        if self._api_key and self._api_key != "unused":
            text = text.replace(self._api_key, "***")
        return text[:500]


class _StreamReader:
    """Collects a streamed answer from its chunks, telling the caller as pieces come.

    Text goes to ``request.on_text`` (a tool call's arguments in ``tool`` mode; in
    ``prompt`` mode, from the first bracket on, so a stream reader sees JSON, not prose),
    and the chunks so far, one token each as servers send them, to ``request.progress``.
    """

    def __init__(self, request: ModelRequest, mode: OutputMode) -> None:
        self._request = request
        self._mode: OutputMode | None = mode if request.json_schema is not None else None
        self._content: list[str] = []
        self._arguments: list[str] | None = None
        self._chunks = 0
        self._held = ""
        self._started = self._mode != "prompt"
        self.finish: str | None = None
        self.usage: Any = None
        self.model: str | None = None

    def read(self, chunk: Any) -> None:
        """Take one ``ChatCompletionChunk``."""
        self.usage = chunk.usage or self.usage
        self.model = chunk.model or self.model
        for choice in chunk.choices[:1]:
            self.finish = choice.finish_reason or self.finish
            delta = choice.delta
            if delta is None:
                continue
            for call in (delta.tool_calls or [])[:1]:
                if call.index == 0 and call.function is not None:
                    if self._arguments is None:
                        self._arguments = []
                    self._piece(call.function.arguments or "", self._arguments)
            if delta.content:
                self._piece(delta.content, self._content)

    def answer(self) -> str:
        """The whole answer, as :func:`_answer_text` reads it."""
        arguments = "".join(self._arguments) if self._arguments is not None else None
        return _answer_text("".join(self._content), arguments, self._request, self._mode)

    def _piece(self, piece: str, into: list[str]) -> None:
        if not piece:
            return
        into.append(piece)
        self._chunks += 1
        if self._request.progress is not None:
            self._request.progress("generating", self._chunks)
        if self._request.on_text is None:
            return
        if (self._mode == "tool") == (into is self._arguments):
            self._tell(piece)  # in tool mode the answer is the call's arguments, not prose

    def _tell(self, piece: str) -> None:
        assert self._request.on_text is not None
        if not self._started:
            self._held += piece
            starts = [at for at in (self._held.find("{"), self._held.find("[")) if at >= 0]
            if not starts:
                return
            piece, self._held, self._started = self._held[min(starts) :], "", True
        self._request.on_text(piece)


def _answer_text(
    content: str, arguments: str | None, request: ModelRequest, mode: OutputMode | None
) -> str:
    """The answer a call gave in ``mode``: a tool call's arguments, or its text.

    In ``prompt`` mode, and in ``tool`` mode when the server answered in text instead of
    calling the tool, the first complete JSON value of the text is taken.
    """
    if request.json_schema is None or mode is None:
        return content
    if mode == "tool" and arguments is not None:
        return arguments
    if mode in ("tool", "prompt"):
        return outputs.extract_json(content, request.json_schema)
    return content


def _with_schema(messages: tuple[Message, ...], schema: dict[str, Any]) -> list[dict[str, Any]]:
    """``messages`` with the schema stated at the end of the system message.

    A system message is added first when there is none.
    """
    stated = outputs.schema_instructions(schema)
    sent: list[dict[str, Any]] = [dict(message) for message in messages]
    if sent and sent[0]["role"] == "system":
        sent[0]["content"] = f"{sent[0]['content']}\n\n{stated}"
    else:
        sent.insert(0, {"role": "system", "content": stated})
    return sent


def _failure(exc: openai.APIStatusError, scrub: Callable[[str], str]) -> Failure:
    return Failure(
        status=exc.status_code, code=_error_code(exc), detail=scrub(_server_message(exc))
    )


def _error_code(exc: openai.APIStatusError) -> str | None:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("code"), str):
            return str(error["code"])
        if isinstance(body.get("code"), str):
            return str(body["code"])
    return None


def _server_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        return json.dumps(body)[:500]
    return exc.response.text[:500] if exc.response is not None else str(exc)


async def _close(client: openai.AsyncOpenAI) -> None:
    await client.close()


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    return f"{type(cause).__name__}: {cause}" if cause else str(exc)
