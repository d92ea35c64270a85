"""Open files for the event streams: every open stream holds a socket, a file descriptor.

A process starts with a soft limit on descriptors (often 1024) below its hard limit;
``serve`` raises the soft limit to the hard one, then keeps the stream cap within what is
left after :data:`RESERVED` for everything else (the store, tools, requests). Past the
limit a stream would fail in the accept loop (``Too many open files``), log without end
and answer nothing; within it, the stream over the cap is answered 429.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

RESERVED = 128
"""Descriptors kept for everything but the event streams."""


@dataclass(frozen=True, slots=True)
class Room:
    """What the process may open, after :func:`make_room`."""

    limit: int
    """The soft limit on open descriptors now."""
    raised_from: int | None
    """The soft limit before, when it was raised."""

    @property
    def streams(self) -> int:
        """The most event streams that fit."""
        return max(self.limit - RESERVED, 1)


def make_room() -> Room:
    """Raise this process's soft limit on open descriptors to its hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return Room(limit=soft if soft != resource.RLIM_INFINITY else 1 << 20, raised_from=None)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (ValueError, OSError):
        return Room(limit=soft, raised_from=None)
    return Room(limit=wanted, raised_from=soft)
