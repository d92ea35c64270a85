"""Model providers, found by name through one registry.

A model string is ``provider:rest`` (``scripted:plan.json``) or a bare ``provider``
(``local``). Built-in providers register here the same way third-party ones do, through the
``taskdecomp.models`` entry-point group: the entry point's name is the provider and its
object a factory taking the part after the colon.

Built in: ``scripted:PATH`` (:mod:`~taskdecomp.models.scripted`), ``openai[:MODEL]``
(:mod:`~taskdecomp.models.openai`, any OpenAI-compatible server) and ``local[:PATH.gguf]``
(:mod:`~taskdecomp.models.local`, the embedded model; needs the ``local`` extra). The SDKs
are imported only when their provider is used.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points

from taskdecomp.errors import ModelNotFoundError
from taskdecomp.models.base import Message, Model, ModelRequest, ModelResponse, estimate_tokens
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

ProviderFactory = Callable[[str], Model]
"""Builds a model from the part of the model string after ``provider:``."""

_PROVIDERS: dict[str, ProviderFactory] = {}


def register_provider(name: str, factory: ProviderFactory) -> None:
    """Make ``name:...`` model strings resolve through ``factory``."""
    _PROVIDERS[name] = factory


def _scripted(rest: str) -> Model:
    if not rest:
        raise ModelNotFoundError("the scripted model needs a file: 'scripted:PATH'")
    return ScriptedModel.from_file(rest)


def _openai(rest: str) -> Model:
    from taskdecomp.models.openai import openai_model

    return openai_model(rest)


def _local(rest: str) -> Model:
    return LocalModel(rest or None)


register_provider("scripted", _scripted)
register_provider("openai", _openai)
register_provider("local", _local)


def _providers() -> dict[str, ProviderFactory]:
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
