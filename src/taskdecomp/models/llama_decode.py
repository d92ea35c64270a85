"""Greedy decoding under a grammar for llama.cpp models, reusing evaluated prompt prefixes.

:func:`decode` writes the answer a ``llama_cpp.Llama`` gives at temperature 0 with
``create_chat_completion(messages, grammar=..., temperature=0)``, token for token, at a
fraction of the grammar's cost, except that text which begins to repeat itself is ended
(:data:`REPEAT_WINDOW`) and a JSON string still open near the token limit is closed
(:data:`CLOSE_RESERVE`); ``close_repeats=False`` leaves both:

- **Lazy grammar.** llama-cpp-python asks the grammar about every token of the vocabulary
  (49k for SmolLM2) before each pick. Here the grammar first judges only the model's top
  choice; if it refuses, the tokens at least as likely as the 256th; only if it refuses
  them all, the whole vocabulary. Greedy decoding takes the likeliest token the grammar
  allows (ties to the lowest id, as llama.cpp's greedy sampler does), and each step finds
  exactly that token. End-of-generation tokens are allowed once the grammar is complete.
- **Prefix reuse.** The prompt is rendered with the model's own chat template (the GGUF
  ``tokenizer.chat_template``, as ``create_chat_completion`` renders it). Only the part
  after the longest token prefix the context already holds is evaluated, so a second
  request with the same system prompt skips it. A :class:`PrefixCache` also keeps the
  llama.cpp state of each conversation prefix (every message but the last), in memory
  and, given a directory, on disk for other processes.

Both this module and ``create_chat_completion`` keep their bookkeeping in the ``Llama``
object (``input_ids``, ``n_tokens``), so either can follow the other on one model. A model
whose chat format is not a GGUF template (:func:`can_decode` says) must use
``create_chat_completion``. Import this module only where ``llama-cpp-python`` is installed.
"""

from __future__ import annotations

import codecs
import ctypes
import functools
import hashlib
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import llama_cpp
import numpy as np
import numpy.typing as npt
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

Finish = Literal["stop", "length", "cancelled", "repeated"]
"""Why decoding ended: an end token or a complete grammar, ``max_tokens``, the stop event, or
free text that began to repeat itself (see :data:`REPEAT_WINDOW`)."""

SHORTLIST = 256
"""How many of the likeliest tokens the grammar judges before it judges the whole vocabulary."""

REPEAT_WINDOW = 24
"""Text repeats itself when its last this many tokens already came, in that order, before.

Greedy decoding of a small model falls into loops (the same paragraph again and again until
``max_tokens``). Free text is cut where the repeat began, at the end of the sentence before
it (its ``tokens`` keep what was written up to the repeat). Under a grammar, only runs
without a double quote count (text inside one JSON string: a plan's steps legitimately share
runs of keys and punctuation); once one repeats, the string is closed at the first token
that closes it, and the answer goes on under its grammar."""

CLOSE_RESERVE = 16
"""Under a grammar, this many tokens before the limit a JSON string still open is closed at
the first token that closes it, so that an answer whose last string runs on (a response
that counts up without repeating itself) still ends as valid JSON, its string cut."""

ROOT = b"root"
"""The grammar's start rule."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Decoded:
    """One answer and what it cost."""

    text: str
    """The answer (no end token)."""
    tokens: tuple[int, ...]
    """The answer's tokens (no end token)."""
    tokens_in: int
    """Tokens in the prompt."""
    tokens_reused: int
    """Prompt tokens not evaluated: held by the context or restored from a :class:`PrefixCache`."""
    prompt_seconds: float
    """Rendering, tokenizing and evaluating the prompt."""
    decode_seconds: float
    """Writing the answer."""
    grammar_seconds: float
    """Part of ``decode_seconds`` spent asking the grammar."""
    vocabulary_scans: int
    """Tokens for which the grammar had to judge the whole vocabulary."""
    finish_reason: Finish
    closed_repeat: bool = False
    """A string of a grammar answer began to repeat itself and was closed early."""
    closed_at_limit: bool = False
    """A string still open near ``max_tokens`` was closed (see :data:`CLOSE_RESERVE`)."""

    @property
    def tokens_out(self) -> int:
        """Tokens in the answer."""
        return len(self.tokens)


def can_decode(llama: Any) -> bool:
    """Whether :func:`decode` can render prompts for ``llama`` as ``create_chat_completion`` does.

    It can when the model's chat format is a template from its GGUF metadata; a named
    format (``chatml``, ...) or a custom chat handler is left to ``create_chat_completion``.
    """
    return _template_key(llama) in llama.metadata


def prompt_tokens(llama: Any, messages: Sequence[Mapping[str, Any]]) -> list[int]:
    """The prompt ``create_chat_completion`` would evaluate for ``messages``, as tokens.

    Raises:
        ValueError: the model's chat format is not a GGUF template (see :func:`can_decode`).
    """
    return _tokenize(llama, _formatter(llama, generation=True), messages)


def prefix_length(
    llama: Any,
    messages: Sequence[Mapping[str, Any]],
    tokens: Sequence[int],
    *,
    shared_text: str | None = None,
) -> int:
    """How many of ``tokens`` (the prompt of ``messages``) requests of one kind share.

    That is all messages but the last (system prompt, earlier turns), and with
    ``shared_text`` also the start of the last message's content up to it (a tool catalog
    written before the goal).
    """
    head = list(messages[:-1])
    if shared_text and messages and str(messages[-1].get("content", "")).startswith(shared_text):
        head.append({**messages[-1], "content": shared_text})
    if not head:
        return 0
    rendered = _tokenize(llama, _formatter(llama, generation=False), head)
    return min(_common_prefix(rendered, tokens), len(tokens) - 1)


def decode(
    llama: Any,
    messages: Sequence[Mapping[str, Any]],
    *,
    grammar: str | None = None,
    max_tokens: int | None = None,
    stop: threading.Event | None = None,
    on_piece: Callable[[str], None] | None = None,
    cache: PrefixCache | None = None,
    shared_text: str | None = None,
    close_repeats: bool = True,
) -> Decoded:
    """Answer ``messages`` greedily, under ``grammar`` if one is given.

    Args:
        llama: a ``llama_cpp.Llama``; the caller makes sure one call uses it at a time.
        messages: chat messages (``role``, ``content``).
        grammar: GBNF text with a ``root`` rule, or ``None`` for free text.
        max_tokens: cap on the answer; ``None`` or 0: as much as the context leaves.
        stop: checked before each token; once set, the answer ends (``cancelled``).
        on_piece: hears the answer's text as it grows, never a split UTF-8 character.
        cache: saved states of prompt prefixes to restore instead of evaluating them.
        shared_text: the start of the last message that requests of this kind share (see
            :func:`prefix_length`); its state is saved with the earlier messages'.
        close_repeats: end text that repeats itself (see :data:`REPEAT_WINDOW`) and close a
            JSON string still open near the limit (:data:`CLOSE_RESERVE`); ``False`` writes
            exactly what ``create_chat_completion`` writes.

    Returns:
        The answer, its token counts and timings.

    Raises:
        ValueError: the prompt does not fit the context window, the grammar does not
            parse, or the chat format is not a GGUF template.
        RuntimeError: llama.cpp failed to evaluate.
    """
    started = time.perf_counter()
    tokens = prompt_tokens(llama, messages)
    n_ctx = int(llama.n_ctx())
    if len(tokens) >= n_ctx:
        raise ValueError(f"Requested tokens ({len(tokens)}) exceed context window of {n_ctx}")
    budget = n_ctx - len(tokens)
    limit = min(max_tokens, budget) if max_tokens and max_tokens > 0 else budget
    with _Grammar(llama, grammar) as checker:  # parsed before the prompt is evaluated
        shared = (
            prefix_length(llama, messages, tokens, shared_text=shared_text)
            if cache is not None
            else 0
        )
        reused = _evaluate_prompt(llama, tokens, shared, cache)
        prompted = time.perf_counter()
        writer = _Writer(llama, checker, on_piece, watch=close_repeats)
        finish = writer.run(limit, stop)
    return Decoded(
        text=writer.text,
        tokens=tuple(writer.tokens),
        tokens_in=len(tokens),
        tokens_reused=reused,
        prompt_seconds=prompted - started,
        decode_seconds=time.perf_counter() - prompted,
        grammar_seconds=checker.seconds,
        vocabulary_scans=checker.scans,
        finish_reason=finish,
        closed_repeat=writer.closed_repeat,
        closed_at_limit=writer.closed_at_limit,
    )


# -- the prompt -------------------------------------------------------------------------


def _template_key(llama: Any) -> str:
    # Llama names the templates of its metadata "chat_template.<name>", the default one
    # "chat_template.default" for "tokenizer.chat_template".
    name = llama.chat_format
    if llama.chat_handler is not None or not str(name).startswith("chat_template."):
        return ""
    if name == "chat_template.default":
        return "tokenizer.chat_template"
    return f"tokenizer.{name}"


def _formatter(llama: Any, *, generation: bool) -> Jinja2ChatFormatter:
    key = _template_key(llama)
    template = llama.metadata.get(key) if key else None
    if template is None:
        raise ValueError(
            f"chat format {llama.chat_format!r} is not a GGUF chat template; "
            "use create_chat_completion for this model"
        )
    model = llama._model  # the special tokens' text, as Llama gives its own formatter
    eos, bos = llama.token_eos(), llama.token_bos()
    eos_text = model.token_get_text(eos) if eos != -1 else ""
    bos_text = model.token_get_text(bos) if bos != -1 else ""
    return _compiled(template, eos_text, bos_text, generation)


@functools.lru_cache(maxsize=16)
def _compiled(template: str, eos: str, bos: str, generation: bool) -> Jinja2ChatFormatter:
    return Jinja2ChatFormatter(
        template=template, eos_token=eos, bos_token=bos, add_generation_prompt=generation
    )


def _tokenize(
    llama: Any, formatter: Jinja2ChatFormatter, messages: Sequence[Mapping[str, Any]]
) -> list[int]:
    rendered = formatter(messages=[dict(message) for message in messages])  # type: ignore[misc]
    tokens: list[int] = llama.tokenize(
        rendered.prompt.encode("utf-8"), add_bos=not rendered.added_special, special=True
    )
    return tokens


def _common_prefix(held: Sequence[int] | npt.NDArray[np.intc], tokens: Sequence[int]) -> int:
    n = min(len(held), len(tokens))
    differs = np.flatnonzero(np.asarray(held[:n]) != np.asarray(tokens[:n]))
    return int(differs[0]) if len(differs) else n


def _evaluate_prompt(llama: Any, tokens: list[int], shared: int, cache: PrefixCache | None) -> int:
    """Evaluate what the context does not hold of ``tokens``; return how many it held."""
    held = _common_prefix(llama._input_ids, tokens)
    cached = False
    if cache is not None and shared > 0:
        if held < shared:
            cached = cache.restore(llama, tokens[:shared])
            held = _common_prefix(llama._input_ids, tokens)  # a failed load empties it
        else:
            cached = cache.holds(llama, tokens[:shared])
    keep = min(held, len(tokens) - 1)  # at least one token evaluated: its logits come next
    if cache is not None and shared > 0 and not cached:
        keep = min(keep, shared)  # the state saved must hold exactly the prefix
    keep = _truncate(llama, keep)
    if cache is not None and keep < shared:
        llama.eval(tokens[keep:shared])
        cache.save(llama, tokens[:shared])
        llama.eval(tokens[shared:])
    else:
        llama.eval(tokens[keep:])
    return keep


def _truncate(llama: Any, keep: int) -> int:
    """Drop what the context holds past ``keep`` tokens; return how many it keeps."""
    if keep == 0 or not llama._ctx.kv_cache_seq_rm(-1, keep, -1):
        llama.reset()  # a model whose memory cannot be cut (recurrent) starts over
        llama._ctx.kv_cache_clear()
        return 0
    llama.n_tokens = keep
    return keep


# -- the answer -------------------------------------------------------------------------


class _Grammar:
    """Asks llama.cpp's grammar sampler about a few tokens at a time."""

    def __init__(self, llama: Any, text: str | None) -> None:
        self.seconds = 0.0
        self.scans = 0
        self._n_vocab = int(llama.n_vocab())
        self._vocab = llama._model.vocab
        self._sampler: Any = None
        if text is None:
            return
        self._sampler = llama_cpp.llama_sampler_init_grammar(
            self._vocab, text.encode("utf-8"), ROOT
        )
        if not self._sampler:
            raise ValueError("the grammar does not parse; check its GBNF text")
        self._data = (llama_cpp.llama_token_data * self._n_vocab)()
        self._view: Any = np.ctypeslib.as_array(self._data)
        self._array = llama_cpp.llama_token_data_array(
            data=ctypes.cast(self._data, llama_cpp.llama_token_data_p),
            size=0,
            selected=-1,
            sorted=False,
        )
        self._all = np.arange(self._n_vocab, dtype=np.intc)

    def __enter__(self) -> _Grammar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._sampler:
            llama_cpp.llama_sampler_free(self._sampler)
            self._sampler = None

    @property
    def constrains(self) -> bool:
        """Whether there is a grammar (else the answer is free text)."""
        return self._sampler is not None

    def is_end(self, token: int) -> bool:
        """Whether ``token`` ends generation (the grammar allowed it only when complete)."""
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    def choose(self, logits: npt.NDArray[np.single]) -> int | None:
        """The likeliest token the grammar allows, or ``None`` when it allows none."""
        best = int(np.argmax(logits))
        if not self._sampler:
            return best
        began = time.perf_counter()
        try:
            if self._allowed(np.array([best], dtype=np.intc))[0]:
                return best
            cut = np.partition(logits, self._n_vocab - SHORTLIST)[self._n_vocab - SHORTLIST]
            found = self._best(np.flatnonzero(logits >= cut).astype(np.intc), logits)
            if found is None:
                self.scans += 1
                found = self._best(self._all, logits)
            return found
        finally:
            self.seconds += time.perf_counter() - began

    def choose_among(self, ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> int | None:
        """The likeliest of ``ids`` (ascending) the grammar allows, or ``None``."""
        if not self._sampler or not len(ids):
            return None
        began = time.perf_counter()
        try:
            return self._best(ids, logits)
        finally:
            self.seconds += time.perf_counter() - began

    def accept(self, token: int) -> None:
        """Advance the grammar past ``token``."""
        if self._sampler:
            llama_cpp.llama_sampler_accept(self._sampler, token)

    def _best(self, ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> int | None:
        """The likeliest allowed token of ``ids`` (ascending, so ties go to the lowest id)."""
        allowed = self._allowed(ids)
        if not allowed.any():
            return None
        scores = np.where(allowed, logits[ids], -np.inf)
        return int(ids[int(np.argmax(scores))])

    def _allowed(self, ids: npt.NDArray[np.intc]) -> npt.NDArray[np.bool_]:
        n = len(ids)
        self._view["id"][:n] = ids
        self._view["logit"][:n] = 0.0
        self._array.size = n
        self._array.selected = -1
        self._array.sorted = False
        llama_cpp.llama_sampler_apply(self._sampler, ctypes.byref(self._array))
        allowed: npt.NDArray[np.bool_] = np.isfinite(self._view["logit"][:n])
        return allowed


class _Writer:
    """The decoding loop: pick, accept, stream, evaluate."""

    def __init__(
        self,
        llama: Any,
        grammar: _Grammar,
        on_piece: Callable[[str], None] | None,
        *,
        watch: bool = True,
    ):
        self.tokens: list[int] = []
        self.text = ""
        self.closed_repeat = False
        self.closed_at_limit = False
        self._llama = llama
        self._watch = watch  # for text that repeats itself or runs to the limit
        self._closing = False  # close the open string at the first chance
        self._unquoted = 0  # tokens since the last one holding a double quote
        self._windows: set[tuple[int, ...]] = set()
        self._grammar = grammar
        self._on_piece = on_piece
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="ignore")
        self._piece = ctypes.create_string_buffer(256)

    def run(self, limit: int, stop: threading.Event | None) -> Finish:
        llama = self._llama
        n_vocab = int(llama.n_vocab())
        closes = self._watch and self._grammar.constrains
        close_from = limit - CLOSE_RESERVE if closes else limit + 1
        while True:
            if stop is not None and stop.is_set():
                return "cancelled"
            pointer = llama_cpp.llama_get_logits_ith(llama.ctx, -1)
            logits = np.ctypeslib.as_array(pointer, shape=(n_vocab,))
            token = self._pick(logits)
            if token is None or self._grammar.is_end(token):
                return "stop"  # llama.cpp's greedy pick among no allowed token is token 0, EOG
            self._grammar.accept(token)
            self.tokens.append(token)
            piece = self._bytes(token)
            self._emit(self._utf8.decode(piece))
            self._unquoted = 0 if b'"' in piece else self._unquoted + 1
            if self._closing and piece.startswith(b'"'):
                self._closing = False
            if self._repeats():
                if not self._grammar.constrains:
                    return "repeated"
                self._closing = self.closed_repeat = True
            if len(self.tokens) >= close_from and self._unquoted and not self.closed_at_limit:
                self._closing = self.closed_at_limit = True  # inside a string, or between keys
            if len(self.tokens) >= limit:
                self._emit(self._utf8.decode(b"", final=True))
                return "length"
            llama.eval([token])

    def _pick(self, logits: npt.NDArray[np.single]) -> int | None:
        if self._closing:
            closing = self._grammar.choose_among(_quote_starts(self._llama), logits)
            if closing is not None:
                return closing
        return self._grammar.choose(logits)

    def _repeats(self) -> bool:
        """Whether the answer's last window came before (see :data:`REPEAT_WINDOW`).

        Free text is then cut where the repeat began.
        """
        k = REPEAT_WINDOW
        if not self._watch or len(self.tokens) < k:
            return False
        if self._grammar.constrains and self._unquoted < k:
            return False  # under a grammar only text inside one string counts
        window = tuple(self.tokens[-k:])
        if window not in self._windows:
            self._windows.add(window)
            return False
        if self._grammar.constrains:
            return True
        del self.tokens[-k:]
        text = b"".join(self._bytes(token) for token in self.tokens).decode("utf-8", "ignore")
        end = max(text.rfind(mark) for mark in (".", "!", "?", "\n"))
        self.text = (text[: end + 1] if end > 0 else text).rstrip()  # a whole sentence last
        return True

    def _emit(self, piece: str) -> None:
        if piece:
            self.text += piece
            if self._on_piece is not None:
                self._on_piece(piece)

    def _bytes(self, token: int) -> bytes:
        vocab = self._llama._model.vocab
        n = llama_cpp.llama_token_to_piece(vocab, token, self._piece, len(self._piece), 0, False)
        if n < 0:  # longer than the buffer: -n is the length needed
            self._piece = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(vocab, token, self._piece, -n, 0, False)
        return self._piece.raw[:n]


_QUOTE_STARTS: weakref.WeakKeyDictionary[Any, npt.NDArray[np.intc]] = weakref.WeakKeyDictionary()


def _quote_starts(llama: Any) -> npt.NDArray[np.intc]:
    """The tokens whose text begins with a double quote, ascending; read once per model.

    Only an answer with a string to close early (repeating, or near the limit) needs them.
    """
    model = llama._model
    found = _QUOTE_STARTS.get(model)
    if found is None:
        vocab = model.vocab
        buffer = ctypes.create_string_buffer(256)
        starts = []
        for token in range(int(llama.n_vocab())):
            length = llama_cpp.llama_token_to_piece(vocab, token, buffer, 256, 0, False)
            if length > 0 and buffer.raw[:1] == b'"':
                starts.append(token)
        found = _QUOTE_STARTS[model] = np.array(starts, dtype=np.intc)
    return found


# -- saved prefixes ----------------------------------------------------------------------


class PrefixCache:
    """Saved llama.cpp states of prompt prefixes, keyed by a hash of the model and the tokens.

    Restoring a prefix's state costs milliseconds where evaluating it costs seconds. A
    state holds the prefix's KV cache (about 23 KB a token for SmolLM2-135M), so memory
    keeps the ``max_entries`` most recent; ``directory`` also keeps every state as a file
    (llama.cpp's sequence state format, which records the tokens) for other processes.
    Thread-safe; a state is saved and restored only under the caller's hold of the model.

    Args:
        directory: where states are written and read; ``None``: memory only.
        max_entries: states kept in memory.
    """

    def __init__(self, directory: str | Path | None = None, *, max_entries: int = 4) -> None:
        self._directory = Path(directory) if directory is not None else None
        self._max_entries = max_entries
        self._states: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        """Prefixes restored (from memory or disk)."""
        self.misses = 0
        """Prefixes asked for and not found."""

    def holds(self, llama: Any, tokens: Sequence[int]) -> bool:
        """Whether the state of ``tokens`` is saved (in memory, or on disk)."""
        key = _key(llama, tokens)
        with self._lock:
            if key in self._states:
                return True
        return self._directory is not None and (self._directory / f"{key}.seq").is_file()

    def restore(self, llama: Any, tokens: Sequence[int]) -> bool:
        """Put the saved state of ``tokens`` in ``llama``'s context; ``False`` if none is saved.

        On success the context holds exactly ``tokens``; on a failed load it holds nothing.
        """
        key = _key(llama, tokens)
        with self._lock:
            state = self._states.get(key)
            if state is not None:
                self._states.move_to_end(key)
        restored = self._set(llama, state) if state is not None else self._load(llama, key, tokens)
        if not restored:
            self.misses += 1
            return False
        self.hits += 1
        n = len(tokens)
        llama.input_ids[:n] = tokens
        llama.n_tokens = n
        llama._requires_eval = True  # no logits yet: the next token must be evaluated
        return True

    def save(self, llama: Any, tokens: Sequence[int]) -> None:
        """Save the state of ``llama``'s context, which holds exactly ``tokens``."""
        key = _key(llama, tokens)
        size = llama_cpp.llama_state_seq_get_size(llama.ctx, 0)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(llama.ctx, buffer, size, 0)
        if written:
            self._remember(key, bytes(buffer)[:written])
        if self._directory is not None:
            self._write(llama, key, tokens)

    def _remember(self, key: str, state: bytes) -> None:
        with self._lock:
            self._states[key] = state
            self._states.move_to_end(key)
            while len(self._states) > self._max_entries:
                self._states.popitem(last=False)

    @staticmethod
    def _set(llama: Any, state: bytes) -> bool:
        buffer = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        if llama_cpp.llama_state_seq_set_data(llama.ctx, buffer, len(state), 0):
            return True
        _truncate(llama, 0)
        return False

    def _load(self, llama: Any, key: str, tokens: Sequence[int]) -> bool:
        path = self._directory / f"{key}.seq" if self._directory is not None else None
        if path is None or not path.is_file():
            return False
        capacity = len(tokens) + 1
        found = (llama_cpp.llama_token * capacity)()
        count = ctypes.c_size_t(0)
        loaded = llama_cpp.llama_state_seq_load_file(
            llama.ctx, os.fsencode(path), 0, found, capacity, ctypes.byref(count)
        )
        if not loaded or list(found[: count.value]) != list(tokens):
            _truncate(llama, 0)  # a partial or foreign state must not stay
            return False
        size = llama_cpp.llama_state_seq_get_size(llama.ctx, 0)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(llama.ctx, buffer, size, 0)
        if written:
            self._remember(key, bytes(buffer)[:written])
        return True

    def _write(self, llama: Any, key: str, tokens: Sequence[int]) -> None:
        assert self._directory is not None
        self._directory.mkdir(parents=True, exist_ok=True)
        path = self._directory / f"{key}.seq"
        partial = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        array = (llama_cpp.llama_token * len(tokens))(*tokens)
        if llama_cpp.llama_state_seq_save_file(
            llama.ctx, os.fsencode(partial), 0, array, len(tokens)
        ):
            os.replace(partial, path)  # readers see a whole file or none
        else:
            partial.unlink(missing_ok=True)


def _key(llama: Any, tokens: Sequence[int]) -> str:
    """A hash of what makes a saved state fit: the model file, llama.cpp, the cache layout."""
    path = Path(llama.model_path)
    stat = path.stat()
    params = llama.context_params
    identity = (
        f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{llama_cpp.__version__}|"
        f"{params.type_k}|{params.type_v}|{params.flash_attn_type}|"
    )
    digest = hashlib.sha256(identity.encode())
    digest.update(np.asarray(tokens, dtype=np.int32).tobytes())
    return digest.hexdigest()[:32]
