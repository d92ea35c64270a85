"""Giving the allocator's free memory back to the system once a burst of runs is over.

A finished run's Python objects are freed at once (nothing of it stays in the service), but
glibc's ``malloc`` keeps the pages it freed in its arenas (one per thread that allocated,
up to eight per core) for the next allocation, so the process's RSS stays near its peak
after a burst. ``malloc_trim(0)`` gives the free pages of every arena back. Where the C
library has no ``malloc_trim`` (musl, macOS, Windows), :func:`trim` does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)

TRIM_AFTER_RUNS = 16
"""Runs that end before an idle server trims: a burst, not every lone run."""


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    function = getattr(libc, "malloc_trim", None)
    if function is None:
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return function  # type: ignore[no-any-return]  # ctypes functions are untyped


_MALLOC_TRIM = _malloc_trim()


def trim() -> bool:
    """Give the allocator's free pages back to the system; whether any were."""
    if _MALLOC_TRIM is None:
        return False
    return bool(_MALLOC_TRIM(0))


class Trimmer:
    """Trims once the runs of a burst have ended and none is left to run.

    Args:
        after: runs that must end before an idle moment trims.
    """

    def __init__(self, after: int = TRIM_AFTER_RUNS) -> None:
        self.after = after
        self.trims = 0
        """How many times it said to trim."""
        self._ended = 0

    def ended(self, *, idle: bool) -> bool:
        """A run ended; whether to trim now (``idle``: nothing runs or waits any more)."""
        self._ended += 1
        if not idle or self._ended < self.after:
            return False
        self._ended = 0
        self.trims += 1
        return True
