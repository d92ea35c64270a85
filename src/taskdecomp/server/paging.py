"""The cursors of the paged lists: where a list's next page starts, opaque to clients.

A cursor is URL-safe base64 of a small JSON array: a tag naming its list (``r`` runs,
``p`` plans), then the keyset position of the last item the page held. A cursor that does
not decode, or that belongs to another list, is refused with 422; it is never guessed at.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Any

from taskdecomp.server.problems import Problem
from taskdecomp.store.listing import RunKey

_LARGEST_ID = 2**63 - 1
"""No stored id is larger (SQLite's ``INTEGER``)."""


def run_cursor(key: RunKey | None) -> str | None:
    """The cursor of the run list's position ``key`` (``None``: no next page)."""
    return None if key is None else _encode(["r", key.started_at, key.id])


def run_key(cursor: str | None) -> RunKey | None:
    """The position a run-list cursor names (``None`` for the first page).

    Raises:
        Problem: 422 for a cursor this server did not give for ``GET /runs``.
    """
    if cursor is None:
        return None
    match _decode(cursor, "GET /runs"):
        case ["r", int() | float() as started_at, str() as key] if (
            not isinstance(started_at, bool)
            and math.isfinite(started_at)
            and key.isascii()
            and key.isprintable()  # no NUL: PostgreSQL text cannot hold one
        ):
            return RunKey(started_at=float(started_at), id=key)
    raise _refused("GET /runs")


def plan_cursor(plan_id: int | None) -> str | None:
    """The cursor of the plan list after plan ``plan_id`` (``None``: no next page)."""
    return None if plan_id is None else _encode(["p", plan_id])


def plan_key(cursor: str | None) -> int | None:
    """The plan id a plan-list cursor names (``None`` for the first page).

    Raises:
        Problem: 422 for a cursor this server did not give for ``GET /plans``.
    """
    if cursor is None:
        return None
    match _decode(cursor, "GET /plans"):
        case ["p", int() as plan_id] if not isinstance(plan_id, bool) and (
            1 <= plan_id <= _LARGEST_ID
        ):
            return plan_id
    raise _refused("GET /plans")


def _encode(value: list[Any]) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return base64.urlsafe_b64encode(text.encode("ascii")).decode("ascii").rstrip("=")


def _decode(cursor: str, route: str) -> Any:
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
        return json.loads(raw.decode("ascii"), parse_constant=_no_constant)
    except (ValueError, binascii.Error):  # UnicodeError and JSONDecodeError are ValueErrors
        raise _refused(route) from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a cursor value")


def _refused(route: str) -> Problem:
    return Problem(
        422,
        f"query.cursor: not a cursor {route} gave; pass the next_cursor of the previous page "
        "unchanged, or leave cursor out for the first page",
    )
