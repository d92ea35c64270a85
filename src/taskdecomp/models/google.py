"""The ``google`` provider: Gemini models through the Gemini API and the official SDK.

``google:MODEL`` (``google:gemini-2.5-flash``) talks to the Gemini API
(``models/{model}:generateContent``, ``:streamGenerateContent?alt=sse``) through
``google-genai`` (the ``google`` extra). The environment keeps the SDK's meaning:

- ``GOOGLE_API_KEY`` or ``GEMINI_API_KEY`` holds the key (the first wins when both are set,
  as in the SDK), unless the connection names another variable (``api_key_env``);
- ``GOOGLE_GEMINI_BASE_URL`` (or ``--base-url``) points at another server that speaks the
  Gemini API, such as a proxy; the SDK adds ``/v1beta/models/...`` to it;
- ``GEMINI_TIMEOUT_SECONDS`` (default 60) bounds one attempt.

What a call does:

- **Structured output.** A request with a JSON schema is asked in the connection's
  ``output_mode`` or ``native`` first: ``native`` sets ``response_mime_type`` to JSON with
  the schema as ``response_json_schema``; ``tool`` declares one function,
  :data:`~taskdecomp.models.outputs.ANSWER_TOOL`, with the schema as its parameters and
  forces it (function calling mode ``ANY``), the call's arguments being the answer; ``json``
  asks for JSON with the schema stated in the system instruction; ``prompt`` only states
  it, and the first complete JSON value of the answer is taken. A 400 that says the mode is
  not supported (JSON mode, a schema, function calling) is asked again at once in the next
  mode, and the mode that worked is remembered for the server and model
  (:data:`~taskdecomp.models.outputs.MEMORY`).
- **Streaming.** A request with ``on_text`` streams: each piece goes to ``on_text`` and
  the tokens written so far to ``progress``.
- **Retries.** 408, 409, 429, 5xx and unreachable servers are retried by
  :func:`~taskdecomp.models.retry.with_retries`, waiting what ``Retry-After`` or the
  error's ``RetryInfo`` asks; the SDK's own retries are off. A timeout is
  :class:`~taskdecomp.errors.ModelTimeoutError` (``llm_timeout``), not retried.
- **Errors** become ``llm_error:<kind>`` as :mod:`~taskdecomp.models.http_errors` says; a
  key the API calls invalid (its 400 ``API_KEY_INVALID``) is ``auth``. The key never
  appears in a message.
- **Usage** comes from ``usageMetadata`` (thinking tokens count as output, as they are
  billed); without it tokens are estimated and the response says so. Cost from
  :func:`~taskdecomp.models.prices.cost_usd`; ``MAX_TOKENS`` is ``finish_reason="length"``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from taskdecomp.errors import ConfigError, ModelTimeoutError
from taskdecomp.models import prices, providers
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
from taskdecomp.models.outputs import (
    ANSWER_TOOL,
    MEMORY,
    OutputMode,
    Refused,
    extract_json,
    fallbacks,
    in_modes,
    output_mode,
    refuses,
    schema_instructions,
)
from taskdecomp.models.retry import Retry, RetryPolicy, listened, retry_after, with_retries
from taskdecomp.settings import load_env, reveal

if TYPE_CHECKING:
    import httpx
    from google.genai import client as genai_client
    from google.genai import errors, types

DEFAULT_TIMEOUT = 60.0
"""Seconds one attempt may take when ``GEMINI_TIMEOUT_SECONDS`` is not set."""

API_VERSION = "v1beta"
"""The API version asked for, whatever the SDK's default: the one whose reference lists
every feature used here (JSON schemas, forced function calls, streaming)."""

KEY_VARIABLES = ("GOOGLE_API_KEY", "GEMINI_API_KEY")
"""Where the key is read from, in the SDK's order."""

_FINISH = {"STOP": "stop", "MAX_TOKENS": "length"}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)s$")


class GoogleSettings(BaseSettings):
    """The variables the ``google-genai`` SDK reads, and the provider's timeout.

    The key is kept as a secret (never printed in a repr) and only handed to the client.
    """

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", frozen=True)

    google_api_key: SecretStr | None = None
    """``GOOGLE_API_KEY``: the key; wins over ``GEMINI_API_KEY``, as in the SDK."""
    gemini_api_key: SecretStr | None = None
    """``GEMINI_API_KEY``: the key."""
    google_gemini_base_url: str | None = None
    """``GOOGLE_GEMINI_BASE_URL``: another server that speaks the Gemini API."""
    gemini_timeout_seconds: float = Field(default=DEFAULT_TIMEOUT, gt=0)
    """``GEMINI_TIMEOUT_SECONDS``: how long one model call may take."""

    def api_key(self) -> str | None:
        """The key, from the first of :data:`KEY_VARIABLES` that is set."""
        return reveal(self.google_api_key or self.gemini_api_key)


def load_google_settings() -> GoogleSettings:
    """Read the variables (environment, then ``.env``).

    Raises:
        ConfigError: one does not parse.
    """
    return load_env(GoogleSettings, "")


@providers.provider(connects=True)
def provider(name: str, connection: Connection) -> Model:
    """``google:MODEL``: a Gemini model through the Gemini API (the ``google`` extra)."""
    return google_model(name, connection=connection)


def google_model(
    name: str,
    *,
    settings: GoogleSettings | None = None,
    connection: Connection | None = None,
) -> GeminiModel:
    """The model a ``google:NAME`` string means, configured from the environment.

    Args:
        name: the model, e.g. ``gemini-2.5-flash``.
        settings: the settings to use; default: read the environment and ``.env``.
        connection: overrides what the settings say (base URL, the variable holding the
            key, timeout, headers) and may choose the first output mode.

    Raises:
        ConfigError: no model is named, the SDK is not installed, a setting does not parse,
            the key's variable is not set, or the Gemini API itself is used without a key.
    """
    if not name:
        raise ConfigError(
            "the google model needs a name: use --model google:MODEL, "
            "e.g. 'google:gemini-2.5-flash'"
        )
    try:
        import google.genai  # noqa: F401  # fail here, with the fix, not at the first call
    except ImportError:
        raise ConfigError(
            f"google:{name} needs the google-genai SDK: pip install 'taskdecomp[google]'"
        ) from None
    settings = settings or load_google_settings()
    connection = connection or Connection()
    key = connection.api_key() if connection.api_key_env is not None else settings.api_key()
    mode = getattr(connection, "output_mode", None)
    return GeminiModel(
        name,
        api_key=key,
        base_url=connection.base_url or settings.google_gemini_base_url,
        timeout=connection.timeout or settings.gemini_timeout_seconds,
        headers=connection.headers,
        output_mode=output_mode(mode) if mode is not None else "native",
        key_variable=connection.api_key_env,
    )


@dataclass(kw_only=True)
class _Reading:
    """What the chunks of one answer said so far (one chunk when not streamed)."""

    pieces: list[str] = field(default_factory=list)
    arguments: dict[str, Any] | None = None
    usage: types.GenerateContentResponseUsageMetadata | None = None
    finish: str | None = None

    def add(self, chunk: types.GenerateContentResponse) -> list[str]:
        """Take one chunk in; return the pieces of answer it brought."""
        self.usage = chunk.usage_metadata or self.usage
        new: list[str] = []
        for candidate in (chunk.candidates or [])[:1]:
            if candidate.finish_reason is not None:
                reason = str(candidate.finish_reason.value)
                self.finish = _FINISH.get(reason, reason.lower())
            parts = (candidate.content.parts if candidate.content else None) or []
            for part in parts:
                call = part.function_call
                if call is not None and call.name == ANSWER_TOOL:
                    self.arguments = dict(call.args or {})
                    new.append(json.dumps(self.arguments, ensure_ascii=False))
                elif part.text and not part.thought:
                    self.pieces.append(part.text)
                    new.append(part.text)
        return new

    def text(self, mode: OutputMode | None, schema: dict[str, Any] | None = None) -> str:
        """The answer: the forced call's arguments, or the text (its JSON in prompt mode)."""
        if self.arguments is not None:
            return json.dumps(self.arguments, ensure_ascii=False)
        text = "".join(self.pieces)
        return extract_json(text, schema) if mode == "prompt" else text

    def tokens_out(self) -> int:
        """Tokens written so far: the server's count when it sent one, else an estimate."""
        if self.usage is not None and self.usage.candidates_token_count is not None:
            return self.usage.candidates_token_count + (self.usage.thoughts_token_count or 0)
        written = self.text(None)
        return estimate_tokens(written) if written else 0


@dataclass(frozen=True, kw_only=True, slots=True)
class _Held:
    """An event loop's SDK client and the HTTP client under it."""

    client: genai_client.AsyncClient
    http: httpx.AsyncClient
    idle: httpx.Client


async def _close(held: _Held) -> None:
    held.idle.close()
    await held.http.aclose()


class GeminiModel:
    """A Gemini model behind the Gemini API.

    Args:
        model: the model name the server knows, e.g. ``gemini-2.5-flash``.
        api_key: the key; required for the Gemini API itself, optional for a server at
            ``base_url``.
        base_url: another server that speaks the Gemini API, e.g. ``http://127.0.0.1:8000``.
        timeout: seconds one attempt may take.
        headers: extra HTTP headers sent with every request.
        retry: how failed attempts are repeated.
        max_output_tokens: cap on the answer's length; default: the server's.
        temperature: sampling temperature; 0 keeps plans repeatable.
        output_mode: the first structured-output mode to try; a mode this server is known
            (in this process) to refuse is skipped.
        key_variable: the variable the key came from, when not one of :data:`KEY_VARIABLES`
            (for messages).
        sleep: how to wait between attempts.

    Raises:
        ConfigError: no API key for the Gemini API itself, or a bad argument.
    """

    streams = True
    """Answers can arrive piece by piece (``ModelRequest.on_text`` asks for it)."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        headers: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
        max_output_tokens: int | None = None,
        temperature: float = 0.0,
        output_mode: OutputMode = "native",
        key_variable: str | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not model:
            raise ConfigError("the google model needs a name: 'google:gemini-2.5-flash'")
        if timeout <= 0:
            raise ConfigError(f"the google timeout must be positive seconds, got {timeout!r}")
        self._key_hint = f"set a valid {key_variable or ' or '.join(reversed(KEY_VARIABLES))}"
        if not api_key and base_url is None:
            raise ConfigError(
                "GEMINI_API_KEY is not set: export GEMINI_API_KEY='...' (a key from "
                "https://aistudio.google.com/apikey), or point --base-url / "
                "GOOGLE_GEMINI_BASE_URL at a server that speaks the Gemini API"
            )
        self._model = model.removeprefix("models/")
        self._api_key = api_key or "unused"  # a proxy may want no key
        self._base_url = base_url
        self._timeout = timeout
        self._headers = dict(headers or {})
        self._retry = retry or RetryPolicy()
        self._max_output_tokens = max_output_tokens
        self._temperature = temperature
        self._first_mode = output_mode
        self._sleep = sleep
        self._server = ("google", (base_url or "").rstrip("/"), self._model)
        self._clients: PerLoop[_Held] = PerLoop(self._client, _close)

    @property
    def name(self) -> str:
        """The model string, ``google:MODEL``."""
        return f"google:{self._model}"

    @property
    def base_url(self) -> str | None:
        """The server, or ``None`` for the Gemini API itself."""
        return self._base_url

    @property
    def output_mode(self) -> OutputMode:
        """The mode the next call with a JSON schema starts with.

        The mode given to the constructor, or a later one this server and model are known
        to need in this process.
        """
        return MEMORY.first(self._server, self._first_mode)

    def estimate_cost(self, tokens_in: int) -> float | None:
        """What sending ``tokens_in`` prompt tokens costs; ``None`` when the price is unknown."""
        return prices.cost_usd("google", self._model, tokens_in, 0)

    def __repr__(self) -> str:
        return f"GeminiModel({self._model!r}, base_url={self._base_url!r})"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Generate one answer, retrying what is worth retrying.

        Raises:
            ModelTimeoutError: an attempt took longer than the timeout.
            ModelError: the server refused the call or kept failing after the retries.
        """
        held = await self._clients.get()
        request, heard = listened(request)
        return await with_retries(
            functools.partial(self._attempt, held.client, request),
            self.output_mode,
            self._retry,
            self._sleep,
            heard=heard,
        )

    def _client(self) -> _Held:
        """A new SDK client over HTTP clients of its own, sharing the process's TLS context."""
        import httpx
        from google import genai
        from google.genai import types

        verify = tls_context()
        http = httpx.AsyncClient(verify=verify)
        idle = httpx.Client(verify=verify)  # the SDK wants a sync client too; it stays idle
        options = types.HttpOptions(
            base_url=self._base_url,
            api_version=API_VERSION,
            headers=self._headers or None,
            timeout=max(1, round(self._timeout * 1000)),  # milliseconds
            retry_options=types.HttpRetryOptions(attempts=1),  # ours retry
            httpx_client=idle,
            httpx_async_client=http,
            async_client_args={"ssl": verify},  # spares the SDK loading certificates again
        )
        client = genai.Client(vertexai=False, api_key=self._api_key, http_options=options)
        return _Held(client=client.aio, http=http, idle=idle)

    async def _attempt(
        self, client: genai_client.AsyncClient, request: ModelRequest, mode: OutputMode
    ) -> ModelResponse:
        send = functools.partial(self._send, client, request)
        return await in_modes(send, mode, fallbacks(mode), self._server)

    async def _send(
        self, client: genai_client.AsyncClient, request: ModelRequest, mode: OutputMode
    ) -> ModelResponse:
        import httpx
        from google.genai import errors

        try:
            response = await self._generate(client, request, mode)
        except httpx.TimeoutException:
            raise ModelTimeoutError(
                f"{self.name} did not answer within {self._timeout:g}s; raise "
                "GEMINI_TIMEOUT_SECONDS or pick a faster model"
            ) from None
        except httpx.TransportError as exc:
            error = connection_error(
                self._endpoint(), _cause(exc), url_hint="--base-url / GOOGLE_GEMINI_BASE_URL"
            )
            raise Retry(error, None, mode) from None
        except errors.APIError as exc:
            failure = self._failure(exc)
            error = status_error(self._endpoint(), failure, attempts=self._retry.attempts)
            failed: Exception = error
            if retryable(failure):
                failed = Retry(error, _retry_delay(exc), mode)
            if request.json_schema is not None and refuses(mode, failure.status, failure.detail):
                raise Refused(failed) from None  # the server lacks this mode: the next one
            raise failed from None
        return response

    async def _generate(
        self, client: genai_client.AsyncClient, request: ModelRequest, mode: OutputMode
    ) -> ModelResponse:
        contents, config = self._request(request, mode)
        reading = _Reading()
        if request.on_text is None:
            reading.add(
                await client.models.generate_content(
                    model=self._model, contents=contents, config=config
                )
            )
        else:
            stream = await client.models.generate_content_stream(
                model=self._model, contents=contents, config=config
            )
            async for chunk in stream:
                for piece in reading.add(chunk):
                    request.on_text(piece)
                if request.progress is not None:
                    request.progress("generating", reading.tokens_out())
        return self._response(reading, request, mode if request.json_schema else None)

    def _request(
        self, request: ModelRequest, mode: OutputMode
    ) -> tuple[list[types.Content], types.GenerateContentConfig]:
        from google.genai import types

        system = [m["content"] for m in request.messages if m["role"] == "system"]
        contents = [
            types.Content(
                role="model" if m["role"] == "assistant" else "user",
                parts=[types.Part(text=m["content"])],
            )
            for m in request.messages
            if m["role"] != "system"
        ]
        schema = request.json_schema
        config: dict[str, Any] = {"temperature": self._temperature}
        if self._max_output_tokens is not None:
            config["max_output_tokens"] = self._max_output_tokens
        if schema is not None:
            config.update(_mode_config(schema, mode))
            if mode in ("json", "prompt"):
                system.append(schema_instructions(schema))
        if system:
            config["system_instruction"] = "\n\n".join(system)
        if not contents:  # the API wants one turn at least
            contents = [types.Content(role="user", parts=[types.Part(text="Answer now.")])]
        return contents, types.GenerateContentConfig(**config)

    def _response(
        self, reading: _Reading, request: ModelRequest, mode: OutputMode | None
    ) -> ModelResponse:
        text = reading.text(mode, request.json_schema)
        usage = reading.usage
        if usage is not None and usage.prompt_token_count is not None:
            tokens_in, tokens_out, estimated = usage.prompt_token_count, reading.tokens_out(), False
        else:
            tokens_in = estimate_tokens(request.text())
            tokens_out, estimated = (estimate_tokens(text) if text else 0), True
        return ModelResponse(
            text=text,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            cost_usd=prices.cost_usd("google", self._model, tokens_in, tokens_out),
            finish_reason=reading.finish or "stop",
            estimated=estimated,
        )

    def _endpoint(self) -> Endpoint:
        return Endpoint(
            model=self.name,
            name=self._model,
            where=self._base_url or "the Gemini API",
            key_hint=self._key_hint,
            model_hint="pick another with --model google:MODEL",
        )

    def _failure(self, exc: errors.APIError) -> Failure:
        status = exc.code
        if status == 400 and "API_KEY_INVALID" in json.dumps(exc.details, default=str):
            status = 401  # the Gemini API says 400 for a key it does not know
        detail = self._scrub(str(exc.message or exc.status or "no message"))
        return Failure(status=status, code=exc.status, detail=detail)

    def _scrub(self, text: str) -> str:
        if self._api_key != "unused":
            text = text.replace(self._api_key, "***")
        return text[:500]


def _mode_config(schema: dict[str, Any], mode: OutputMode) -> dict[str, Any]:
    """The ``GenerateContentConfig`` fields that ask for ``schema`` in ``mode``."""
    from google.genai import types

    if mode == "native":
        return {"response_mime_type": "application/json", "response_json_schema": schema}
    if mode == "json":
        return {"response_mime_type": "application/json"}
    if mode == "tool":
        answer = types.FunctionDeclaration(
            name=ANSWER_TOOL,
            description="Give the answer; its arguments are the answer.",
            parameters_json_schema=schema,
        )
        forced = types.FunctionCallingConfig(
            mode=types.FunctionCallingConfigMode.ANY, allowed_function_names=[ANSWER_TOOL]
        )
        return {
            "tools": [types.Tool(function_declarations=[answer])],
            "tool_config": types.ToolConfig(function_calling_config=forced),
            "automatic_function_calling": types.AutomaticFunctionCallingConfig(disable=True),
        }
    return {}


def _retry_delay(exc: errors.APIError) -> float | None:
    """What ``Retry-After``, or else the error's ``RetryInfo`` (``"37s"``), asks to wait."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is not None:
        asked = retry_after({k.lower(): v for k, v in headers.items()})
        if asked is not None:
            return asked
    error = exc.details.get("error", exc.details) if isinstance(exc.details, dict) else {}
    for detail in error.get("details", []) if isinstance(error, dict) else []:
        delay = detail.get("retryDelay") if isinstance(detail, dict) else None
        match = _DURATION.match(delay) if isinstance(delay, str) else None
        if match:
            return float(match.group(1))
    return None


def _cause(exc: httpx.TransportError) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
