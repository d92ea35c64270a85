"""Whether spans carry content (prompts, arguments, observations), and how they carry it.

Content is off by default: spans then hold names, ids, counts and outcomes only. The
command line's ``--trace-content`` (or ``TASKDECOMP_TRACE_CONTENT=1``) turns it on for
the process; a library user calls :func:`trace_content`. Even then every value passes the
run's redactor first (:mod:`taskdecomp.redact`): a secret never reaches a span.
"""

from __future__ import annotations

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
    """``value`` as an attribute: JSON (strings as they are), secrets replaced, cut short."""
    secrets = redactor if redactor is not None else Redactor.from_environ()
    raw = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
    shown = secrets.text(raw)
    if len(shown) > MAX_CHARS:
        return f"{shown[:MAX_CHARS]}... [{len(shown) - MAX_CHARS} more characters]"
    return shown
