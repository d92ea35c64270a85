"""The built-in model providers, as registered (``taskdecomp.models`` entry points).

Each imports its model's module only when it builds one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from taskdecomp.errors import ModelNotFoundError
from taskdecomp.models.base import Model
from taskdecomp.models.connection import Connection

F = TypeVar("F", bound=Callable[..., Model])


def provider(
    *, connects: bool, names_files: bool = False, output_modes: bool | None = None
) -> Callable[[F], F]:
    """Mark a function of ``(name, connection)`` as a provider.

    Args:
        connects: it reaches a server, so a connection (``--base-url``...) applies to it.
        names_files: what follows ``provider:`` is a path on this machine, so a queued run
            may not name it (a worker registers it under a name instead).
        output_modes: ``--output-mode`` applies to it (``connection.output_mode``); default:
            when it connects. A provider that connects nowhere is given only the mode.
    """

    def mark(function: F) -> F:
        function.connects = connects  # type: ignore[attr-defined]  # the Provider protocol
        function.names_files = names_files  # type: ignore[attr-defined]
        function.output_modes = connects if output_modes is None else output_modes  # type: ignore[attr-defined]
        return function

    return mark


@provider(connects=False, names_files=True)
def scripted(name: str, connection: Connection) -> Model:
    """``scripted:PATH``: answers from a script file."""
    from taskdecomp.models.scripted import ScriptedModel

    if not name:
        raise ModelNotFoundError("the scripted model needs a file: 'scripted:PATH'")
    return ScriptedModel.from_file(name)


@provider(connects=True)
def openai(name: str, connection: Connection) -> Model:
    """``openai[:MODEL]``: OpenAI, or any server that speaks its Chat Completions API."""
    from taskdecomp.models.openai import openai_model

    return openai_model(name, connection=connection)


@provider(connects=False, names_files=True, output_modes=True)
def local(name: str, connection: Connection) -> Model:
    """``local[:PATH.gguf]``: the embedded model (the ``local`` extra).

    ``--output-mode`` (``connection.output_mode``, where the connection has one) applies.
    """
    from taskdecomp.models.local import LocalModel
    from taskdecomp.models.outputs import OutputMode

    mode: OutputMode = connection.output_mode or "native"
    return LocalModel(name or None, output_mode=mode)
