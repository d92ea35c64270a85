"""How many event streams may be open at once: in all, and per client address.

A stream over either cap is refused with 429 and ``Retry-After`` before it starts, so a
client that opens streams in a loop (or forgets to close them) cannot starve the others.
"""

from __future__ import annotations

from collections.abc import Callable

from taskdecomp.server.problems import Problem

RETRY_AFTER_SECONDS = 5
"""What a refused stream is told to wait before it tries again."""


class StreamSlots:
    """Counts open streams and refuses one over a cap.

    Args:
        total: the most streams open at once.
        per_client: the most streams one client address holds at once.
    """

    def __init__(self, *, total: int, per_client: int) -> None:
        self.total = total
        self.per_client = per_client
        self._open: dict[str, int] = {}
        self._count = 0

    @property
    def open(self) -> int:
        """Streams open now."""
        return self._count

    def take(self, client: str) -> Callable[[], None]:
        """Count a stream of ``client``; return what gives the slot back (safe to repeat).

        Raises:
            Problem: 429 with ``Retry-After`` when either cap is reached.
        """
        if self._count >= self.total:
            raise _refused(f"the server has {self._count} event streams open, its limit")
        held = self._open.get(client, 0)
        if held >= self.per_client:
            raise _refused(
                f"client {client!r} has {held} event streams open, the limit per client; close one"
            )
        self._open[client] = held + 1
        self._count += 1
        given = [False]

        def release() -> None:
            if given[0]:
                return
            given[0] = True
            self._count -= 1
            left = self._open[client] - 1
            if left:
                self._open[client] = left
            else:
                del self._open[client]

        return release


def _refused(why: str) -> Problem:
    return Problem(
        429,
        f"{why}; retry in {RETRY_AFTER_SECONDS} s",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )
