"""Model providers, found by name through one registry.

A model string is ``provider:rest`` (``scripted:plan.json``) or a bare ``provider``
(``local``). Built-in providers register here the same way third-party ones do, through the
``taskdecomp.models`` entry-point group: the entry point's name is the provider and its
object a :class:`Provider`, given the part after the colon and a :class:`Connection` (base
URL, key variable, timeout, headers) when it connects to a server.

Built in: ``scripted:PATH`` (:mod:`~taskdecomp.models.scripted`), ``openai[:MODEL]``
(:mod:`~taskdecomp.models.openai`, any OpenAI-compatible server) and ``local[:PATH.gguf]``
(:mod:`~taskdecomp.models.local`, the embedded model; needs the ``local`` extra); the
native providers ``anthropic:MODEL`` (:mod:`~taskdecomp.models.anthropic`, the ``anthropic``
extra) and ``google:MODEL`` (:mod:`~taskdecomp.models.google`, Gemini; the ``google``
extra); and the named OpenAI-compatible hosts ``ollama:``, ``azure:``, ``openrouter:``,
``groq:`` and ``together:`` (:mod:`~taskdecomp.models.hosts`, each with its own URL and key
variable). The SDKs are imported only when their provider is used, and the provider modules
when their names are first used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

from taskdecomp.errors import ModelNotFoundError
from taskdecomp.models.base import Message, Model, ModelRequest, ModelResponse, estimate_tokens
from taskdecomp.models.connection import Connection
from taskdecomp.plugins import Registry

if TYPE_CHECKING:
    from taskdecomp.models.local import LocalModel
    from taskdecomp.models.openai import OpenAIModel
    from taskdecomp.models.retry import RetryPolicy
    from taskdecomp.models.scripted import ScriptedModel

__all__ = [
    "PROVIDERS",
    "Connection",
    "LocalModel",
    "Message",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "OpenAIModel",
    "Provider",
    "RetryPolicy",
    "ScriptedModel",
    "connects",
    "estimate_tokens",
    "names_file",
    "register_provider",
    "resolve_model",
    "takes_output_mode",
]

_LAZY = {
    "LocalModel": "taskdecomp.models.local",
    "OpenAIModel": "taskdecomp.models.openai",
    "RetryPolicy": "taskdecomp.models.retry",
    "ScriptedModel": "taskdecomp.models.scripted",
}
"""Names imported on first use: their modules need pydantic and the settings."""


def __getattr__(name: str) -> Any:
    """Import a provider's module the first time one of its names is used (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


class Provider(Protocol):
    """Builds a model from the part of a model string after ``provider:``.

    ``connects`` says whether it reaches a server, so a :class:`Connection` applies to it;
    one that does not is given an empty connection.
    """

    connects: bool
    names_files: bool
    """What follows ``provider:`` is a path on this machine (``scripted:PATH``)."""

    def __call__(self, name: str, connection: Connection) -> Model:
        """The model ``name`` names, connected as ``connection`` says."""
        ...


ProviderFactory = Callable[[str], Model]
"""The older form of a provider: the part after ``provider:`` only (it connects nowhere)."""

PROVIDERS: Registry[Provider | ProviderFactory] = Registry(
    group="taskdecomp.models",
    kind="model provider",
    builtins={
        "scripted": "taskdecomp.models.providers:scripted",
        "openai": "taskdecomp.models.providers:openai",
        "local": "taskdecomp.models.providers:local",
        "ollama": "taskdecomp.models.hosts:ollama",
        "azure": "taskdecomp.models.hosts:azure",
        "openrouter": "taskdecomp.models.hosts:openrouter",
        "groq": "taskdecomp.models.hosts:groq",
        "together": "taskdecomp.models.hosts:together",
        "google": "taskdecomp.models.google:provider",
        "anthropic": "taskdecomp.models.anthropic:provider",
    },
    missing=ModelNotFoundError,
)
"""Every model provider, by name."""


def register_provider(name: str, factory: Provider | ProviderFactory) -> None:
    """Make ``name:...`` model strings resolve through ``factory``.

    ``factory`` is a :class:`Provider`, or a function of the part after the colon.
    """
    PROVIDERS.register(name, factory)


def connects(provider: str) -> bool:
    """Whether the provider called ``provider`` reaches a server (takes a connection).

    Raises:
        ModelNotFoundError: no provider has that name.
    """
    return bool(getattr(PROVIDERS.get(provider), "connects", False))


def takes_output_mode(provider: str) -> bool:
    """Whether ``--output-mode`` applies to the provider called ``provider``.

    Raises:
        ModelNotFoundError: no provider has that name.
    """
    factory = PROVIDERS.get(provider)
    return bool(getattr(factory, "output_modes", getattr(factory, "connects", False)))


def names_file(spec: str) -> bool:
    """Whether model string ``spec`` names a file on this machine (``scripted:PATH``).

    Raises:
        ModelNotFoundError: no provider has its name.
    """
    provider, _, rest = spec.partition(":")
    return bool(rest) and bool(getattr(PROVIDERS.get(provider), "names_files", False))


def resolve_model(spec: str | Model, *, connection: Connection | None = None) -> Model:
    """Turn a model string into a model; a model object is returned as is.

    Args:
        spec: ``provider:rest`` or ``provider``, or a model.
        connection: where a provider that connects to a server connects; the others get
            only its output mode, when they take one (``local``), or nothing.

    Raises:
        ModelNotFoundError: the provider is unknown or cannot build the model.
    """
    if not isinstance(spec, str):
        return spec
    provider, _, rest = spec.partition(":")
    factory = PROVIDERS.get(provider)
    reaches = getattr(factory, "connects", None)
    if reaches is None:
        return cast(ProviderFactory, factory)(rest)
    given = connection or Connection()
    if not reaches:
        modes = getattr(factory, "output_modes", False)
        given = Connection(output_mode=given.output_mode if modes else None)
    return cast(Provider, factory)(rest, given)
