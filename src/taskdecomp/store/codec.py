"""How values become stored text, and back, identically on every backend.

Every text and JSON column holds ASCII only. Free text (a goal, a step id, a stop reason) is
kept as the body of its JSON string literal with ``ensure_ascii``; JSON values are compact
JSON with ``ensure_ascii``. So NUL characters (which PostgreSQL refuses in ``text`` and
``jsonb``), lone surrogates (which neither backend's UTF-8 accepts) and any other code point
round-trip exactly, and SQLite and PostgreSQL store the same bytes. JSON values are strict
(:mod:`taskdecomp.jsonsafe`): a NaN or an infinity is refused, never stored as ``NaN``. Rows
written before that rule decode as they are.

A value longer than :data:`MAX_STORED_CHARS` once encoded is refused with
:class:`~taskdecomp.errors.StoreValueError` before anything is written. Stored text that
does not decode raises :class:`~taskdecomp.errors.CorruptRecordError`: a damaged row is
never guessed at.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from taskdecomp import jsonsafe
from taskdecomp.errors import CorruptRecordError, StoreValueError, StrictJSONError

MAX_STORED_CHARS = 32 * 1024 * 1024
"""Longest encoded value the store keeps (32 Mi characters), whatever the backend."""

T = TypeVar("T")


def encode_text(value: str, *, what: str) -> str:
    """Free text as ASCII: the body of its JSON string literal.

    Raises:
        StoreValueError: the encoded text is longer than :data:`MAX_STORED_CHARS`.
    """
    if value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
        return _capped(value, what)  # nothing to escape: ids, keys, names
    return _capped(json.dumps(value, ensure_ascii=True)[1:-1], what)


def encode_optional_text(value: str | None, *, what: str) -> str | None:
    """:func:`encode_text`, passing ``None`` through."""
    return None if value is None else encode_text(value, what=what)


def decode_text(raw: str, *, where: str) -> str:
    """Undo :func:`encode_text`.

    Raises:
        CorruptRecordError: ``raw`` is not text this module wrote.
    """
    try:
        value = json.loads(f'"{raw}"')
    except (ValueError, TypeError) as exc:
        raise _corrupt(where, exc) from exc
    if not isinstance(value, str):  # pragma: no cover - a JSON string literal is a str
        raise _corrupt(where, "not text")
    return value


def decode_optional_text(raw: str | None, *, where: str) -> str | None:
    """:func:`decode_text`, passing ``None`` through."""
    return None if raw is None else decode_text(raw, where=where)


def encode_json(value: Any, *, what: str) -> str:
    """A JSON value as compact, strict ASCII JSON.

    Raises:
        StoreValueError: the value is not strict JSON (a NaN or an infinity inside it, a
            set, an object) or is too long.
    """
    try:
        text = jsonsafe.compact(value)
    except StrictJSONError as exc:
        raise StoreValueError(f"{what} cannot be stored as JSON: {exc}") from exc
    return _capped(text, what)


def decode_json(raw: str | None, *, where: str) -> Any:
    """Undo :func:`encode_json`; ``None`` (SQL NULL) stays ``None``.

    Raises:
        CorruptRecordError: ``raw`` is not JSON.
    """
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except (ValueError, TypeError, RecursionError) as exc:
        raise _corrupt(where, exc) from exc


def decode_as(adapter: TypeAdapter[T], raw: str | None, *, where: str) -> T:
    """Decode JSON and validate it into a domain object with ``adapter``.

    Raises:
        CorruptRecordError: the JSON does not decode or has the wrong shape.
    """
    value = decode_json(raw, where=where)
    try:
        return adapter.validate_python(value)
    except (ValidationError, ValueError, TypeError) as exc:
        raise _corrupt(where, _first_line(str(exc))) from exc


def _capped(text: str, what: str) -> str:
    if len(text) > MAX_STORED_CHARS:
        raise StoreValueError(
            f"{what} is {len(text):,} characters once encoded, over the store's cap of "
            f"{MAX_STORED_CHARS:,}; make it smaller (a tool can return a summary or a path)"
        )
    return text


def _corrupt(where: str, problem: object) -> CorruptRecordError:
    return CorruptRecordError(
        f"stored {where} does not decode ({_first_line(str(problem))}); the row was damaged "
        "or written by something else; refusing to use it"
    )


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text
