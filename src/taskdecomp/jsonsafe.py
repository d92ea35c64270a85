"""Strict JSON, both ways: the one place that turns values into JSON text and model text back.

JSON (RFC 8259) has no ``NaN`` and no infinity, but Python's :mod:`json` writes them as
``NaN``/``Infinity`` and reads them back, and it reads a number too large for a float
(``1e400``) as ``inf``. Everything taskdecomp prints as JSON or stores goes through
:func:`dumps`, which refuses such values with :class:`~taskdecomp.errors.StrictJSONError`
naming where the value is; :func:`loads` refuses them in text. :func:`check_strict` and
:func:`is_strict_json` ask the same question without keeping the text, and
:func:`check_finite` looks for NaN and infinity in any value (pydantic models and
dataclasses included) before it is turned into JSON.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from taskdecomp.errors import StrictJSONError

HINT = "JSON has no NaN or infinity; use a finite number, null or a string"
"""How to fix a value with a non-finite number, ending every such message."""


def dumps(value: Any, **kwargs: Any) -> str:
    """:func:`json.dumps` that only ever writes strict JSON.

    Args:
        value: the value to write.
        **kwargs: any other :func:`json.dumps` argument (``indent``, ``ensure_ascii``, ...);
            ``allow_nan`` is always ``False``.

    Raises:
        StrictJSONError: ``value`` holds a NaN or an infinity, or is not JSON at all (a set,
            an object without ``default``, a cycle, an integer too long to write).
    """
    kwargs["allow_nan"] = False
    try:
        return json.dumps(value, **kwargs)
    except (ValueError, TypeError, RecursionError) as exc:
        where = non_finite_path(value)
        if where is not None:
            raise StrictJSONError(f"{where}; {HINT}") from exc
        raise StrictJSONError(f"not JSON: {exc}") from exc


def _refuse(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _compact_encoder() -> Callable[[Any], str]:
    """The compact strict encoder, calling the C encoder directly.

    The same text as ``json.JSONEncoder(ensure_ascii=True, separators=(",", ":"),
    allow_nan=False).encode``, without the Python layers around it (about 15% of the time of a
    small value). A fresh ``markers`` dict per call keeps cycle detection and keeps one call
    from seeing another's (a cycle must not be left to the recursion limit: on Python 3.11
    a raised limit lets the C encoder overflow the stack).
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # an interpreter without the C accelerator
        return json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode
    # default, string encoder, indent, separators, sort_keys, skipkeys, allow_nan
    rest = (_refuse, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, False)
    return lambda value: "".join(make({}, *rest)(value, 0))


_COMPACT = _compact_encoder()


def compact(value: Any) -> str:
    """``dumps(value, ensure_ascii=True, separators=(",", ":"))``, straight to the C encoder.

    Raises:
        StrictJSONError: as :func:`dumps`.
    """
    try:
        return _COMPACT(value)
    except (ValueError, TypeError, RecursionError):
        return dumps(value, ensure_ascii=True, separators=(",", ":"))  # raises, saying why


def loads(text: str | bytes, **kwargs: Any) -> Any:
    """:func:`json.loads` that refuses ``NaN``, ``Infinity`` and numbers beyond a float.

    Args:
        text: the JSON text.
        **kwargs: any other :func:`json.loads` argument (``object_pairs_hook``, ...).

    Raises:
        StrictJSONError: the text holds a non-finite number.
        ValueError: the text is not JSON (:class:`json.JSONDecodeError`).
    """
    return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float, **kwargs)


def check_strict(value: Any) -> None:
    """Raise if ``value`` has no strict JSON form (what :func:`dumps` would refuse).

    Raises:
        StrictJSONError: as :func:`dumps`.
    """
    dumps(value)


def check_finite(value: Any) -> None:
    """Raise if a NaN or an infinity is anywhere inside ``value`` (see :func:`non_finite_path`).

    Raises:
        StrictJSONError: saying where the value is.
    """
    where = non_finite_path(value)
    if where is not None:
        raise StrictJSONError(f"{where}; {HINT}")


def is_strict_json(value: Any) -> bool:
    """Whether :func:`dumps` writes ``value`` (it holds JSON values only, all finite)."""
    try:
        check_strict(value)
    except StrictJSONError:
        return False
    return True


def non_finite_path(value: Any) -> str | None:
    """Where the first NaN or infinity inside ``value`` is, in words, or ``None``.

    Walks dicts, lists, tuples, sets, pydantic models and dataclass instances (iteratively
    and each container once, so any depth and any cycle are fine); the place is a JSON
    Pointer, e.g. ``value at '/steps/0/args/x' is inf``. Pydantic writes some NaNs inside a
    model as ``null`` when it makes JSON, so a tool's result is walked as the tool returned it.
    """
    stack: list[tuple[Any, str]] = [(value, "")]
    seen: set[int] = set()
    while stack:
        item, pointer = stack.pop()
        if _non_finite(item):
            return f"value at {pointer!r} is {item!r}" if pointer else f"value is {item!r}"
        if id(item) in seen:
            continue
        pairs = _members(item)
        if pairs is None:
            continue
        seen.add(id(item))
        for key, _ in pairs:
            if _non_finite(key):
                return f"object at {pointer or '/'!r} has the key {key!r}"
        stack.extend((child, f"{pointer}/{_escape(key)}") for key, child in reversed(pairs))
    return None


def _members(item: object) -> list[tuple[object, Any]] | None:
    """The (key, value) pairs of a container, or ``None`` for anything else."""
    if isinstance(item, dict):
        return list(item.items())
    if isinstance(item, list | tuple | set | frozenset):
        return list(enumerate(item))
    if isinstance(item, BaseModel):
        return list(iter(item))  # fields and extras
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return [(f.name, getattr(item, f.name)) for f in dataclasses.fields(item)]
    return None


def _non_finite(item: object) -> bool:
    return isinstance(item, float) and not math.isfinite(item)


def _escape(key: object) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def _refuse_constant(name: str) -> Any:
    raise StrictJSONError(f"non-finite number {name}; {HINT}")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise StrictJSONError(f"non-finite number {shown} (beyond a float's range); {HINT}")
    return number
