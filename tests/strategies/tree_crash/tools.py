"""Tree-crash toolset: every call is written to a ledger file before it returns.

``TREE_CRASH_LEDGER`` names the ledger (one JSON line per call: tool, key, idempotency
key, process id). ``TREE_CRASH_AT=tool:<key>`` makes the process kill itself (SIGKILL)
inside the call with that key, after its effect is on the ledger and before it returns. A
key that starts with ``fail`` makes the call raise (a tool error) once it is on the ledger.
"""

from __future__ import annotations

import json
import os
import signal

from taskdecomp import tool


def _call(name: str, key: str, idempotency_key: str | None = None) -> dict[str, str]:
    line = json.dumps({"tool": name, "key": key, "idem": idempotency_key, "pid": os.getpid()})
    with open(os.environ["TREE_CRASH_LEDGER"], "a", encoding="utf-8") as ledger:
        ledger.write(line + "\n")
        ledger.flush()
        os.fsync(ledger.fileno())
    if os.environ.get("TREE_CRASH_AT") == f"tool:{key}":
        os.kill(os.getpid(), signal.SIGKILL)
    if key.startswith("fail"):
        raise RuntimeError(f"{name} {key!r} failed")
    return {"done": key}


@tool(side_effects="read_only")
def look(key: str) -> dict[str, str]:
    """Read something."""
    return _call("look", key)


@tool(side_effects="idempotent")
def put(key: str, idempotency_key: str | None = None) -> dict[str, str]:
    """Write something, once per idempotency key."""
    return _call("put", key, idempotency_key)


@tool(side_effects="unsafe")
def charge(key: str) -> dict[str, str]:
    """Do something that must happen at most once."""
    return _call("charge", key)


TOOLS = [look, put, charge]
