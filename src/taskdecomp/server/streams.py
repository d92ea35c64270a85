"""Server-sent event streams of runs and plans: the messages and the response.

A run's stream sends its stored events in order, each with its per-run sequence number as
the SSE ``id``; a client that reconnects with ``Last-Event-ID: N`` gets event ``N + 1`` on,
so it misses nothing and sees nothing twice, whichever process wrote the events and however
often the server restarted meanwhile. Once the run has ended (``ok`` or ``stopped``) and
every event is sent, the stream sends ``end`` with the run's status and the sequence
number of its last event, and closes; a paused run's stream stays open for what follows its
approval. Its events come from the run's shared reader (:mod:`.hub`).

A plan's stream sends a ``node`` event for every node of the tree, in the order they were
written (the node id is the SSE ``id``), ``removed`` when nodes disappear (an overwrite),
and ``decomposition`` when a decomposition of the plan starts or ends. It reads the tree
off the event loop, again quickly while it changes, backing off to ``poll_seconds`` while
nothing happens.

Both end when the server shuts down.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from taskdecomp.errors import TreeNotFoundError
from taskdecomp.server.plans import PlanService
from taskdecomp.server.problems import Problem
from taskdecomp.tree import PlanNode, PlanTree, PlanTreeId

MAX_CURSOR = 2**63 - 1
"""The largest ``Last-Event-ID`` or ``?after=``: sequence numbers are 64-bit integers."""

FIRST_WAIT = 0.05
"""Seconds between reads while events flow; doubled while nothing comes, up to the limit."""

PING_SECONDS = 15.0
"""A comment line this often keeps proxies from closing an idle stream."""

PING = b": ping\n\n"

HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def frame(event: str, data: Any, *, event_id: int | None = None) -> bytes:
    """One SSE message; the data is one line of ASCII JSON."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    return f"{head}event: {event}\ndata: {text}\n\n".encode("ascii")


def last_event_id(header: str | None, query: int | None) -> int:
    """Where a stream starts: after ``Last-Event-ID`` (a reconnect), else ``?after=``, else 0.

    Raises:
        Problem: 400 when the header is not a whole number >= 0; 422 when it is above
            :data:`MAX_CURSOR`.
    """
    if header is None or not header.strip():
        return query or 0
    text = header.strip()
    if not text.isascii() or not text.isdigit():
        raise Problem(400, f"Last-Event-ID {header[:40]!r} is not a whole number >= 0")
    if len(text) > len(str(MAX_CURSOR)) or int(text) > MAX_CURSOR:
        raise Problem(
            422, f"Last-Event-ID {text[:40]!r} is above {MAX_CURSOR}, the largest event id"
        )
    return int(text)


class EventStream(StreamingResponse):
    """A ``text/event-stream`` response that ``close`` follows however it ends.

    ``cut``, when given, is handed a function that cuts the response at once (a stream
    dropped because its client stopped reading, even while a write to it waits).
    """

    def __init__(
        self,
        content: AsyncIterator[bytes],
        *,
        close: Callable[[], None],
        cut: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        super().__init__(content, media_type="text/event-stream", headers=HEADERS)
        self._content = content
        self._close = close
        self._cut = cut

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the stream until it ends, its client leaves or it is cut; then ``close``."""
        try:
            with anyio.CancelScope() as scope_:
                if self._cut is not None:
                    self._cut(scope_.cancel)
                await super().__call__(scope, receive, send)
        finally:
            self._close()
            aclose: Callable[[], Awaitable[None]] | None = getattr(self._content, "aclose", None)
            if aclose is not None:
                await aclose()


class _Pacer:
    """Waits between two reads of a plan's tree.

    Short while it changes, doubling up to ``limit`` while nothing happens; the server
    shutting down ends the wait at once.
    """

    def __init__(self, closing: asyncio.Event, limit: float) -> None:
        self.closing = closing
        self.limit = max(limit, FIRST_WAIT)
        self.wait = FIRST_WAIT
        self.pinged = time.monotonic()

    def reset(self) -> None:
        self.wait = FIRST_WAIT

    async def pause(self) -> bool:
        """Wait; ``False`` once the server shuts down."""
        try:
            await asyncio.wait_for(self.closing.wait(), timeout=self.wait)
        except TimeoutError:
            self.wait = min(self.wait * 2, self.limit)
        return not self.closing.is_set()

    def ping_due(self) -> bool:
        now = time.monotonic()
        if now - self.pinged < PING_SECONDS:
            return False
        self.pinged = now
        return True


Read = Callable[..., Awaitable[Any]]
"""Runs a blocking call off the event loop: ``await read(function, *args)``."""


async def plan_events(
    plans: PlanService, plan_id: int, after: int, closing: asyncio.Event, read: Read
) -> AsyncIterator[bytes]:
    """The SSE stream of plan ``plan_id``: nodes with an id above ``after``, then changes."""
    pacer = _Pacer(closing, plans.config.poll_seconds)
    state = _TreeState(after)
    versions: dict[int, int] = {}
    while True:
        jobs = _job_changes(plans, plan_id, versions)  # before the tree: a job that ended
        try:  # is sent after the nodes it wrote
            tree = await read(plans.repository.get_plan_tree, PlanTreeId(plan_id))
        except TreeNotFoundError:
            yield frame("end", {"reason": "the plan no longer exists"})
            return
        messages = [*state.changes(tree), *jobs]
        for message in messages:
            yield message
            await asyncio.sleep(0)
        if messages:
            pacer.reset()
        if pacer.ping_due():
            yield PING
        if not await pacer.pause():
            return


class _TreeState:
    """What one plan stream has sent: every node it knows, as it looked when sent.

    Node ids grow, but a store may hand an id out again once the highest nodes were
    deleted (an overwrite on SQLite); a known id whose node looks different is sent as
    ``removed`` and then as a new ``node``.
    """

    def __init__(self, after: int) -> None:
        self.after = after
        self.sent: dict[int, tuple[Any, ...]] = {}
        self.started = False

    def changes(self, tree: PlanTree) -> list[bytes]:
        now: dict[int, tuple[Any, ...]] = {node.id: _look(node) for node in tree.nodes}
        if not self.started:  # nodes up to Last-Event-ID: the client has them
            self.started = True
            self.sent = {i: look for i, look in now.items() if i <= self.after}
        gone = sorted(i for i, look in self.sent.items() if now.get(i) != look)
        messages = [frame("removed", {"node_ids": gone})] if gone else []
        for node_id in gone:
            del self.sent[node_id]
        depths = {node.id: depth for node, depth in tree.walk()}
        for node in sorted(tree.nodes, key=lambda n: n.id):
            if node.id not in self.sent:
                self.sent[node.id] = now[node.id]
                data = node.to_dict() | {"depth": depths.get(node.id, 0)}
                messages.append(frame("node", data, event_id=node.id))
        return messages


def _look(node: PlanNode) -> tuple[Any, ...]:
    return (node.parent_id, node.position, node.name, node.instruction, node.leaf)


def _job_changes(plans: PlanService, plan_id: int, versions: dict[int, int]) -> list[bytes]:
    messages = []
    for job in plans.jobs(plan_id):
        if versions.get(job.id) != job.version:
            versions[job.id] = job.version
            messages.append(frame("decomposition", job.to_dict()))
    return messages
