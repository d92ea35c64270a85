"""Secrets kept out of what a run records: the values of secret environment variables.

A tool that raises with an API key in its message, returns one, or a model that repeats
one would otherwise put it in the run's events, trace, history, answer, the store and the
logs. A :class:`Redactor` knows the values of the variables that hold secrets and replaces
each by :data:`REDACTED` in text, and recursively in JSON-like values and frozen
dataclasses (events, plans, trace and history entries, results).

A variable holds a secret when its name is a provider's key variable or the service's
token (:data:`SECRET_NAMES`), was declared by a connection that reads a key from it
(:func:`declare`), or ends in one of :data:`SECRET_SUFFIXES` (``_KEY``, ``_TOKEN``,
``_SECRET``, ``_PASSWORD``; ``_KEY`` covers ``*_API_KEY`` and names such as
``AWS_SECRET_ACCESS_KEY``). Values shorter than :data:`MIN_SECRET_CHARS` are never
secrets, so ``FOO_TOKEN=1`` does not turn every ``1`` into ``[redacted]``.

The engine builds one redactor per run (:meth:`Redactor.from_environ` reads the process
environment once) and applies it where the run is recorded: the event bus before any
subscriber, the journal before the store, the result before it is returned. The command
line and ``serve`` install :class:`RedactingFilter` on the log handlers. Everything here
is the standard library only.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import operator
import os
import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

REDACTED = "[redacted]"
"""What a secret is replaced by."""

MIN_SECRET_CHARS = 8
"""Shorter values (``1``, ``true``, ``yes``) are never treated as secrets."""

SECRET_SUFFIXES = ("_KEY", "_TOKEN", "_SECRET", "_PASSWORD")
"""A variable whose name (upper-cased) ends in one of these holds a secret."""

SECRET_NAMES = frozenset({"OPENAI_API_KEY", "TASKDECOMP_API_TOKEN"})
"""Variables that always hold secrets: the built-in provider's key and the service's token."""

_declared: set[str] = set()
_declared_values: set[str] = set()
_declared_lock = threading.Lock()

T = TypeVar("T")

_ATOMS = frozenset({int, float, bool, type(None)})
"""Types that hold no text."""

MEMO_SIZE = 1024
"""How many clean frozen dataclass instances a :class:`Redactor` remembers."""

_SHAPES: dict[type, Any] = {}
"""Each type's dataclass field names and their getter (``()`` for other types), found once."""


def declare(name: str) -> None:
    """Treat variable ``name`` as a secret from now on, whatever its name says.

    A connection calls this for the variable it reads a key from (``api_key_env``), so a
    plugin's provider with a key in ``MY_LLM_CREDS`` is covered too.
    """
    with _declared_lock:
        _declared.add(name)


def declare_value(value: str) -> str:
    """Treat ``value`` as a secret from now on, wherever it was read; return it.

    A key read from ``.env`` (by the settings) is not in the process environment, so a
    redactor built from the environment would not know it: whoever reads a key calls this.
    """
    with _declared_lock:
        _declared_values.add(value)
    return value


def is_secret_name(name: str) -> bool:
    """Whether variable ``name`` holds a secret (see the module docstring)."""
    upper = name.upper()
    return upper in SECRET_NAMES or upper.endswith(SECRET_SUFFIXES) or name in _declared


@dataclass(frozen=True, slots=True)
class Redactor:
    """Replaces known secret values by :data:`REDACTED`.

    Build it with :meth:`from_environ` (or :meth:`of` for given values); an empty one
    (``Redactor()``) changes nothing and costs one check per value.

    It remembers the last :data:`MEMO_SIZE` frozen dataclass instances it made or found
    clean, so a record handed on again (a trace entry in its event, then its checkpoint,
    then the run's result) is not looked into again. Frozen records are taken to stay as
    they are, the dicts inside them included, as the engine's do.
    """

    secrets: tuple[str, ...] = ()
    """The values to replace, longest first (a secret inside another goes with it)."""
    _done: dict[int, Any] = field(default_factory=dict, compare=False, repr=False)
    """Frozen dataclass instances known to hold no secret, by id (held, so the id stays theirs)."""

    @classmethod
    def of(cls, values: Iterable[str]) -> Redactor:
        """A redactor of ``values``; blank ones, short ones and duplicates are left out."""
        kept = {
            value.strip()
            for value in values
            if len(value.strip()) >= MIN_SECRET_CHARS and value.strip() not in REDACTED
        }
        return cls(tuple(sorted(kept, key=lambda secret: (-len(secret), secret))))

    @classmethod
    def from_environ(
        cls, environ: Mapping[str, str] | None = None, *, names: Iterable[str] = ()
    ) -> Redactor:
        """A redactor of the secret variables in ``environ`` (default: the process's).

        ``names`` are treated as secret variables too. With the process's environment,
        every value given to :func:`declare_value` (a key read from ``.env``) is a secret
        too.
        """
        env = os.environ if environ is None else environ
        extra = set(names)
        with _declared_lock:  # the process's own secrets, read from elsewhere (.env)
            declared = list(_declared_values) if environ is None else []
        named = (value for name, value in env.items() if name in extra or is_secret_name(name))
        return cls.of([*named, *declared])

    def __bool__(self) -> bool:
        """Whether there is anything to redact."""
        return bool(self.secrets)

    def text(self, text: str) -> str:
        """``text`` with every secret replaced; ``text`` itself when it holds none."""
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def value(self, value: T) -> T:
        """``value`` with every secret in its strings replaced, at any depth.

        Strings, dicts and other mappings (keys too), lists, tuples and dataclass instances
        are looked into; other objects are kept as they are. What holds no secret is
        returned itself, not copied; a frozen dataclass that does is copied with the
        redacted fields (its ``__post_init__`` is not run again). A mapping that changes
        comes back as a ``dict``.
        """
        if not self.secrets:
            return value
        return self._walk(value)  # type: ignore[no-any-return]

    def _walk(self, value: Any) -> Any:
        kind = type(value)
        if kind is str:
            return self.text(value)
        if kind in _ATOMS:
            return value
        if kind is dict:
            return self._mapping(value)
        if kind is list or kind is tuple:
            return self._sequence(value, kind)
        shape = _SHAPES.get(kind)
        if shape is None:
            shape = _SHAPES.setdefault(kind, _shape(kind))
        if shape:
            return self._dataclass(value, shape)
        if isinstance(value, str):  # a str subclass (an enum member)
            clean = self.text(value)
            return value if clean is value else clean
        if isinstance(value, Mapping):
            return self._mapping(value)
        return value

    def _items(self, items: Collection[Any]) -> list[Any] | None:
        """``items`` redacted, or ``None`` when none of them holds a secret."""
        secrets = self.secrets
        out: list[Any] | None = None
        for index, old in enumerate(items):
            kind = type(old)
            if kind in _ATOMS:
                continue
            if kind is str:
                new = old
                for secret in secrets:
                    if secret in new:
                        new = new.replace(secret, REDACTED)
            else:
                new = self._walk(old)
            if new is not old:
                if out is None:
                    out = list(items)
                out[index] = new
        return out

    def _sequence(self, value: list[Any] | tuple[Any, ...], kind: type) -> Any:
        out = self._items(value)
        if out is None:
            return value
        return out if kind is list else tuple(out)

    def _mapping(self, value: Mapping[Any, Any]) -> Any:
        values = self._items(value.values())
        keys = self._items(value.keys())
        if values is None and keys is None:
            return value
        new_keys = value.keys() if keys is None else keys
        new_values = value.values() if values is None else values
        return dict(zip(new_keys, new_values, strict=True))

    def _dataclass(self, value: Any, shape: _Shape) -> Any:
        names, get, frozen = shape
        done = self._done
        if frozen and done.get(id(value)) is value:
            return value
        new = self._items(get(value))
        if new is None:
            clean = value
        else:
            clean = copy.copy(value)
            for name, item in zip(names, new, strict=True):
                object.__setattr__(clean, name, item)  # frozen: set on the fresh copy only
        if frozen:
            done[id(clean)] = clean
            if len(done) > MEMO_SIZE:
                with contextlib.suppress(LookupError, RuntimeError):  # another thread's
                    del done[next(iter(done))]
        return clean


_Shape = tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]], bool]
"""A dataclass's field names, a getter of their values, and whether it is frozen."""


def _shape(kind: type) -> _Shape | tuple[()]:
    """Dataclass ``kind``'s :data:`_Shape`; ``()`` for other types."""
    if not dataclasses.is_dataclass(kind):
        return ()
    names = tuple(f.name for f in dataclasses.fields(kind))
    if not names:
        return ()
    frozen = bool(getattr(kind, "__dataclass_params__").frozen)  # noqa: B009  # not typed
    get = operator.attrgetter(*names)
    if len(names) == 1:
        return names, lambda value: (get(value),), frozen
    return names, get, frozen


class StreamRedactor:
    """Redacts a text that arrives in pieces, a secret split between two pieces included.

    :meth:`feed` returns what is safe to show of the text so far and holds back the end of
    it that a secret begins with (it may go on in the next piece); :meth:`flush` returns
    the rest once the text is complete. Not thread-safe: a caller fed from several threads
    holds a lock around it.
    """

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._longest = max((len(secret) for secret in redactor.secrets), default=1)
        self._tail = ""

    def feed(self, piece: str) -> str:
        """The text that can be shown now, with ``piece`` added."""
        if not self._redactor:
            return piece
        text = self._redactor.text(self._tail + piece)
        cut = self._unsure(text)
        self._tail = text[cut:]
        return text[:cut]

    def _unsure(self, text: str) -> int:
        """Where the end of ``text`` that some secret begins with starts (``len``: none)."""
        for at in range(max(0, len(text) - self._longest + 1), len(text)):
            end = text[at:]
            if any(secret.startswith(end) for secret in self._redactor.secrets):
                return at
        return len(text)

    def flush(self) -> str:
        """What was held back, redacted: the text is complete."""
        rest, self._tail = self._tail, ""
        return self._redactor.text(rest)


class RedactingFilter(logging.Filter):
    """A log filter that replaces secrets in a record's message, traceback and stack.

    Install it on handlers (:func:`install_log_filter`): a handler's filter sees every
    record the handler writes, whichever logger made it. A record with nothing to redact
    passes unchanged; one with a secret in its traceback keeps the redacted text
    (``exc_text``) instead of the exception, so no handler formats the original again.
    """

    def __init__(self, redactor: Redactor | None = None) -> None:
        super().__init__()
        self.redactor = redactor if redactor is not None else Redactor.from_environ()

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact ``record`` in place; always let it through."""
        redactor = self.redactor
        if not redactor:
            return True
        try:
            message = record.getMessage()
        except Exception:  # arguments that do not fit: the handler prints both, redacted
            record.msg, record.args = redactor.value(record.msg), redactor.value(record.args)
        else:
            clean = redactor.text(message)
            if clean is not message:
                record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            text = record.exc_text or logging.Formatter().formatException(record.exc_info)
            clean = redactor.text(text)
            if clean is not text:
                record.exc_text, record.exc_info = clean, None
        elif record.exc_text:
            record.exc_text = redactor.text(record.exc_text)
        if record.stack_info:
            record.stack_info = redactor.text(record.stack_info)
        return True


def install_log_filter(redactor: Redactor | None = None) -> RedactingFilter:
    """Put one :class:`RedactingFilter` on every log handler there is now.

    The handlers of the root logger and of every logger created so far (uvicorn's, once
    its configuration is applied) and Python's last-resort handler, which writes warnings
    when no handler is configured. Calling it again replaces the filter (with the
    environment as it is then); handlers made later need :func:`add_log_filter`.
    """
    redacting = RedactingFilter(redactor)
    loggers: list[logging.Logger] = [logging.getLogger()]
    loggers += [
        logger
        for logger in logging.Logger.manager.loggerDict.values()
        if isinstance(logger, logging.Logger)
    ]
    handlers = {id(h): h for logger in loggers for h in logger.handlers}
    if logging.lastResort is not None:
        handlers[id(logging.lastResort)] = logging.lastResort
    for handler in handlers.values():
        add_log_filter(handler, redacting)
    return redacting


def add_log_filter(handler: logging.Handler, redacting: RedactingFilter | None = None) -> None:
    """Put ``redacting`` (default: a new :class:`RedactingFilter`) on ``handler``.

    A redacting filter already there is replaced, so the handler redacts once.
    """
    for old in [f for f in handler.filters if isinstance(f, RedactingFilter)]:
        handler.removeFilter(old)
    handler.addFilter(redacting if redacting is not None else RedactingFilter())
