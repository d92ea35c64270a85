"""Whether spans carry content (prompts, arguments, observations), and how they carry it.

Content is off by default: spans then hold names, ids, counts and outcomes only. The
command line's ``--trace-content`` (or ``TASKDECOMP_TRACE_CONTENT=1``) turns it on for
the process; a library user calls :func:`trace_content`. Even then every value passes the
run's redactor first (:mod:`taskdecomp.redact`): a secret never reaches a span.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from taskdecomp.redact import Redactor

MAX_CHARS = 8_000
"""The longest content attribute; longer values are cut, and say so."""

_on = False


def trace_content(on: bool = True) -> None:
    """Put prompts, arguments and observations into spans (``False``: leave them out)."""
    global _on
    _on = on


def tracing_content() -> bool:
    """Whether spans carry content."""
    return _on


def text(value: Any, redactor: Redactor | None) -> str:
    """``value`` as an attribute: JSON (strings as they are), secrets replaced, cut short.

    Secrets are replaced in the value before it is written as JSON (which would escape a
    quote, a backslash or a non-ASCII character in one), then in the text, as they are and
    as JSON escapes them (a prompt may hold a JSON text already).
    """
    secrets = redactor if redactor is not None else Redactor.from_environ()
    clean = secrets.value(value)
    raw = (
        clean
        if isinstance(clean, str)
        else json.dumps(clean, default=str, sort_keys=True, ensure_ascii=False)
    )
    shown = _escaped(secrets).text(raw) if secrets else raw
    if len(shown) > MAX_CHARS:
        return f"{shown[:MAX_CHARS]}... [{len(shown) - MAX_CHARS} more characters]"
    return shown


@functools.lru_cache(maxsize=8)
def _escaped(secrets: Redactor) -> Redactor:
    """A redactor of ``secrets``' values, as they are and as a JSON string writes them."""
    forms = [
        form
        for secret in secrets.secrets
        for form in (secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1])
    ]
    return Redactor.of(forms)
