"""Crash-harness toolset: every call is written to a ledger file before it returns.

``CRASH_LEDGER`` names the ledger; ``CRASH_AT`` (``after_intent:<n>`` or
``after_effect:<n>``) makes the process kill itself inside the tool of step ``n``;
``CRASH_DELAY`` is how long each tool takes, so random kills land anywhere.
"""

from __future__ import annotations

import json
import os
import signal
import time

from taskdecomp import tool


def _maybe_die(point: str, n: int) -> None:
    if os.environ.get("CRASH_AT") == f"{point}:{n}":
        os.kill(os.getpid(), signal.SIGKILL)


def _call(name: str, n: int, key: str | None) -> dict[str, object]:
    _maybe_die("after_intent", n)
    time.sleep(float(os.environ.get("CRASH_DELAY", "0")))
    line = json.dumps({"tool": name, "n": n, "key": key, "pid": os.getpid()})
    with open(os.environ["CRASH_LEDGER"], "a", encoding="utf-8") as ledger:
        ledger.write(line + "\n")
        ledger.flush()
        os.fsync(ledger.fileno())
    _maybe_die("after_effect", n)
    return {"tool": name, "n": n}


@tool(side_effects="read_only")
def look(n: int) -> dict[str, object]:
    """Read something."""
    return _call("look", n, None)


@tool(side_effects="idempotent")
def put(n: int, idempotency_key: str | None = None) -> dict[str, object]:
    """Write something, once per idempotency key."""
    return _call("put", n, idempotency_key)


@tool(side_effects="unsafe")
def charge(n: int) -> dict[str, object]:
    """Do something that must happen at most once."""
    return _call("charge", n, None)


TOOLS = [look, put, charge]
