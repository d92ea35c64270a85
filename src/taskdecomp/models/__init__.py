"""Model providers, found by name through one registry.

A model string is ``provider:rest`` (``scripted:plan.json``) or a bare ``provider``
(``local``). Built-in providers register here the same way third-party ones do, through the
``taskdecomp.models`` entry-point group: the entry point's name is the provider and its
object a factory taking the part after the colon.

Built in: ``scripted:PATH`` (:mod:`~taskdecomp.models.scripted`), ``openai[:MODEL]``
(:mod:`~taskdecomp.models.openai`, any OpenAI-compatible server) and ``local[:PATH.gguf]``
(:mod:`~taskdecomp.models.local`, the embedded model; needs the ``local`` extra). The SDKs
are imported only when their provider is used, and the provider modules when their names
are first used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from taskdecomp.errors import ModelNotFoundError
from taskdecomp.models.base import Message, Model, ModelRequest, ModelResponse, estimate_tokens

if TYPE_CHECKING:
    from taskdecomp.models.local import LocalModel
    from taskdecomp.models.openai import OpenAIModel, RetryPolicy
    from taskdecomp.models.scripted import ScriptedModel

__all__ = [
    "LocalModel",
    "Message",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "OpenAIModel",
    "RetryPolicy",
    "ScriptedModel",
    "estimate_tokens",
    "register_provider",
    "resolve_model",
]

_LAZY = {
    "LocalModel": "taskdecomp.models.local",
    "OpenAIModel": "taskdecomp.models.openai",
    "RetryPolicy": "taskdecomp.models.openai",
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


ProviderFactory = Callable[[str], Model]
"""Builds a model from the part of the model string after ``provider:``."""

_PROVIDERS: dict[str, ProviderFactory] = {}


def register_provider(name: str, factory: ProviderFactory) -> None:
    """Make ``name:...`` model strings resolve through ``factory``."""
    _PROVIDERS[name] = factory


def _scripted(rest: str) -> Model:
    from taskdecomp.models.scripted import ScriptedModel

    if not rest:
        raise ModelNotFoundError("the scripted model needs a file: 'scripted:PATH'")
    return ScriptedModel.from_file(rest)


def _openai(rest: str) -> Model:
    from taskdecomp.models.openai import openai_model

    return openai_model(rest)


def _local(rest: str) -> Model:
    from taskdecomp.models.local import LocalModel

    return LocalModel(rest or None)


register_provider("scripted", _scripted)
register_provider("openai", _openai)
register_provider("local", _local)


def _providers() -> dict[str, ProviderFactory]:
    from importlib.metadata import entry_points

    found = dict(_PROVIDERS)
    for entry in entry_points(group="taskdecomp.models"):
        found.setdefault(entry.name, entry.load())
    return found


def resolve_model(spec: str | Model) -> Model:
    """Turn a model string into a model; a model object is returned as is.

    Raises:
        ModelNotFoundError: the provider is unknown or cannot build the model.
    """
    if not isinstance(spec, str):
        return spec
    provider, _, rest = spec.partition(":")
    providers = _providers()
    factory = providers.get(provider)
    if factory is None:
        known = ", ".join(sorted(providers))
        raise ModelNotFoundError(
            f"unknown model provider {provider!r} in {spec!r}; known providers: {known}"
        )
    return factory(rest)
