"""The toolset the worker tests register: every call is written to a call log.

``SCALE_CALLS`` names the log, shared by every worker process of a test. Each call writes
a ``start`` line as it begins and an ``end`` line as it returns, with the tool, the step's
idempotency key (``<run id>:<step id>``), the worker's process id and the time. Every tool
takes the key, whatever its side effects, so the log says which run and step a call was.
"""

from __future__ import annotations

import json
import os
import signal
import time

from taskdecomp import tool


def _note(event: str, tool_name: str, key: str | None) -> None:
    line = {"event": event, "tool": tool_name, "key": key, "pid": os.getpid(), "t": time.time()}
    fd = os.open(os.environ["SCALE_CALLS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())  # one write: lines never interleave
    finally:
        os.close(fd)


def _call(tool_name: str, n: int, ms: int, key: str | None) -> int:
    _note("start", tool_name, key)
    time.sleep(ms / 1000)
    _note("end", tool_name, key)
    return n


@tool(side_effects="read_only")
def look(n: int, ms: int = 100, idempotency_key: str | None = None) -> int:
    """Read something; it takes ``ms`` milliseconds."""
    return _call("look", n, ms, idempotency_key)


@tool(side_effects="idempotent")
def put(n: int, ms: int = 100, idempotency_key: str | None = None) -> int:
    """Write something once per idempotency key; it takes ``ms`` milliseconds."""
    return _call("put", n, ms, idempotency_key)


@tool(side_effects="unsafe")
def charge(n: int, ms: int = 100, idempotency_key: str | None = None) -> int:
    """Do something that must happen at most once; it takes ``ms`` milliseconds."""
    return _call("charge", n, ms, idempotency_key)


@tool(side_effects="read_only")
def crash(n: int, ms: int = 100, idempotency_key: str | None = None) -> int:
    """Kill the worker process that calls it (SIGKILL) after ``ms`` milliseconds, every time."""
    _note("start", "crash", idempotency_key)
    time.sleep(ms / 1000)
    os.kill(os.getpid(), signal.SIGKILL)
    return n


TOOLS = [look, put, charge, crash]
