"""Admission of new runs: a bounded line in front of a bounded number of executions.

``POST /runs`` stores a run as ``queued`` and hands it here. At most ``max_running`` runs
execute at once; at most ``max_queued`` more wait, first come first served; a run beyond
both is refused before anything is stored (429, with a ``Retry-After`` estimated from how
long runs have been taking). This module only counts and orders: it does no I/O, and is
changed from the event loop's thread alone (:meth:`Admission.position` may be asked from
another).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass

from taskdecomp.run import RunId
from taskdecomp.tools import Toolset

_RETRY_BOUNDS = (1, 300)
"""The fewest and most seconds a ``Retry-After`` asks a client to wait."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Waiting:
    """A stored run that waits for a slot, with the names to continue it by."""

    run_id: RunId
    toolset: Toolset
    model: str
    """The operator's model string."""


class Full(Exception):
    """No room for another run; ``retry_after`` says when to try again, in seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"no room for another run; retry after {retry_after}s")
        self.retry_after = retry_after


class Admission:
    """The runs waiting for a slot, in order, and the runs holding one.

    Args:
        max_running: runs that execute at once.
        max_queued: runs that may wait beyond those.
    """

    def __init__(self, *, max_running: int, max_queued: int) -> None:
        self.max_running = max_running
        self.max_queued = max_queued
        self._waiting: OrderedDict[RunId, Waiting] = OrderedDict()
        self._changing = threading.Lock()
        """Held while the line changes or is walked: a run view reads a place from a worker
        thread while the loop adds and withdraws runs."""
        self._running: set[RunId] = set()
        self._reserved = 0
        self._mean_seconds = 1.0
        """A moving mean of how long a run holds its slot."""

    @property
    def waiting(self) -> int:
        """Runs waiting for a slot."""
        return len(self._waiting)

    @property
    def running(self) -> int:
        """Runs holding a slot."""
        return len(self._running)

    def reserve(self) -> None:
        """Hold room for a run about to be stored; :meth:`add` or :meth:`unreserve` it.

        Raises:
            Full: every slot and every place in the line is taken.
        """
        taken = len(self._running) + len(self._waiting) + self._reserved
        if taken >= self.max_running + self.max_queued:
            raise Full(self.retry_after())
        self._reserved += 1

    def unreserve(self) -> None:
        """Give back room held by :meth:`reserve` for a run that was not stored."""
        self._reserved -= 1

    def add(self, run: Waiting, *, reserved: bool = True) -> None:
        """Put a stored run at the end of the line (into room :meth:`reserve` held)."""
        if reserved:
            self._reserved -= 1
        with self._changing:
            self._waiting[run.run_id] = run

    def next(self) -> Waiting | None:
        """The first waiting run, now holding a slot; ``None`` when none is free or waits."""
        if len(self._running) >= self.max_running or not self._waiting:
            return None
        with self._changing:
            _run_id, run = self._waiting.popitem(last=False)
        self._running.add(run.run_id)
        return run

    def done(self, run_id: RunId, seconds: float) -> None:
        """``run_id`` gave its slot back after holding it ``seconds``."""
        if run_id in self._running:
            self._running.discard(run_id)
            self._mean_seconds += (max(seconds, 0.0) - self._mean_seconds) * 0.2

    def withdraw(self, run_id: RunId) -> Waiting | None:
        """Take ``run_id`` out of the line (it will not start here); ``None`` if not in it."""
        with self._changing:
            return self._waiting.pop(run_id, None)

    def holds(self, run_id: RunId) -> bool:
        """Whether ``run_id`` waits in the line."""
        return run_id in self._waiting

    def position(self, run_id: RunId) -> int | None:
        """``run_id``'s place in the line, 1 for the next to start; ``None`` if not in it."""
        with self._changing:  # walking the line is not one step: the collector may run
            if run_id not in self._waiting:  # Python code (and let the loop go on) within it
                return None
            line = tuple(self._waiting)
        return line.index(run_id) + 1

    def clear(self) -> list[Waiting]:
        """Empty the line (the server stops); the runs that were in it."""
        with self._changing:
            runs = list(self._waiting.values())
            self._waiting.clear()
        return runs

    def retry_after(self) -> int:
        """Seconds until a place is likely free: the line's turn at the runs' mean length."""
        turns = (len(self._waiting) + 1) / max(self.max_running, 1)
        low, high = _RETRY_BOUNDS
        return min(high, max(low, math.ceil(turns * self._mean_seconds)))
