"""The ``openai`` provider: OpenAI and every OpenAI-compatible server.

``openai:MODEL`` (or a bare ``openai``, meaning ``$OPENAI_MODEL``) talks to the Chat
Completions API through the official SDK. The same client serves vLLM, Ollama, the llama.cpp
server and LM Studio when ``OPENAI_BASE_URL`` (or ``--base-url``) points at them.

What a call does:

- **Structured output.** A request with a JSON schema is sent with ``response_format``
  ``json_schema`` (``strict`` when the schema meets strict mode's rules, see
  :func:`~taskdecomp.models.schemas.is_strict_compatible`). A server that refuses that form
  (400 or 422, or a 5xx whose body names ``response_format`` or ``json_schema``, as the
  llama-cpp-python server does) is asked again at once, not retried, with
  ``{"type": "json_object", "schema": ...}``, the form the llama-cpp-python server takes,
  then with plain ``json_object``. The form that worked is remembered per server (base URL
  and model) for the rest of the process, so no later call or model object probes again
  (:attr:`OpenAIModel.structured_output`).
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
- **Usage.** Tokens come from the response's ``usage`` (estimated when a server omits it);
  cost from :data:`PRICES_PER_MTOK` on OpenAI's own endpoint, 0 elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ValidationError

from taskdecomp.errors import ConfigError, ModelError, ModelTimeoutError
from taskdecomp.models.base import ModelRequest, ModelResponse, estimate_tokens
from taskdecomp.models.connection import Connection
from taskdecomp.models.schemas import is_strict_compatible
from taskdecomp.settings import OpenAISettings, load_openai_settings

if TYPE_CHECKING:
    import openai

PRICES_PER_MTOK: dict[str, tuple[float, float]] = {
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-5": (1.25, 10.00),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5-nano": (0.05, 0.40),
    "o3": (2.00, 8.00),
    "o3-mini": (1.10, 4.40),
    "o4-mini": (1.10, 4.40),
}
"""USD per million input and output tokens, by model; dated snapshots match their base."""

OPENAI_HOSTS = ("api.openai.com",)
"""Endpoints that bill at :data:`PRICES_PER_MTOK`; every other server costs 0."""

_RETRY_STATUS = frozenset({408, 409, 429})
_FALLBACK_STATUS = frozenset({400, 422})

StructuredOutput = Literal["json_schema", "json_object+schema", "json_object"]
"""The ``response_format`` forms tried, in order, for a request with a JSON schema."""
_FORMATS: tuple[StructuredOutput, ...] = ("json_schema", "json_object+schema", "json_object")
_FORMAT_WORDS = ("response_format", "json_schema")
"""Words in a 5xx body that make it a refusal of the structured-output form."""
_WORKING_FORMATS: dict[tuple[str, str], StructuredOutput] = {}
"""The form each server (base URL, model) last answered a schema request in, this process."""
_MAX_RETRY_AFTER = 20.0
_SNAPSHOT = re.compile(r"-\d{4}-\d{2}-\d{2}$")


def price_usd(model: str, tokens_in: int, tokens_out: int) -> float:
    """What ``tokens_in`` + ``tokens_out`` cost on OpenAI; 0 for a model not in the table.

    A dated snapshot (``gpt-4.1-mini-2025-04-14``) is priced as its model.
    """
    prices = PRICES_PER_MTOK.get(_SNAPSHOT.sub("", model))
    if prices is None:
        return 0.0
    price_in, price_out = prices
    return (tokens_in * price_in + tokens_out * price_out) / 1_000_000


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """How failed attempts are repeated."""

    attempts: int = 4
    """Most attempts per call, the first included."""
    backoff_seconds: float = 0.5
    """Wait before the second attempt; it doubles each time, with jitter."""
    max_backoff_seconds: float = 8.0
    """Longest wait between two attempts (``Retry-After`` included)."""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {self.attempts!r}")
        if self.backoff_seconds < 0 or self.max_backoff_seconds < 0:
            raise ValueError("backoff_seconds and max_backoff_seconds must be >= 0")

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if retry_after is not None:
            return min(retry_after, self.max_backoff_seconds, _MAX_RETRY_AFTER)
        base = min(self.backoff_seconds * 2.0 ** (attempt - 1), self.max_backoff_seconds)
        return base * (0.5 + random.random() / 2)  # jitter spreads retries of parallel calls


class _Message(BaseModel):
    content: str | None = None


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
            key, timeout, headers); ``base_url`` wins over its base URL.

    Raises:
        ConfigError: a setting does not parse, the key's variable is not set, or OpenAI
            itself is used without a key.
    """
    settings = settings or load_openai_settings()
    connection = connection or Connection()
    key = settings.api_key.get_secret_value() if settings.api_key is not None else None
    if connection.api_key_env is not None:
        key = connection.api_key()
    return OpenAIModel(
        name or settings.model,
        api_key=key,
        base_url=base_url or connection.base_url or settings.base_url,
        timeout=connection.timeout or settings.timeout_seconds,
        headers=connection.headers,
    )


class _Retry(Exception):
    """Internal: this attempt failed in a way worth repeating."""

    def __init__(
        self, error: ModelError, retry_after: float | None, form: StructuredOutput
    ) -> None:
        super().__init__(str(error))
        self.error = error
        self.retry_after = retry_after
        self.form = form
        """The structured-output form the failed attempt sent; the next one starts there."""


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
        structured_output: the first ``response_format`` form to try; a form this server
            is known (in this process) to refuse is skipped.

    Raises:
        ConfigError: no API key for OpenAI's own endpoint, or a bad argument.
    """

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
        structured_output: StructuredOutput = "json_schema",
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
        if structured_output not in _FORMATS:
            raise ConfigError(
                f"structured_output must be one of {', '.join(_FORMATS)}, got {structured_output!r}"
            )
        self._first_format: StructuredOutput = structured_output
        self._server = ((base_url or "").rstrip("/"), model)
        self._priced = base_url is None or any(host in base_url for host in OPENAI_HOSTS)

    streams = True
    """Answers can arrive piece by piece (``ModelRequest.on_text`` asks for it)."""

    @property
    def name(self) -> str:
        """The model string, ``openai:MODEL``."""
        return f"openai:{self._model}"

    def estimate_cost(self, tokens_in: int) -> float:
        """What sending ``tokens_in`` prompt tokens costs (0 off OpenAI's own endpoint)."""
        return price_usd(self._model, tokens_in, 0) if self._priced else 0.0

    @property
    def structured_output(self) -> StructuredOutput:
        """The ``response_format`` form the next call with a JSON schema starts with.

        The form given to the constructor, or the one this server (base URL and model) last
        answered in during this process, whichever comes later in the fallback order.
        """
        known = _WORKING_FORMATS.get(self._server, self._first_format)
        return max(known, self._first_format, key=_FORMATS.index)

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
        import openai

        async with openai.AsyncOpenAI(
            api_key=self._api_key,
            base_url=self._base_url,
            timeout=self._timeout,
            default_headers=self._headers or None,
            max_retries=0,
        ) as client:
            attempt, form = 1, self.structured_output
            while True:
                try:
                    return await self._attempt(client, request, form)
                except _Retry as retry:
                    if attempt >= self._retry.attempts:
                        raise retry.error from None
                    await self._sleep(self._retry.delay(attempt, retry.retry_after))
                    attempt, form = attempt + 1, retry.form

    async def _attempt(
        self, client: openai.AsyncOpenAI, request: ModelRequest, form: StructuredOutput
    ) -> ModelResponse:
        import openai

        try:
            if request.on_text is not None:
                response = await self._streamed(client, request, form)
            else:
                raw = await client.chat.completions.with_raw_response.create(
                    **self._params(request, form)
                )
                content_type = raw.headers.get("content-type", "")
                response = self._response(raw.content, content_type, request)
        except openai.APITimeoutError:
            raise ModelTimeoutError(
                f"{self.name} did not answer within {self._timeout:g}s; raise "
                "OPENAI_TIMEOUT_SECONDS or pick a faster model"
            ) from None
        except openai.APIConnectionError as exc:
            raise _Retry(self._connection_error(exc), None, form) from None
        except openai.APIStatusError as exc:
            if request.json_schema is not None and _refuses_format(exc):
                if form != _FORMATS[-1]:  # this server does not take the form: try the next
                    return await self._attempt(client, request, _next_format(form))
                raise self._format_error(exc) from None
            error = self._status_error(exc)
            if _retryable(exc):
                raise _Retry(error, _retry_after(exc), form) from None
            raise error from None
        if request.json_schema is not None:
            _WORKING_FORMATS[self._server] = form
        return response

    async def _streamed(
        self, client: openai.AsyncOpenAI, request: ModelRequest, form: StructuredOutput
    ) -> ModelResponse:
        """Send the call with ``stream=True``, handing each piece to ``request.on_text``."""
        import openai

        assert request.on_text is not None  # only called for a request that listens
        params = self._params(request, form)
        stream = await client.chat.completions.create(
            **params, stream=True, stream_options={"include_usage": True}
        )
        pieces: list[str] = []
        finish: str | None = None
        usage: Any = None
        content_type = stream.response.headers.get("content-type", "")
        try:
            if "text/event-stream" not in content_type:
                body = await stream.response.aread()
                raise self._bad_response(body, content_type)
            async for chunk in stream:
                usage = chunk.usage or usage
                for choice in chunk.choices[:1]:
                    if choice.delta is not None and choice.delta.content:
                        pieces.append(choice.delta.content)
                        request.on_text(choice.delta.content)
                    finish = choice.finish_reason or finish
        except (openai.APIError, ValueError) as exc:  # a body that is not an event stream
            if isinstance(exc, openai.APIStatusError | openai.APIConnectionError):
                raise
            raise ModelError(
                "bad_response", f"{self.name} sent a stream that is not chat completion chunks"
            ) from None
        finally:
            await stream.close()
        return self._streamed_response("".join(pieces), finish, usage, request)

    def _streamed_response(
        self, text: str, finish: str | None, usage: Any, request: ModelRequest
    ) -> ModelResponse:
        tokens_in = usage.prompt_tokens if usage else estimate_tokens(request.text())
        tokens_out = usage.completion_tokens if usage else (estimate_tokens(text) if text else 0)
        cost = price_usd(self._model, tokens_in, tokens_out)
        return ModelResponse(
            text=text,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            cost_usd=cost if self._priced else 0.0,
            finish_reason=finish,
        )

    def _params(self, request: ModelRequest, form: StructuredOutput) -> dict[str, Any]:
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
        if form == "json_schema":
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": request.schema_name,
                    "schema": schema,
                    "strict": is_strict_compatible(schema),
                },
            }
        elif form == "json_object+schema":
            params["response_format"] = {"type": "json_object", "schema": schema}
        else:
            params["response_format"] = {"type": "json_object"}
        return params

    def _response(self, body: bytes, content_type: str, request: ModelRequest) -> ModelResponse:
        try:
            completion = _Completion.model_validate_json(body)
        except ValidationError:
            raise self._bad_response(body, content_type) from None
        if not completion.choices:
            return ModelResponse(text="", tokens_in=estimate_tokens(request.text()))
        choice = completion.choices[0]
        text = choice.message.content or ""
        usage = completion.usage
        tokens_in = usage.prompt_tokens if usage else estimate_tokens(request.text())
        tokens_out = usage.completion_tokens if usage else (estimate_tokens(text) if text else 0)
        cost = price_usd(completion.model or self._model, tokens_in, tokens_out)
        return ModelResponse(
            text=text,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            cost_usd=cost if self._priced else 0.0,
            finish_reason=choice.finish_reason,
        )

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

    def _connection_error(self, exc: openai.APIConnectionError) -> ModelError:
        where = self._base_url or "OpenAI"
        return ModelError(
            "connection",
            f"{self.name}: cannot reach {where!r} ({_cause(exc)}); check that the server is "
            "running and that --base-url / OPENAI_BASE_URL is right",
        )

    def _status_error(self, exc: openai.APIStatusError) -> ModelError:
        status = exc.status_code
        detail = self._scrub(_server_message(exc))
        where = self._base_url or "OpenAI"
        if status == 401:
            return ModelError(
                "auth",
                f"{self.name}: {where!r} refused the API key (401); set a valid OPENAI_API_KEY",
            )
        if status == 403:
            return ModelError(
                "permission",
                f"{self.name}: the API key may not use this model (403): {detail}; "
                "check the key's project and model access",
            )
        if status == 404:
            return ModelError(
                "not_found",
                f"{self.name}: {where!r} does not know model {self._model!r} (404): {detail}; "
                "pick another with --model or OPENAI_MODEL",
            )
        if status == 429 and _error_code(exc) == "insufficient_quota":
            return ModelError("quota", f"{self.name}: the account is out of quota (429): {detail}")
        if status == 429:
            return ModelError(
                "rate_limit",
                f"{self.name}: still rate limited after {self._retry.attempts} attempts; "
                "try again later or lower max_parallel",
            )
        if status >= 500:
            return ModelError(
                "server",
                f"{self.name}: {where!r} failed with {status} after {self._retry.attempts} "
                f"attempts: {detail}",
            )
        if status in _FALLBACK_STATUS:
            return ModelError(
                "bad_request", f"{self.name}: the server refused the request ({status}): {detail}"
            )
        return ModelError(f"http_{status}", f"{self.name}: HTTP {status}: {detail}")

    def _format_error(self, exc: openai.APIStatusError) -> ModelError:
        if exc.status_code in _FALLBACK_STATUS:
            return self._status_error(exc)  # perhaps not about the format at all
        return ModelError(
            "bad_request",
            f"{self.name}: {self._base_url or 'OpenAI'!r} refused response_format down to "
            f"plain json_object ({exc.status_code}): {self._scrub(_server_message(exc))}; "
            "use a server or model that can answer in JSON",
        )

    def _scrub(self, text: str) -> str:
        if self._api_key and self._api_key != "unused":
            text = text.replace(self._api_key, "***")
        return text[:500]


def _next_format(form: StructuredOutput) -> StructuredOutput:
    return _FORMATS[_FORMATS.index(form) + 1]


def _refuses_format(exc: openai.APIStatusError) -> bool:
    """Whether the server refused the request's ``response_format`` rather than failed.

    400 and 422 count whatever they say; a 5xx only when its body names the format
    (llama-cpp-python's server answers an unknown ``response_format`` type with 500).
    """
    if exc.status_code in _FALLBACK_STATUS:
        return True
    body = exc.response.text.lower()
    return exc.status_code >= 500 and any(word in body for word in _FORMAT_WORDS)


def _retryable(exc: openai.APIStatusError) -> bool:
    if exc.status_code == 429 and _error_code(exc) == "insufficient_quota":
        return False
    return exc.status_code in _RETRY_STATUS or exc.status_code >= 500


def _retry_after(exc: openai.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after")
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds >= 0 else None


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


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    return f"{type(cause).__name__}: {cause}" if cause else str(exc)
