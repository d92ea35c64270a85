"""The ``anthropic`` provider: Claude through Anthropic's Messages API and its official SDK.

``anthropic:MODEL`` (or a bare ``anthropic``, meaning ``$ANTHROPIC_MODEL``) needs the
``anthropic`` extra (``pip install 'taskdecomp[anthropic]'``). The key comes from
``ANTHROPIC_API_KEY`` (or the variable a connection names), the server from
``ANTHROPIC_BASE_URL`` or ``--base-url`` (a proxy or gateway that speaks the Messages API),
one attempt's limit from ``ANTHROPIC_TIMEOUT_SECONDS``.

What a call does:

- **Messages.** System messages become the ``system`` prompt, the rest user and assistant
  turns; ``max_tokens``, which the API requires, defaults to :data:`DEFAULT_MAX_TOKENS`. No
  sampling parameter is sent: the current API takes none (the model's default applies).
- **Structured output** (:mod:`~taskdecomp.models.outputs`). ``native`` sends the schema as
  ``output_config.format`` (generally available in the SDK), but only for a schema inside
  what the API enforces (:func:`fits_native`; a plan schema's per-position steps are not);
  ``tool`` forces one tool, :data:`~taskdecomp.models.outputs.ANSWER_TOOL`, whose input is
  the answer; ``prompt`` states the schema in the system prompt and takes the first JSON
  value of the reply. Anthropic has no JSON mode, so ``json`` means the next supported
  mode. A 400/422 that names the mode's feature moves the call to the next mode at once;
  the mode that worked after such a refusal is remembered for the server and model.
- **Streaming.** With ``ModelRequest.on_text`` set, the call streams: text deltas (or, in
  ``tool`` mode, the answer tool's ``input_json_delta`` pieces) go to ``on_text`` and the
  tokens so far to ``progress``. Usage comes from ``message_start`` and ``message_delta``;
  a server that sends none gets estimated counts, marked ``estimated``.
- **Retries and errors.** The SDK's own retries are off: 408, 409, 429, 5xx (529
  ``overloaded`` included) and connection failures go through
  :func:`~taskdecomp.models.retry.with_retries`, honouring ``Retry-After``. A timeout is
  :class:`~taskdecomp.errors.ModelTimeoutError`; other failures are ``llm_error:<kind>``
  (:mod:`~taskdecomp.models.http_errors`). The key never appears in a message.
- **Cost** from :func:`taskdecomp.models.prices.cost_usd` for ``("anthropic", MODEL)``,
  whatever the server; ``None`` when the price is unknown.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from taskdecomp.errors import ConfigError, ModelError, ModelTimeoutError
from taskdecomp.models import outputs, prices, providers
from taskdecomp.models.base import Model, ModelRequest, ModelResponse, estimate_tokens
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
from taskdecomp.models.retry import Retry, RetryPolicy, listened, retry_after, with_retries
from taskdecomp.settings import load_env, reveal

if TYPE_CHECKING:
    import anthropic
    from anthropic.types import Message as AnthropicMessage

DEFAULT_MAX_TOKENS = 4096
"""The answer's length limit when none is given (the API requires one)."""

SUPPORTED_MODES: tuple[OutputMode, ...] = ("native", "tool", "prompt")
"""The output modes the Messages API offers (it has no JSON mode)."""

_NATIVE_KEYWORDS = frozenset(
    {
        "type", "properties", "required", "additionalProperties", "items", "enum", "const",
        "anyOf", "allOf", "$ref", "$defs", "definitions", "description", "title", "default",
        "format", "minItems", "pattern",
    }
)  # fmt: skip
"""The JSON-schema keywords Anthropic's structured outputs enforce (its documented subset)."""

_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
"""The HTTP status of each error type, for an error that arrives inside a 200 stream."""


class AnthropicSettings(BaseSettings):
    """The ``ANTHROPIC_*`` variables, with the meaning the anthropic SDK gives them."""

    model_config = SettingsConfigDict(
        env_prefix="ANTHROPIC_", env_file=".env", extra="ignore", frozen=True
    )

    api_key: SecretStr | None = None
    """``ANTHROPIC_API_KEY``."""
    model: str | None = None
    """``ANTHROPIC_MODEL``: the model of a bare ``anthropic`` model string."""
    base_url: str | None = None
    """``ANTHROPIC_BASE_URL``: a server that speaks the Messages API (a proxy, a gateway)."""
    timeout_seconds: float = Field(default=60, gt=0)
    """``ANTHROPIC_TIMEOUT_SECONDS``: how long one attempt may take."""


@providers.provider(connects=True)
def provider(name: str, connection: Connection) -> Model:
    """``anthropic[:MODEL]``: Claude through the Messages API (the ``anthropic`` extra)."""
    return anthropic_model(name, connection=connection)


def anthropic_model(
    name: str = "",
    *,
    settings: AnthropicSettings | None = None,
    connection: Connection | None = None,
) -> AnthropicModel:
    """The model an ``anthropic:NAME`` string means, configured from ``ANTHROPIC_*``.

    Args:
        name: the model; empty means ``$ANTHROPIC_MODEL``.
        settings: the settings to use; default: read the environment and ``.env``.
        connection: overrides the settings it sets (base URL, the key's variable, timeout,
            headers, output mode).

    Raises:
        ConfigError: no model is named, a setting does not parse, or no key is set.
    """
    settings = settings or load_env(AnthropicSettings, "ANTHROPIC_")
    connection = connection or Connection()
    model = name or settings.model
    if not model:
        raise ConfigError(
            "the anthropic provider needs a model: use --model anthropic:claude-sonnet-4-5 "
            "(or another Claude model), or set ANTHROPIC_MODEL"
        )
    key = reveal(settings.api_key)
    if connection.api_key_env is not None:
        key = connection.api_key()
    mode = getattr(connection, "output_mode", None)
    return AnthropicModel(
        model,
        api_key=key,
        base_url=connection.base_url or settings.base_url,
        timeout=connection.timeout or settings.timeout_seconds,
        headers=connection.headers,
        output_mode=outputs.output_mode(mode) if mode else None,
    )


class AnthropicModel:
    """A Claude model behind the Messages API.

    Args:
        model: the model name, e.g. ``claude-sonnet-4-5``.
        api_key: the key; required for Anthropic itself, optional for a server at
            ``base_url``.
        base_url: another server that speaks the Messages API.
        timeout: seconds one attempt may take.
        headers: extra HTTP headers sent with every request.
        retry: how failed attempts are repeated.
        max_output_tokens: the answer's length limit (``max_tokens``).
        output_mode: the first structured-output mode to try; default ``native`` where the
            schema fits it, else ``tool``.
        sleep: how to wait between attempts.

    Raises:
        ConfigError: no key for Anthropic's own server, or a bad argument.
    """

    streams = True
    """Answers can arrive piece by piece (``ModelRequest.on_text`` asks for it)."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        headers: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
        max_output_tokens: int = DEFAULT_MAX_TOKENS,
        output_mode: OutputMode | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not model:
            raise ConfigError("the anthropic model needs a name: 'anthropic:claude-sonnet-4-5'")
        if timeout <= 0:
            raise ConfigError(f"the anthropic timeout must be positive seconds, got {timeout!r}")
        if max_output_tokens < 1:
            raise ConfigError(f"max_output_tokens must be at least 1, got {max_output_tokens!r}")
        if not api_key and base_url is None:
            raise ConfigError(
                "ANTHROPIC_API_KEY is not set: export ANTHROPIC_API_KEY='sk-ant-...', or "
                "point --base-url / ANTHROPIC_BASE_URL at a server that speaks the Messages API"
            )
        self._model = model
        self._api_key = api_key or "unused"  # a gateway may want none; the SDK wants one
        self._base_url = base_url
        self._timeout = timeout
        self._headers = dict(headers or {})
        self._retry = retry or RetryPolicy()
        self._max_output_tokens = max_output_tokens
        self._first_mode: OutputMode = output_mode or "native"
        self._sleep = sleep
        self._server = ("anthropic", (base_url or "").rstrip("/"), model)
        self._clients: PerLoop[anthropic.AsyncAnthropic] = PerLoop(self._client, _close)

    @property
    def name(self) -> str:
        """The model string, ``anthropic:MODEL``."""
        return f"anthropic:{self._model}"

    @property
    def output_mode(self) -> OutputMode:
        """The mode the next call with a schema starts from (a fitting schema's)."""
        return outputs.MEMORY.first(self._server, self._first_mode)

    def estimate_cost(self, tokens_in: int) -> float | None:
        """What sending ``tokens_in`` prompt tokens costs; ``None`` when the price is unknown."""
        return prices.cost_usd("anthropic", self._model, tokens_in, 0)

    def __repr__(self) -> str:
        return f"AnthropicModel({self._model!r}, base_url={self._base_url!r})"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send one Messages API call, retrying what is worth retrying.

        Raises:
            ModelTimeoutError: an attempt took longer than the timeout.
            ModelError: the server refused the call, kept failing after the retries, or
                answered with something that is not a message (``bad_response``).
        """
        client = await self._clients.get()
        modes = self._modes(request)
        request, heard = listened(request)
        return await with_retries(
            functools.partial(self._attempt, client, request, modes),
            modes[0],
            self._retry,
            self._sleep,
            heard=heard,
        )

    def _client(self) -> anthropic.AsyncAnthropic:
        """A new SDK client: the process's TLS context, no retries of its own.

        Raises:
            ConfigError: the SDK is not installed.
        """
        try:
            import anthropic
        except ImportError:
            raise ConfigError(
                "the anthropic provider needs its SDK: pip install 'taskdecomp[anthropic]'"
            ) from None
        return anthropic.AsyncAnthropic(
            api_key=self._api_key,
            base_url=self._base_url,
            timeout=self._timeout,
            default_headers=self._headers or None,
            max_retries=0,
            http_client=anthropic.DefaultAsyncHttpxClient(
                verify=tls_context(), timeout=self._timeout
            ),
        )

    def _modes(self, request: ModelRequest) -> tuple[OutputMode, ...]:
        """The modes this request may be asked in, in the order to try them."""
        schema = request.json_schema
        if schema is None:
            return ("prompt",)
        supported = [m for m in SUPPORTED_MODES if m != "native" or fits_native(schema)]
        return outputs.fallbacks(self.output_mode, supported)

    async def _attempt(
        self,
        client: anthropic.AsyncAnthropic,
        request: ModelRequest,
        modes: tuple[OutputMode, ...],
        mode: OutputMode,
    ) -> ModelResponse:
        send = functools.partial(self._send, client, request)
        return await outputs.in_modes(send, mode, modes, self._server)

    async def _send(
        self, client: anthropic.AsyncAnthropic, request: ModelRequest, mode: OutputMode
    ) -> ModelResponse:
        import anthropic

        try:
            if request.on_text is not None:
                response = await self._streamed(client, request, mode)
            else:
                message = await client.messages.create(**self._params(request, mode))
                response = self._response(message, request, mode)
        except anthropic.APITimeoutError:
            raise ModelTimeoutError(
                f"{self.name} did not answer within {self._timeout:g}s; raise "
                "ANTHROPIC_TIMEOUT_SECONDS or pick a faster model"
            ) from None
        except anthropic.APIConnectionError as exc:
            raise Retry(self._connection_error(exc), None, mode) from None
        except anthropic.APIStatusError as exc:
            failure = self._failure(exc)
            error = status_error(self._endpoint(), failure, attempts=self._retry.attempts)
            failed: Exception = error
            if retryable(failure):
                failed = Retry(error, retry_after(exc.response.headers), mode)
            if request.json_schema is not None and outputs.refuses(
                mode, failure.status, failure.detail
            ):  # the server lacks this mode: the next one, at once
                raise outputs.Refused(failed) from None
            raise failed from None
        except (anthropic.APIResponseValidationError, json.JSONDecodeError):
            raise self._bad_response() from None
        return response

    def _params(self, request: ModelRequest, mode: OutputMode) -> dict[str, Any]:
        system = [m["content"] for m in request.messages if m["role"] == "system"]
        turns = [dict(m) for m in request.messages if m["role"] != "system"]
        schema = request.json_schema
        if schema is not None and mode == "prompt":
            system.append(outputs.schema_instructions(schema))
        params: dict[str, Any] = {
            "model": self._model,
            "max_tokens": self._max_output_tokens,
            "messages": turns or [{"role": "user", "content": "\n\n".join(system)}],
        }
        if system and turns:
            params["system"] = "\n\n".join(system)
        if schema is None:
            return params
        if mode == "native":  # in the body, so SDKs older than its keyword still send it
            format_ = {"type": "json_schema", "schema": schema}
            params["extra_body"] = {"output_config": {"format": format_}}
        elif mode == "tool":
            params["tools"] = [
                {
                    "name": outputs.ANSWER_TOOL,
                    "description": f"Give the {request.schema_name} as this tool's input.",
                    "input_schema": tool_input_schema(schema),
                }
            ]
            params["tool_choice"] = {"type": "tool", "name": outputs.ANSWER_TOOL}
        return params

    def _response(
        self, message: AnthropicMessage, request: ModelRequest, mode: OutputMode
    ) -> ModelResponse:
        if not hasattr(message, "content"):
            raise self._bad_response()
        texts: list[str] = []
        answer: str | None = None
        for block in message.content:
            if block.type == "text":
                texts.append(block.text)
            elif block.type == "tool_use" and block.name == outputs.ANSWER_TOOL:
                answer = json.dumps(_unwrap(block.input, request), ensure_ascii=False)
        reply = _Reply(text="".join(texts), answer=answer, stop_reason=message.stop_reason)
        usage = getattr(message, "usage", None)
        if usage is not None:
            reply.tokens_in = _prompt_tokens(usage)
            reply.tokens_out = getattr(usage, "output_tokens", None)
        return self._finish(reply, request, mode)

    async def _streamed(
        self, client: anthropic.AsyncAnthropic, request: ModelRequest, mode: OutputMode
    ) -> ModelResponse:
        """Stream the call, handing each piece of the answer to ``request.on_text``."""
        stream = await client.messages.create(**self._params(request, mode), stream=True)
        if "text/event-stream" not in stream.response.headers.get("content-type", ""):
            await stream.close()
            raise self._bad_response()
        reply = _Reply()
        answer_blocks: set[int] = set()
        wrapped = request.json_schema is not None and _wraps(request.json_schema)
        try:
            async for event in stream:
                piece = reply.read(event, answer_blocks, tool_mode=mode == "tool")
                if piece:
                    self._tell(request, "" if wrapped else piece, reply)
        finally:
            await stream.close()
        if answer_blocks:  # a tool called with no input deltas has empty input
            reply.answer = reply.answer or "{}"
            if wrapped:
                answer = _unwrap(_loads(reply.answer), request)
                reply.answer = json.dumps(answer, ensure_ascii=False)
        return self._finish(reply, request, mode)

    def _tell(self, request: ModelRequest, piece: str, reply: _Reply) -> None:
        assert request.on_text is not None  # only streamed calls get here
        if piece:
            request.on_text(piece)
        if request.progress is not None:
            request.progress("generating", estimate_tokens(reply.heard))

    def _finish(self, reply: _Reply, request: ModelRequest, mode: OutputMode) -> ModelResponse:
        text = reply.text
        if request.json_schema is not None:
            text = (
                reply.answer
                if reply.answer is not None
                else outputs.extract_json(text, request.json_schema)
            )
        estimated = reply.tokens_in is None or reply.tokens_out is None
        tokens_in = reply.tokens_in if reply.tokens_in is not None else _estimate_in(request)
        tokens_out = reply.tokens_out
        if tokens_out is None:
            tokens_out = estimate_tokens(text) if text else 0
        return ModelResponse(
            text=text,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            cost_usd=prices.cost_usd("anthropic", self._model, tokens_in, tokens_out),
            finish_reason=_finish_reason(reply.stop_reason),
            estimated=estimated,
        )

    def _endpoint(self) -> Endpoint:
        return Endpoint(
            model=self.name,
            name=self._model,
            where=self._base_url or "Anthropic",
            key_hint="set a valid ANTHROPIC_API_KEY",
            model_hint="pick another with --model anthropic:MODEL or ANTHROPIC_MODEL",
        )

    def _failure(self, exc: anthropic.APIStatusError) -> Failure:
        error = exc.body.get("error") if isinstance(exc.body, dict) else None
        error = error if isinstance(error, dict) else {}  # read from the body: any SDK version
        kind = error.get("type") if isinstance(error.get("type"), str) else None
        status = exc.status_code
        if status < 400:  # an error event inside a 200 stream
            status = _ERROR_STATUS.get(kind or "", 500)
        message = error.get("message") or (exc.response.text if status >= 400 else str(exc))
        return Failure(status=status, code=kind, detail=self._scrub(message or ""))

    def _connection_error(self, exc: anthropic.APIConnectionError) -> ModelError:
        cause = exc.__cause__ or exc.__context__
        text = f"{type(cause).__name__}: {cause}" if cause else str(exc)
        return connection_error(
            self._endpoint(), self._scrub(text), url_hint="--base-url / ANTHROPIC_BASE_URL"
        )

    def _bad_response(self) -> ModelError:
        return ModelError(
            "bad_response",
            f"{self.name}: {self._base_url or 'Anthropic'!r} answered, but not with a Messages "
            "API message; check that --base-url / ANTHROPIC_BASE_URL is the server's root "
            "(without /v1/messages)",
        )

    def _scrub(self, text: str) -> str:
        if self._api_key != "unused":
            text = text.replace(self._api_key, "***")
        return text[:500]


@dataclass(kw_only=True)
class _Reply:
    """What is gathered from one reply, whole or streamed."""

    text: str = ""
    answer: str | None = None
    """The answer tool's input as JSON text, when it was called."""
    stop_reason: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    heard: str = ""
    """What the listener has been given so far."""
    _pieces: dict[int, list[str]] = field(default_factory=dict)

    def read(self, event: Any, answer_blocks: set[int], *, tool_mode: bool) -> str:
        """Take in one stream event; return the piece the listener hears (or ``""``)."""
        kind = getattr(event, "type", None)
        if kind == "message_start":
            usage = getattr(event.message, "usage", None)
            self.tokens_in = _prompt_tokens(usage) if usage is not None else None
            self.tokens_out = getattr(usage, "output_tokens", None)
        elif kind == "content_block_start":
            block = event.content_block
            if block.type == "tool_use" and block.name == outputs.ANSWER_TOOL:
                answer_blocks.add(event.index)
        elif kind == "content_block_delta":
            return self._delta(event.index, event.delta, answer_blocks, tool_mode=tool_mode)
        elif kind == "message_delta":
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            usage = getattr(event, "usage", None)
            self.tokens_out = getattr(usage, "output_tokens", None) or self.tokens_out
            if getattr(usage, "input_tokens", None) is not None:
                self.tokens_in = _prompt_tokens(usage)
        return ""

    def _delta(self, index: int, delta: Any, answer_blocks: set[int], *, tool_mode: bool) -> str:
        if delta.type == "text_delta":
            self.text += delta.text
            piece = "" if tool_mode else delta.text
        elif delta.type == "input_json_delta" and index in answer_blocks:
            self._pieces.setdefault(index, []).append(delta.partial_json)
            self.answer = "".join(self._pieces[min(self._pieces)])
            piece = delta.partial_json
        else:
            piece = ""
        self.heard += piece
        return piece


async def _close(client: anthropic.AsyncAnthropic) -> None:
    await client.close()


def tool_input_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The answer tool's ``input_schema``: ``schema``, or one object holding it.

    A tool's input must be an object; any other schema (a root ``anyOf``, an array) is
    wrapped as the ``answer`` property of one, its ``$defs`` kept at the root.
    """
    if not _wraps(schema):
        return dict(schema)
    inner = {key: value for key, value in schema.items() if key != "$defs"}
    wrapper: dict[str, Any] = {
        "type": "object",
        "properties": {_WRAPPED: inner},
        "required": [_WRAPPED],
        "additionalProperties": False,
    }
    if "$defs" in schema:
        wrapper["$defs"] = schema["$defs"]
    return wrapper


_WRAPPED = "answer"
"""The property a wrapped schema's answer sits in."""


def _wraps(schema: Mapping[str, Any]) -> bool:
    return schema.get("type") != "object"


def _loads(text: str) -> Any:
    """``text`` as JSON, or as it is when it is not (the policy boundary then refuses it)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _unwrap(value: Any, request: ModelRequest) -> Any:
    """The answer inside the tool's input (the input itself unless the schema was wrapped)."""
    schema = request.json_schema
    if schema is not None and _wraps(schema) and isinstance(value, dict) and _WRAPPED in value:
        return value[_WRAPPED]
    return value


def fits_native(schema: Mapping[str, Any]) -> bool:
    """Whether Anthropic's structured outputs can enforce ``schema`` as it is.

    Every keyword must be in the documented subset; every object closed
    (``additionalProperties: false``); ``minItems`` only 0 or 1.
    """
    return _fits(schema)


def _fits(node: Any) -> bool:
    if isinstance(node, list):
        return all(_fits(item) for item in node)
    if not isinstance(node, Mapping):
        return False
    if not set(node) <= _NATIVE_KEYWORDS or node.get("minItems", 0) not in (0, 1):
        return False
    if (node.get("type") == "object" or "properties" in node) and node.get(
        "additionalProperties"
    ) is not False:
        return False
    for key in ("items", "anyOf", "allOf"):
        if key in node and not _fits(node[key]):
            return False
    children = [*node.get("properties", {}).values(), *node.get("$defs", {}).values()]
    return all(_fits(child) for child in children)


def _prompt_tokens(usage: Any) -> int | None:
    """All prompt tokens: the uncached ones plus those written to and read from the cache."""
    counts = [getattr(usage, name, None) for name in _PROMPT_COUNTS]
    if counts[0] is None:
        return None
    return sum(count or 0 for count in counts)


_PROMPT_COUNTS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def _estimate_in(request: ModelRequest) -> int:
    return estimate_tokens(request.text())


def _finish_reason(stop_reason: str | None) -> str | None:
    if stop_reason == "max_tokens":
        return "length"
    if stop_reason == "refusal":
        return "refusal"
    return "stop"
