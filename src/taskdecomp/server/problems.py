"""Errors as ``application/problem+json`` (RFC 9457), never with a stack trace.

:class:`Problem` is what the service raises on purpose; taskdecomp's own errors map to a
status by their class (:func:`status_of`); anything else is a 500 whose body says only
that the server failed (the traceback goes to the server's log).
"""

from __future__ import annotations

import json
import logging
from http import HTTPStatus
from typing import Any

from taskdecomp.errors import (
    ConfigError,
    CorruptRecordError,
    LeaseLostError,
    RunLeasedError,
    RunNotFoundError,
    StoreError,
    TaskdecompError,
    TreeNotFoundError,
)

logger = logging.getLogger(__name__)

MEDIA_TYPE = "application/problem+json"


class Problem(Exception):
    """An HTTP error with a one-line detail.

    Args:
        status: the HTTP status.
        detail: what went wrong and how to fix it.
        headers: extra response headers (``WWW-Authenticate``).
    """

    def __init__(self, status: int, detail: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers or {}


def status_of(exc: TaskdecompError) -> int:
    """The HTTP status of one of taskdecomp's errors."""
    if isinstance(exc, RunNotFoundError | TreeNotFoundError):
        return 404
    if isinstance(exc, CorruptRecordError):
        return 500
    if isinstance(exc, RunLeasedError | LeaseLostError):
        return 409
    if isinstance(exc, StoreError):
        return 503
    if isinstance(exc, ConfigError):
        return 409
    return 500


def detail_of(exc: TaskdecompError) -> str:
    """What a client is told of one of taskdecomp's errors.

    A missing run and an unreachable store say so without the store's name: the CLI's
    messages name it (a file path on the server, a database URL), a client has no use for it.
    """
    if isinstance(exc, RunNotFoundError):
        named = f" {exc.run_id!r}" if exc.run_id is not None else " with this id"
        return f"no run{named}; GET /runs lists the stored runs"
    if isinstance(exc, StoreError) and status_of(exc) == 503:
        return "the run store cannot be reached now; try again shortly"
    return str(exc)


def body(status: int, detail: str, **extra: Any) -> bytes:
    """The problem document for ``status``."""
    try:
        title = HTTPStatus(status).phrase
    except ValueError:
        title = "Error"
    document = {"type": "about:blank", "title": title, "status": status, "detail": one_line(detail)}
    document.update(extra)
    return json.dumps(document, ensure_ascii=True).encode("ascii")


def one_line(text: str, limit: int = 2000) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
