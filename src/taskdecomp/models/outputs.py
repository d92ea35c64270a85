"""How a provider asks for structured output, and how it reads an answer asked for in prose.

Four modes, best first:

- ``native``: a JSON schema the server enforces (OpenAI's ``json_schema`` response format,
  Gemini's ``response_schema``).
- ``tool``: one forced tool call whose arguments are the answer (Anthropic's ``tool_choice``,
  OpenAI-compatible ``tool_choice``, Gemini's function calling).
- ``json``: JSON mode (any JSON value), with the schema in the prompt.
- ``prompt``: no response format at all: the schema is in the prompt, and the answer may sit
  in one code fence or follow prose; :func:`extract_json` takes the first complete JSON value.

A provider starts from the mode the user chose (``--output-mode``) or its own best, falls
down :data:`MODES` when the server says a mode is unsupported (:func:`refuses`; each mode
tried at most once, ending at ``prompt``), and remembers the mode that worked after such a
fall for the rest of the process (:class:`ModeMemory`). Whatever the mode, the answer then
passes the same policy boundary.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Awaitable, Callable, Hashable, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeVar, get_args

from taskdecomp.errors import ConfigError

T = TypeVar("T")

OutputMode = Literal["native", "tool", "json", "prompt"]
"""A way of asking for structured output."""

MODES: tuple[OutputMode, ...] = get_args(OutputMode)
"""Every mode, best first: the order a provider falls back in."""

ANSWER_TOOL = "answer"
"""The name of the one tool a ``tool``-mode request forces."""

REFUSAL_WORDS: Mapping[OutputMode, tuple[str, ...]] = {
    "native": (
        "responseformat", "jsonschema", "responseschema", "schema", "outputconfig",
        "outputformat", "structuredoutput", "mimetype", "jsonmode",
    ),
    "tool": ("tool", "function"),
    "json": ("jsonobject", "responseformat", "schema", "mimetype", "jsonmode"),
    "prompt": (),
}  # fmt: skip
"""What each mode's request uses, as a refusal names it (lower case, letters only):
``response_format``, ``tool_choice``, ``responseMimeType``, ``output_config``..."""

_REFUSAL_STATUS = frozenset({400, 422})


def output_mode(value: str) -> OutputMode:
    """``value`` as an output mode.

    Raises:
        ConfigError: it names none.
    """
    if value not in MODES:
        raise ConfigError(f"unknown output mode {value!r}: pick one of {', '.join(MODES)}")
    return value


def fallbacks(first: OutputMode, supported: Sequence[OutputMode] = MODES) -> tuple[OutputMode, ...]:
    """The modes to try, in order, starting at ``first``: the supported ones from there down.

    ``prompt`` always ends the list, so a server with no JSON mode and no tools still works.
    """
    start = MODES.index(first)
    chosen = [mode for mode in MODES[start:] if mode in supported]
    if "prompt" not in chosen:
        chosen.append("prompt")
    return tuple(chosen)


def refuses(mode: OutputMode, status: int, message: str) -> bool:
    """Whether a failed call is the server refusing ``mode``, not the request.

    A 400 or 422 whose message names what the mode uses, or a 5xx that names the
    ``response_format`` the mode sent (llama-cpp-python's server answers one it does not
    know with 500; any other 5xx is a failing server, retried in the same mode). Any other
    failure, such as a 400 for a prompt over the context length or a content filter, is the
    request's own: no other mode would fare better.
    """
    said = re.sub(r"[^a-z]", "", message.lower())
    if status >= 500:
        return "responseformat" in said and "responseformat" in REFUSAL_WORDS[mode]
    return status in _REFUSAL_STATUS and any(word in said for word in REFUSAL_WORDS[mode])


class Refused(Exception):
    """A call's server refused the output mode it was sent in (:func:`refuses` said so).

    Args:
        ordinary: what the call raises when no mode is left to fall to (the failure's
            error, or its ``Retry``).
    """

    def __init__(self, ordinary: Exception) -> None:
        super().__init__(str(ordinary))
        self.ordinary = ordinary


async def in_modes(
    send: Callable[[OutputMode], Awaitable[T]],
    first: OutputMode,
    modes: Sequence[OutputMode],
    key: Hashable,
) -> T:
    """``send(mode)`` from ``first`` on down ``modes``, at once, while it raises :class:`Refused`.

    Each mode is tried at most once; the mode reached by such a fall is remembered for
    ``key`` (:data:`MEMORY`). When ``modes`` has none left, the refusal's ``ordinary``
    failure is raised.
    """
    mode, fell = first, False
    while True:
        try:
            answer = await send(mode)
        except Refused as refused:
            following = modes[modes.index(mode) + 1 :]
            if not following:
                raise refused.ordinary from None
            mode, fell = following[0], True
            continue
        if fell:
            MEMORY.remember(key, mode)
        return answer


class ModeMemory:
    """The mode each server last answered a schema request in, for this process.

    Keyed by whatever names a server and model (provider, base URL, model). Safe to use
    from any thread.
    """

    def __init__(self) -> None:
        self._modes: dict[Hashable, OutputMode] = {}
        self._lock = threading.Lock()

    def first(self, key: Hashable, chosen: OutputMode) -> OutputMode:
        """The mode to start from: ``chosen``, or a later one this server is known to need."""
        with self._lock:
            known = self._modes.get(key, chosen)
        return max(known, chosen, key=MODES.index)

    def remember(self, key: Hashable, mode: OutputMode) -> None:
        """Say that ``mode`` worked for ``key`` after the modes before it were refused.

        A provider calls it only for a call that fell back: a mode a caller chose is not a
        fact about the server, so it never lowers where the next caller starts.
        """
        with self._lock:
            self._modes[key] = mode

    def forget(self) -> None:
        """Forget every server (tests)."""
        with self._lock:
            self._modes.clear()


MEMORY = ModeMemory()
"""The process's memory of working modes, shared by every provider."""


def schema_instructions(schema: dict[str, Any]) -> str:
    """What ``json`` and ``prompt`` modes add to the system prompt: the schema, stated."""
    return "Answer with one JSON value only, no prose, matching this JSON schema:\n" + json.dumps(
        schema, ensure_ascii=True, separators=(",", ":")
    )


def extract_json(text: str, schema: Mapping[str, Any] | None = None) -> str:
    """The JSON value an answer in prose holds, as written; ``text`` itself when none is.

    The value may sit in a code fence (the first fence holding one wins) or follow prose;
    outside fences, the first complete value of the type ``schema`` asks for at its root
    (an object for a plan) with the keys it requires, else the first complete value, so a
    ``[1]`` or ``{}`` in the prose before the answer is passed over. The policy boundary
    then parses the returned text strictly; an answer with no JSON value at all is refused
    there (``invalid_plan:non_json``), with the text as the model wrote it.
    """
    for fenced in _FENCE.finditer(text):
        inside = next(_values(fenced.group(1)), None)
        if inside is not None:
            return inside[1]
    first: str | None = None
    for value, written in _values(text):
        if _fits(value, schema or {}):
            return written
        first = first or written
    return first if first is not None else text


def _fits(value: Any, schema: Mapping[str, Any]) -> bool:
    """Whether ``value`` looks like the answer: the schema's root type, its required keys."""
    wanted = _ROOTS.get(str(schema.get("type")))
    if wanted is not None and not isinstance(value, wanted):
        return False
    required = schema.get("required", ())
    return not isinstance(value, dict) or all(key in value for key in required)


_FENCE = re.compile(r"```[ \t]*(?:json)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_ROOTS: Mapping[str, type] = {"object": dict, "array": list}
"""Python types of a schema's root ``type``, for telling the answer from stray values."""


def _values(text: str) -> Iterator[tuple[Any, str]]:
    """Every complete JSON object or array in ``text`` that no earlier one holds, in order.

    A value nested past Python's limit ends the search with the rest of the text, which the
    strict parse then refuses.
    """
    decoder = json.JSONDecoder()
    index = 0
    while True:
        starts = [at for at in (text.find("{", index), text.find("[", index)) if at >= 0]
        if not starts:
            return
        start = min(starts)
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            index = start + 1
            continue
        except RecursionError:
            yield None, text[start:]
            return
        yield value, text[start:end]
        index = end
