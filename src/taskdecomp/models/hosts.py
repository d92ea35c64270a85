"""Named OpenAI-compatible hosts: ``ollama``, ``azure``, ``openrouter``, ``groq``, ``together``.

Each speaks the Chat Completions API through the ``openai`` provider's model
(:func:`~taskdecomp.models.openai.openai_model`: the same output modes, streaming, retries
and errors) and adds only what makes the host itself: its default base URL, the
environment variable that holds its key, and its name, by which its calls are priced
(:mod:`taskdecomp.models.prices`) and its runs are stored and resumed. ``--base-url`` (a
:class:`~taskdecomp.models.connection.Connection`) wins over the default URL, and a
connection's key variable over the host's. No ``OPENAI_*`` key or URL is ever sent to
another host.

=========== ==================================================== =====================
host        default base URL                                     key variable
=========== ==================================================== =====================
ollama      ``http://127.0.0.1:11434/v1`` (``OLLAMA_HOST``)      none
azure       ``$AZURE_OPENAI_ENDPOINT/openai/v1``                 ``AZURE_OPENAI_API_KEY``
openrouter  ``https://openrouter.ai/api/v1``                     ``OPENROUTER_API_KEY``
groq        ``https://api.groq.com/openai/v1``                   ``GROQ_API_KEY``
together    ``https://api.together.xyz/v1``                      ``TOGETHER_API_KEY``
=========== ==================================================== =====================

An Ollama server on this machine bills nothing: its calls cost 0 (elsewhere, their price is
unknown unless set). The others are priced from the table under their own names.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from taskdecomp.errors import ConfigError, ModelError, ModelTimeoutError
from taskdecomp.models import prices
from taskdecomp.models.base import ModelRequest, ModelResponse
from taskdecomp.models.connection import Connection
from taskdecomp.models.providers import provider

if TYPE_CHECKING:
    from taskdecomp.models.openai import OpenAIModel

__all__ = ["HOSTS", "Host", "HostedModel", "azure", "groq", "ollama", "openrouter", "together"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Host:
    """An OpenAI-compatible service by name."""

    name: str
    """The provider's name, the ``NAME`` of ``NAME:MODEL``."""
    base_url: str | None
    """Where it is reached unless ``--base-url`` says otherwise; ``None``: it must say."""
    key_env: str | None
    """The environment variable holding its key; ``None``: it takes no key."""
    example: str
    """A model it serves, for messages."""


HOSTS: dict[str, Host] = {
    host.name: host
    for host in (
        Host(name="ollama", base_url="http://127.0.0.1:11434/v1", key_env=None, example="llama3.2"),
        Host(name="azure", base_url=None, key_env="AZURE_OPENAI_API_KEY", example="gpt-4.1-mini"),
        Host(
            name="openrouter",
            base_url="https://openrouter.ai/api/v1",
            key_env="OPENROUTER_API_KEY",
            example="openai/gpt-4.1-mini",
        ),
        Host(
            name="groq",
            base_url="https://api.groq.com/openai/v1",
            key_env="GROQ_API_KEY",
            example="llama-3.3-70b-versatile",
        ),
        Host(
            name="together",
            base_url="https://api.together.xyz/v1",
            key_env="TOGETHER_API_KEY",
            example="meta-llama/Llama-3.3-70B-Instruct-Turbo",
        ),
    )
}
"""Every named host, by provider name."""

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class HostedModel:
    """A model on a named host: the ``openai`` model under the host's name and prices.

    Args:
        host: the host's provider name (``groq``).
        model: the model the host knows (``llama-3.3-70b-versatile``).
        inner: the Chat Completions model that makes the calls.
        free: its calls cost 0 (a server on this machine); else they are priced by
            ``host`` and ``model``.
    """

    streams = True
    """Answers can arrive piece by piece (``ModelRequest.on_text`` asks for it)."""

    def __init__(self, host: str, model: str, inner: OpenAIModel, *, free: bool = False) -> None:
        self._host = host
        self._model = model
        self._inner = inner
        self._free = free

    @property
    def name(self) -> str:
        """The model string, ``HOST:MODEL``."""
        return f"{self._host}:{self._model}"

    @property
    def base_url(self) -> str | None:
        """The server it calls."""
        return self._inner.base_url

    def __repr__(self) -> str:
        return f"HostedModel({self.name!r}, base_url={self.base_url!r})"

    def estimate_cost(self, tokens_in: int) -> float | None:
        """What sending ``tokens_in`` prompt tokens costs; ``None`` when the price is unknown."""
        return self._cost(tokens_in, 0)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer one request through the host, priced under its name.

        Raises:
            ModelTimeoutError: an attempt took longer than the timeout.
            ModelError: the host refused the call or kept failing (``llm_error:<kind>``).
        """
        try:
            response = await self._inner.complete(request)
        except ModelTimeoutError as exc:
            raise ModelTimeoutError(self._retold(str(exc))) from None
        except ModelError as exc:
            raise ModelError(exc.kind, self._retold(str(exc))) from None
        cost = self._cost(response.tokens_in, response.tokens_out)
        return dataclasses.replace(response, cost_usd=cost)

    def _cost(self, tokens_in: int, tokens_out: int) -> float | None:
        if self._free:
            return 0.0
        return prices.cost_usd(self._host, self._model, tokens_in, tokens_out)

    def _retold(self, message: str) -> str:
        """The ``openai`` model's message as this host's: its name, its key variable."""
        message = message.replace(self._inner.name, self.name)
        key_env = HOSTS[self._host].key_env if self._host in HOSTS else None
        return message.replace("OPENAI_API_KEY", key_env or "the host's key")


def hosted(host: Host, name: str, connection: Connection) -> HostedModel:
    """The model ``name`` on ``host``, connected as ``connection`` says over its defaults.

    Raises:
        ConfigError: no model is named, the host's URL or key is not set.
    """
    from taskdecomp.models.openai import openai_model
    from taskdecomp.settings import load_openai_settings

    if not name:
        raise ConfigError(f"the {host.name} provider needs a model: '{host.name}:{host.example}'")
    base_url = connection.base_url or _default_url(host)
    key_env = connection.api_key_env or host.key_env
    given = dataclasses.replace(connection, base_url=base_url, api_key_env=key_env)
    settings = load_openai_settings().model_copy(update={"api_key": None, "base_url": None})
    inner = openai_model(name, settings=settings, connection=given)
    free = host.name == "ollama" and urlsplit(base_url).hostname in _LOOPBACK
    return HostedModel(host.name, name, inner, free=free)


def _default_url(host: Host) -> str:
    if host.name == "ollama":
        return _ollama_url(os.environ.get("OLLAMA_HOST", ""))
    if host.name == "azure":
        return _azure_url(os.environ.get("AZURE_OPENAI_ENDPOINT", ""))
    assert host.base_url is not None  # every other host has one
    return host.base_url


def _ollama_url(ollama_host: str) -> str:
    """The OpenAI-compatible API of the server ``OLLAMA_HOST`` names (as Ollama reads it)."""
    if not ollama_host.strip():
        return HOSTS["ollama"].base_url or ""
    where = ollama_host.strip().rstrip("/")
    if "://" not in where:
        where = f"http://{where}"
    if urlsplit(where).port is None and where.count(":") < 2:
        where = f"{where}:11434"
    return f"{where}/v1"


def _azure_url(endpoint: str) -> str:
    """The v1 API under an Azure OpenAI resource's endpoint.

    Raises:
        ConfigError: no endpoint is set.
    """
    endpoint = endpoint.strip().rstrip("/")
    if not endpoint:
        raise ConfigError(
            "the azure provider needs its resource: export "
            "AZURE_OPENAI_ENDPOINT='https://RESOURCE.openai.azure.com' or give --base-url"
        )
    return endpoint if endpoint.endswith("/openai/v1") else f"{endpoint}/openai/v1"


@provider(connects=True)
def ollama(name: str, connection: Connection) -> HostedModel:
    """``ollama:MODEL``: an Ollama server (``OLLAMA_HOST``, default this machine)."""
    return hosted(HOSTS["ollama"], name, connection)


@provider(connects=True)
def azure(name: str, connection: Connection) -> HostedModel:
    """``azure:DEPLOYMENT``: Azure OpenAI's v1 API (``AZURE_OPENAI_ENDPOINT``)."""
    return hosted(HOSTS["azure"], name, connection)


@provider(connects=True)
def openrouter(name: str, connection: Connection) -> HostedModel:
    """``openrouter:VENDOR/MODEL``: OpenRouter (``OPENROUTER_API_KEY``)."""
    return hosted(HOSTS["openrouter"], name, connection)


@provider(connects=True)
def groq(name: str, connection: Connection) -> HostedModel:
    """``groq:MODEL``: GroqCloud (``GROQ_API_KEY``)."""
    return hosted(HOSTS["groq"], name, connection)


@provider(connects=True)
def together(name: str, connection: Connection) -> HostedModel:
    """``together:VENDOR/MODEL``: Together AI (``TOGETHER_API_KEY``)."""
    return hosted(HOSTS["together"], name, connection)
