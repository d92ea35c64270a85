"""A run's events as MCP progress notifications: one short line per step, node and pause.

The engine calls its subscribers synchronously, from the event loop (or, for a sync tool,
maybe a worker thread); a notification is sent asynchronously. :class:`Progress` queues
each line and one task sends them in order, each with a larger ``progress`` than the last,
as the protocol asks. A client that sent no progress token gets nothing (the SDK drops the
notifications).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType

from taskdecomp.events import (
    ApprovalRequested,
    Event,
    NodeFinished,
    NodeStarted,
    PlanCreated,
    PlanRevised,
    RunStopped,
    StepFinished,
    StepStarted,
)

logger = logging.getLogger(__name__)

Send = Callable[[float, str], Awaitable[None]]
"""Sends one notification: its progress count and its message."""


def describe(event: Event) -> str | None:
    """The progress line of ``event``, or ``None`` for events too small to report."""
    if isinstance(event, PlanCreated):
        return f"plan ready: {len(event.plan.steps)} steps"
    if isinstance(event, PlanRevised):
        return f"plan revised: {len(event.plan.steps)} steps" if event.changed else None
    if isinstance(event, StepStarted):
        return f"step {event.step_no} started: {event.step.title}"
    if isinstance(event, StepFinished):
        entry = event.entry
        how = "finished" if entry.ok else f"failed ({entry.stop_reason or entry.error or 'error'})"
        return f"step {entry.step_no} {how}: {entry.tool}"
    if isinstance(event, NodeStarted):
        return f"node {event.node_id} started: {event.name}"
    if isinstance(event, NodeFinished):
        return f"node {event.node_id} {event.status}"
    if isinstance(event, ApprovalRequested):
        return event.request.describe()
    if isinstance(event, RunStopped):
        return f"run ended: {event.result.stop_reason}"
    return None


class Progress:
    """Receives events (or plain lines) and sends them, in order, as notifications.

    Use it as an async context manager around the work; leaving it sends what is queued.

    Args:
        send: sends one notification.
    """

    def __init__(self, send: Send) -> None:
        self._send = send
        self._count = 0
        self._queue: asyncio.Queue[tuple[float, str] | None] = asyncio.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None

    def __call__(self, event: Event) -> None:
        """Queue the line of ``event``, if it has one."""
        line = describe(event)
        if line is not None:
            self.note(line)

    def note(self, line: str) -> None:
        """Queue ``line``."""
        if self._loop is None:
            return
        self._count += 1
        self._loop.call_soon_threadsafe(self._queue.put_nowait, (float(self._count), line))

    async def __aenter__(self) -> Progress:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._sending())
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._task is not None and self._loop is not None
        self._loop.call_soon_threadsafe(self._queue.put_nowait, None)
        if kind is None:
            await self._task
        else:
            self._task.cancel()
        self._loop = None

    async def _sending(self) -> None:
        while (item := await self._queue.get()) is not None:
            try:
                await self._send(*item)
            except Exception as exc:  # the client went away: the run goes on regardless
                logger.debug("progress notification not sent: %s", exc)
