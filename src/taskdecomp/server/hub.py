"""One store reader per followed run, shared by every event stream of that run.

A :class:`StreamHub` keeps a feed for each run that some stream follows. The feed reads the
run's new events from the store (on a thread, never on the event loop) when told there are
some, frames each event once and hands the frame to every subscriber of the run. A new
subscriber first reads its own backlog, from its ``Last-Event-ID`` up to where the feed
stood when it joined, then takes the feed's frames; so each stream gets exactly the events
after its cursor, in order, once.

What wakes a feed (nothing polls a run on its own):

- the run emitting an event, or ending, in this process (:meth:`RunService.listen`);
- a commit of this process's store that stored events of the run (:meth:`SqlStore.watch`);
- on PostgreSQL, a ``NOTIFY`` from any process that stored events of the run;
- on SQLite, a poll every ``poll_seconds`` of the newest event row, which names the runs
  another process (a CLI ``run``) stored events of since the last look.

A subscriber's queue holds at most ``buffer`` frames: a client that stops reading is
dropped when it would hold one more (its response is cut; it reconnects with
``Last-Event-ID`` and loses nothing), so a slow client costs a bounded amount of memory
and never holds up the others.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from taskdecomp.errors import TaskdecompError
from taskdecomp.run import RunId
from taskdecomp.server import wakeups
from taskdecomp.server.problems import Problem
from taskdecomp.server.runs import RunService
from taskdecomp.server.slots import StreamSlots
from taskdecomp.server.streams import PING, PING_SECONDS, frame
from taskdecomp.store import SqlStore
from taskdecomp.store.reads import SequencedEvent

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

PAGE = 500
"""Most events read from the store at once."""

READ_THREADS = 4
"""Threads that read the store for the streams (feeds, backlogs, plan trees)."""

FINAL = ("ok", "stopped")

RETRY_SECONDS = (0.1, 0.5, 1.0, 2.0, 5.0)
"""How long a feed waits before reading again after a failed read (a database restart)."""


def event_frame(item: SequencedEvent) -> bytes:
    """The SSE message of a stored event; its sequence number is the SSE ``id``."""
    event = item.event
    data = {"seq": item.seq, "kind": event.kind, "at": event.at, "data": dict(event.data)}
    return frame(event.kind, data, event_id=item.seq)


class Subscription:
    """One stream's place in a run's feed: its backlog, then the feed's frames.

    Made by :meth:`StreamHub.subscribe`; :meth:`frames` is the stream's body and
    :meth:`close` (safe to repeat) leaves the feed and gives the stream's slot back.
    """

    def __init__(
        self, hub: StreamHub, feed: _Feed, *, after: int, release: Callable[[], None]
    ) -> None:
        self._hub = hub
        self._feed = feed
        self.after = after
        """The client's cursor: the stream sends the events numbered above it."""
        self.joined = feed.seq
        """Where the feed stood when the stream joined: the backlog ends there."""
        self._release = release
        self._queue: collections.deque[tuple[int, bytes | None]] = collections.deque()
        self._ready = asyncio.Event()
        self.dropped = False
        """Whether the stream was dropped for holding ``buffer`` unread frames."""
        self.on_drop: Callable[[], object] | None = None
        """Cuts the stream's response when it is dropped (set by the response)."""

    def offer(self, seq: int, data: bytes) -> None:
        """Queue event ``seq``'s frame; drop the stream when its queue is full."""
        if len(self._queue) >= self._hub.buffer:
            self.drop()
            return
        self._queue.append((seq, data))
        self._ready.set()

    def finish(self, data: bytes | None) -> None:
        """Queue the stream's last frame (``None``: end it without one), bound or not."""
        self._queue.append((0, data))
        self._ready.set()

    def drop(self) -> None:
        """Leave the feed and cut the response: the client stopped reading."""
        if self.dropped:
            return
        self.dropped = True
        self._queue.clear()
        self._feed.leave(self)
        logger.warning(
            "dropped an event stream of run %s: its client left %d messages unread; "
            "it can reconnect with Last-Event-ID",
            self._feed.run_id,
            self._hub.buffer,
        )
        if self.on_drop is not None:
            self.on_drop()

    def close(self) -> None:
        """Leave the feed and give the stream's slot back (safe to repeat)."""
        self._feed.leave(self)
        self._release()

    async def frames(self) -> AsyncIterator[bytes]:
        """The stream's messages: the backlog from the store, then what the feed hands on."""
        sent = self.after
        run_id = RunId(self._feed.run_id)
        while sent < self.joined:
            limit = min(PAGE, self.joined - sent)
            try:
                page = await self._hub.read(
                    self._hub.store.load_event_page, run_id, after=sent, limit=limit
                )
            except TaskdecompError as exc:  # the client reconnects from where it is
                logger.warning("reading run %s's events failed (%s)", run_id, exc)
                return
            if not page.events:
                break
            for item in page.events:
                yield event_frame(item)
                sent = item.seq
        while not self.dropped:
            if not self._queue:
                self._ready.clear()
                try:
                    await asyncio.wait_for(self._ready.wait(), PING_SECONDS)
                except TimeoutError:
                    yield PING
                    continue
            seq, data = self._queue.popleft()
            if data is None:  # the server shuts down
                return
            if not seq:  # the end
                yield data
                return
            if seq > sent:  # the backlog may have covered it
                sent = seq
                yield data


class _Feed:
    """The reader of one run's events and the streams it hands them to."""

    def __init__(self, hub: StreamHub, run_id: str) -> None:
        self.run_id = run_id
        self.subscribers: set[Subscription] = set()
        self.joining = 0
        """Streams waiting for the feed's first read, which sets :attr:`seq`."""
        self.seq = 0
        """The sequence number of the last event read (handed on)."""
        self.ready = asyncio.Event()
        self.error: BaseException | None = None
        """Why the first read failed (no such run)."""
        self.end: bytes | None = None
        """The ``end`` message, once the run has ended and every event is handed on."""
        self.bell = hub.runs.listen(run_id)
        """Set whenever the run may have new events; the feed reads once it is."""

    def leave(self, subscription: Subscription) -> None:
        if subscription in self.subscribers:
            self.subscribers.discard(subscription)
            if not self.subscribers:
                self.bell.set()  # the last one gone: the feed stops

    def hand_on(self, item: SequencedEvent) -> None:
        data = event_frame(item)
        self.seq = item.seq
        for subscription in list(self.subscribers):
            subscription.offer(item.seq, data)

    def finish(self, data: bytes | None) -> None:
        for subscription in list(self.subscribers):
            subscription.finish(data)
        self.subscribers.clear()


class StreamHub:
    """The feeds of the runs this server's event streams follow, and the streams' caps.

    Args:
        store: the run store.
        runs: the runs this process executes (their bells, whether one is active).
        slots: the caps on open streams (plan streams count too).
        poll_seconds: how often SQLite is asked for events another process stored.
        buffer: the most frames a stream may leave unread before it is dropped.
    """

    def __init__(
        self,
        store: SqlStore,
        runs: RunService,
        *,
        slots: StreamSlots,
        poll_seconds: float,
        buffer: int,
    ) -> None:
        self.store = store
        self.runs = runs
        self.slots = slots
        self.poll_seconds = poll_seconds
        self.buffer = buffer
        self._feeds: dict[str, _Feed] = {}
        self._pool = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="taskdecomp-streams")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._unwatch: Callable[[], None] | None = None
        self.closing = False

    @property
    def feeds(self) -> int:
        """Runs whose events a reader follows now."""
        return len(self._feeds)

    async def read(self, call: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``call(*args, **kwargs)`` on one of the hub's threads: the loop goes on meanwhile."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(call, *args, **kwargs))

    async def subscribe(self, run_id: str, after: int, *, client: str) -> Subscription:
        """A stream of run ``run_id``'s events numbered above ``after``, for ``client``.

        Raises:
            Problem: 429 when the caps on open streams are reached; 503 while the server
                shuts down.
            RunNotFoundError: no run has this id (404).
        """
        if self.closing:
            raise Problem(503, "the server is shutting down; reconnect when it is back")
        release = self.slots.take(client)
        try:
            self._start()
            feed = self._feeds.get(run_id)
            if feed is None:
                feed = self._feeds[run_id] = _Feed(self, run_id)
                self._spawn(self._follow(feed))
            feed.joining += 1
            try:
                await feed.ready.wait()
            finally:
                feed.joining -= 1
            if feed.error is not None:
                raise feed.error
        except BaseException:
            release()
            raise
        subscription = Subscription(self, feed, after=after, release=release)
        if feed.end is not None or self.closing:
            subscription.finish(feed.end)
        else:
            feed.subscribers.add(subscription)
        return subscription

    def close(self) -> None:
        """End every stream (they send what they hold, then close) and stop reading."""
        self.closing = True
        for feed in list(self._feeds.values()):
            feed.finish(None)
            feed.bell.set()
        for task in self._tasks:
            task.cancel()
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None

    async def shutdown(self) -> None:
        """:meth:`close`, wait for the readers and listeners to stop, let the threads go."""
        self.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._pool.shutdown(wait=False)

    def wake(self, run_ids: Iterable[str]) -> None:
        """Have the feeds of ``run_ids`` read the store again (on the loop)."""
        for run_id in run_ids:
            feed = self._feeds.get(run_id)
            if feed is not None:
                feed.bell.set()

    def wake_all(self) -> None:
        """Have every feed read the store again (on the loop)."""
        self.wake(list(self._feeds))

    def _start(self) -> None:
        """Listen for stored events, once, on the running loop."""
        if self._loop is not None:
            return
        self._loop = loop = asyncio.get_running_loop()

        def committed(run_ids: frozenset[str]) -> None:  # on a writer's thread
            if any(run_id in self._feeds for run_id in run_ids):
                loop.call_soon_threadsafe(self.wake, run_ids)

        self._unwatch = self.store.watch(committed)
        if self.store.dialect == "postgresql":
            self._spawn(wakeups.listen_postgres(self.store, self.wake, self.wake_all))
        else:
            self._spawn(
                wakeups.poll_sqlite(
                    self.store,
                    self.read,
                    self.wake,
                    self.wake_all,
                    every=self.poll_seconds,
                    wanted=lambda: bool(self._feeds),
                )
            )

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _follow(self, feed: _Feed) -> None:
        """Read ``feed``'s run each time its bell rings, until nobody follows it or it ends."""
        try:
            try:
                _status, feed.seq = await self.read(self.store.count_events, RunId(feed.run_id))
            except Exception as exc:
                feed.error = exc
                return
            finally:
                feed.ready.set()
            await self._read_on(feed)
        finally:
            if self._feeds.get(feed.run_id) is feed:
                del self._feeds[feed.run_id]
            self.runs.unlisten(feed.run_id, feed.bell)

    async def _read_on(self, feed: _Feed) -> None:
        failures = 0
        while not self.closing and (feed.subscribers or feed.joining):
            feed.bell.clear()  # before the read: a commit during it rings again
            try:
                page = await self.read(
                    self.store.load_event_page, RunId(feed.run_id), after=feed.seq, limit=PAGE
                )
            except TaskdecompError as exc:
                wait = RETRY_SECONDS[min(failures, len(RETRY_SECONDS) - 1)]
                failures += 1
                logger.warning("reading run %s's events failed (%s)", feed.run_id, exc)
                await asyncio.sleep(wait)
                continue
            failures = 0
            for item in page.events:
                feed.hand_on(item)
            if len(page.events) == PAGE:
                continue
            if page.status in FINAL and not self.runs.is_active(feed.run_id):
                feed.end = frame("end", {"status": page.status, "last_seq": feed.seq})
                del self._feeds[feed.run_id]  # a later stream starts a feed of its own
                feed.finish(feed.end)
                return
            await feed.bell.wait()
