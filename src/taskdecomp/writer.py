"""Group commit: store writes on a thread of their own, many to a transaction.

A :class:`GroupWriter` takes writes (callables that call the store) from the event loop and
runs them, in the order given, on a thread of its own. Everything queued while the previous
transaction was committing goes into the next one, so a run pays one commit for all the
steps that finished meanwhile, and a commit never holds up the steps still running.

Runs share it: :func:`lane` gives each run a :class:`Lane` on the one writer this process
keeps for its store, so the runs in flight at once commit together, and the ends of runs
that finish in the same moment wait for one fsync between them instead of one each. The
writer's thread ends once no run uses it and nothing is queued.

A write marked ``durable`` (the intent before an ``unsafe`` call, the end of the run) makes
its whole group wait for the disk; since a log is synced as a whole, that also makes every
group before it durable. The run's last write is made by its caller, who waits for it anyway
(:meth:`GroupWriter.last`). A group that fails is rolled back and its writes are made again one
by one, so each write's future reports its own outcome. Consecutive writes that say they
can be made together (:class:`Joinable`, a run's checkpoints) are made by one call, so a
group costs a handful of statements however many steps it holds.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, cast

from taskdecomp.errors import StoreError
from taskdecomp.store.base import Store

_T = TypeVar("_T")

logger = logging.getLogger(__name__)


@dataclass(kw_only=True, slots=True)
class _Write(Generic[_T]):
    write: Callable[[], _T]
    durable: bool
    future: Future[_T] | None
    """Where the outcome goes when someone waits for it."""
    on_error: Callable[[BaseException], object] | None = None
    """Where a failure goes otherwise (see :meth:`GroupWriter.post`)."""
    lane: object = None
    """Whose write it is (a run's :class:`Lane`): a group keeps each one's writes in order."""
    urgent: bool = False
    """Whether it wakes the thread at once (as a durable write does) without being durable."""
    done: bool = False
    """Whether its outcome was reported."""

    def ended(self, result: _T) -> None:
        self.done = True
        if self.future is not None:
            self.future.set_result(result)

    def failed(self, exc: BaseException) -> None:
        self.done = True
        if self.future is not None:
            self.future.set_exception(exc)
        elif self.on_error is not None:
            try:
                self.on_error(exc)
            except Exception:  # the writer goes on: the writes after it still need it
                logger.exception("a write's error handler failed on %r", exc)


_STOP = object()

DEFAULT_LINGER = 0.05
"""Seconds the writer sleeps between groups while no durable write is queued (see GroupWriter)."""


class Joinable(Protocol):
    """A write that can be made in one call with the writes of the same ``join_key``."""

    @property
    def join_key(self) -> Hashable:
        """Writes with equal keys, queued one after the other, are made together."""
        ...

    def __call__(self) -> None:
        """Make this write alone."""
        ...

    def join(self, writes: Sequence[Joinable]) -> None:
        """Make ``writes`` (this one first) in one call."""
        ...


class GroupWriter:
    """Runs one run's writes to ``store`` in groups, on a thread of its own.

    Args:
        store: where the writes go.
        name: the thread's name.
        linger: how long the thread sleeps between groups while no durable write is queued
            (``0``: every write wakes it): longer groups cost fewer commits, and a crash
            loses at most the steps that finished this long (plus a commit) before it. An
            idle writer wakes this often too; while the event loop is idle that costs it
            nothing.
    """

    def __init__(
        self, store: Store, *, name: str, linger: float = DEFAULT_LINGER, shared: bool = False
    ) -> None:
        self._store = store
        self._linger = linger
        self._shared = shared
        self._lanes = 0  # runs using a shared writer now
        self._queue: queue.SimpleQueue[_Write[Any] | object] = queue.SimpleQueue()
        self._urgent = threading.Condition()  # guards the count and the queue's end
        self._urgent_count = 0  # writes that wake the thread, and stops, not yet taken
        self._committing = threading.Lock()  # held while a group is taken and made
        self._closed = False
        self._stopped = False  # set by last(), which made the writes itself
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(
        self,
        write: Callable[[], _T],
        *,
        durable: bool = False,
        lane: object = None,
        urgent: bool = False,
    ) -> Future[_T]:
        """Queue ``write``; its future ends when the transaction it is in has committed.

        ``lane`` says whose write it is: a group makes each lane's writes in the order
        they came, and may make those of different lanes in another order. An ``urgent``
        write wakes the thread at once, as a durable one does, but its group does not wait
        for the disk (unless a durable write is in it too).
        """
        future: Future[_T] = Future()
        self._put(_Write(write=write, durable=durable, future=future, lane=lane, urgent=urgent))
        return future

    def post(
        self,
        write: Callable[[], object],
        *,
        on_error: Callable[[BaseException], object],
        lane: object = None,
    ) -> None:
        """Queue a write nobody waits for; a failure goes to ``on_error`` on the writer thread.

        Cheaper than :meth:`submit` (no future to make and end), which counts when every
        step of a run posts one.
        """
        self._put(_Write(write=write, durable=False, future=None, on_error=on_error, lane=lane))

    def _put(self, item: _Write[Any]) -> None:
        with self._urgent:  # nothing is queued after the stop
            if self._closed:
                raise RuntimeError("the writer is closed")
            self._queue.put(item)
            if self._wakes(item):
                self._urgent_count += 1
                self._urgent.notify()

    def _wakes(self, item: _Write[Any] | None) -> bool:
        """Whether queueing ``item`` (``None``: the stop) wakes the thread at once."""
        return item is None or item.durable or item.urgent or self._linger <= 0

    async def durable(self, write: Callable[[], _T], *, lane: object = None) -> _T:
        """Queue ``write`` and wait, without blocking the loop, until it is on disk.

        Cancelling the wait does not cancel the write: it is made all the same.
        """
        return await awaited(self.submit(write, durable=True, lane=lane))

    def flush(self) -> None:
        """Block until everything queued so far is on disk (errors stay in their futures)."""
        self.submit(_nothing, durable=True).exception()

    def close(self, *, flush: bool = True) -> None:
        """Flush (unless the last write was durable and has ended), then stop the thread.

        Later submits are refused.
        """
        if flush and not self._closed:
            self.flush()
        with self._urgent:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
            self._urgent_count += 1
            self._urgent.notify()
        self._thread.join()

    def last(self, write: Callable[[], _T]) -> _T:
        """Make ``write`` durably after every queued write, on this thread; then stop.

        The writes still queued and ``write`` are made here, in one durable transaction,
        once a group the thread may be committing has ended. The caller waits for the disk
        either way; handing the group to the thread would add two wake-ups, each paid on a
        busy loop. The thread is told to stop and not waited for. Later submits are refused.

        Raises:
            RuntimeError: the writer is closed.
            Exception: what ``write`` raised; a queued write's failure goes where it would
                have gone on the thread (its future or its error handler).
            BaseException: an interrupt (Ctrl-C) while the group was made: it propagates,
                and the queued writes not yet reported fail with a
                :class:`~taskdecomp.errors.StoreError` (their futures, or their error
                handlers: they may or may not have been committed).
        """
        return self._made_here(write, stop=True)

    def here(self, write: Callable[[], _T], *, lane: object = None) -> _T:
        """Make ``write`` durably after every queued write, on this thread; go on after it.

        As :meth:`last`, but the writer stays open for the writes of other runs.

        Raises:
            RuntimeError: the writer is closed.
            Exception: what ``write`` raised (see :meth:`last`).
            BaseException: an interrupt (Ctrl-C) while the group was made (see :meth:`last`).
        """
        return self._made_here(write, stop=False, lane=lane)

    async def end(self, write: Callable[[], _T], *, lane: object = None) -> _T:
        """Make a run's last write durably: here when it is the only run, else in a group.

        A run alone makes it on the loop's thread (:meth:`here`), which waits for the disk
        anyway. While other runs use the writer, their ends and steps are queued too: the
        thread commits them all in one transaction, one fsync for every run that ended
        meanwhile, and the loop goes on with the other runs while it waits.

        Raises:
            RuntimeError: the writer is closed.
            Exception: what ``write`` raised.
        """
        if self._lanes <= 1:
            return self.here(write, lane=lane)
        return await self.durable(write, lane=lane)

    def _made_here(self, write: Callable[[], _T], *, stop: bool, lane: object = None) -> _T:
        final: _Write[_T] = _Write(write=write, durable=True, future=Future(), lane=lane)
        group: list[_Write[Any]] = []
        with self._committing:
            try:
                with self._urgent:
                    if self._closed:
                        raise RuntimeError("the writer is closed")
                    self._closed = stop
                while not self._queue.empty():  # takers hold _committing
                    item = self._take()
                    if item is not None:
                        group.append(item)
                group.append(final)
                self._commit(group)
            except BaseException as exc:  # _commit reports the rest: only an interrupt is left
                _fail_unreported(group, exc)
                raise
            finally:
                if stop:
                    with self._urgent:
                        self._stopped = True
                        self._urgent.notify()
        assert final.future is not None
        return final.future.result()

    def attach(self) -> bool:
        """Count one more run using this shared writer; ``False`` once its thread has ended."""
        with self._urgent:
            if self._closed:
                return False
            self._lanes += 1
            return True

    def detach(self) -> None:
        """Count one run fewer; the thread ends once none is left and nothing is queued."""
        with self._urgent:
            self._lanes -= 1

    def _loop(self) -> None:
        stop = False
        while not stop:
            if not self._sleep():
                return
            with self._committing:
                if self._stopped:
                    return
                group, stop = self._next_group()
                if group:
                    self._commit(group)

    def _sleep(self) -> bool:
        """Sleep until a durable write or a stop is queued, or for ``linger``.

        Other writes are queued without waking the thread: a thread woken while the event
        loop is busy waits for the GIL, and every time the loop lets the GIL go (each turn
        of the loop) wakes it again in vain, which cost a busy run more than its writes.
        Returns ``False`` when a shared writer ends instead: no run uses it, nothing is
        queued (later runs get a new one).
        """
        with self._urgent:
            self._urgent.wait_for(
                lambda: self._urgent_count > 0 or self._stopped, max(self._linger, 0) or None
            )
            idle = self._shared and self._lanes <= 0 and self._queue.empty()
            if idle:
                self._closed = True  # attach() refuses it from now on
        if idle:
            _forget(self)  # outside the condition: lane() takes the two locks the other way
        return not idle

    def _next_group(self) -> tuple[list[_Write[Any]], bool]:
        """The next writes to commit together, and whether a stop came after them.

        Everything queued: the durable writes of several runs (their ends) share a commit.
        """
        group: list[_Write[Any]] = []
        while not self._queue.empty():  # takers hold _committing, so it stays non-empty
            item = self._take()
            if item is None:
                return group, True
            group.append(item)
        return group, False

    def _take(self) -> _Write[Any] | None:
        """The next queued write; ``None`` for a stop."""
        item = self._queue.get()
        write = None if item is _STOP else cast(_Write[Any], item)
        if self._wakes(write):
            with self._urgent:
                self._urgent_count -= 1
        return write

    def _commit(self, group: list[_Write[Any]]) -> None:
        group = [
            item
            for item in group
            if item.future is None or item.future.set_running_or_notify_cancel()
        ]
        if not group:
            return
        durable = any(item.durable for item in group)
        results: list[Any] = []
        try:
            with self._store.batch(durable=durable):
                results = _make(group)
        except BaseException as exc:  # reported through the futures
            if self._interrupts_caller(exc):
                raise
            if len(group) == 1:
                group[0].failed(exc)
                return
            for item in group:  # one by one, so each write learns its own outcome
                self._retry(item)
            return
        for item, result in zip(group, results, strict=True):
            item.ended(result)

    def _retry(self, item: _Write[Any]) -> None:
        try:
            with self._store.batch(durable=item.durable):
                result = item.write()
        except BaseException as exc:  # reported through the future
            if self._interrupts_caller(exc):
                raise
            item.failed(exc)
        else:
            item.ended(result)

    def _interrupts_caller(self, exc: BaseException) -> bool:
        """Whether ``exc`` interrupts the caller of :meth:`last` (Ctrl-C): it stops there."""
        return not isinstance(exc, Exception) and threading.current_thread() is not self._thread


def _fail_unreported(group: list[_Write[Any]], exc: BaseException) -> None:
    """Fail every write of ``group`` whose outcome was not reported, as cut off by ``exc``.

    Waited-for or not (another run's posted checkpoint), each learns it may not be stored,
    so its run fails instead of going on as if it were.
    """
    for item in group:
        if item.done or (item.future is not None and item.future.done()):
            continue
        error = StoreError(
            f"interrupted ({type(exc).__name__}) while the group holding this write was "
            "committed; it may or may not be stored"
        )
        error.__cause__ = exc
        item.failed(error)


def _make(group: list[_Write[Any]]) -> list[Any]:
    """Make the writes of ``group``, joining runs of joinable ones; results in group order.

    Each lane's writes are made in the order they came, one lane after the other (the
    runs of a shared writer interleave theirs), so a run's checkpoints stay next to each
    other and join.
    """
    lanes: dict[int, list[int]] = {}
    for index, item in enumerate(group):
        lanes.setdefault(id(item.lane), []).append(index)
    results: list[Any] = [None] * len(group)
    for order in lanes.values():
        _make_in_order([group[index] for index in order], order, results)
    return results


def _make_in_order(writes: list[_Write[Any]], places: list[int], results: list[Any]) -> None:
    """Make ``writes`` in order, joining runs of joinable ones; put results at ``places``."""
    index = 0
    while index < len(writes):
        first = writes[index].write
        key = _join_key(first)
        end = index + 1
        while key is not None and end < len(writes) and _join_key(writes[end].write) == key:
            end += 1
        if end - index > 1:
            cast(Joinable, first).join([cast(Joinable, item.write) for item in writes[index:end]])
        else:
            results[places[index]] = first()
        index = end


def _join_key(write: Callable[[], Any]) -> Hashable | None:
    """The :class:`Joinable` key of ``write``, ``None`` for other writes.

    Looked up, not ``isinstance``-checked: a protocol check costs as much as the write.
    """
    key = getattr(write, "join_key", None)
    return cast(Hashable, key) if key is not None and hasattr(write, "join") else None


def _nothing() -> None:
    return None


async def awaited(future: Future[_T]) -> _T:
    """``future``'s result, waited for without blocking the loop.

    Cancelling the wait leaves the write to go on (nothing links the wait back to it); its
    failure, which the write's run then learns otherwise, is not logged as an error nobody
    retrieved. Lighter than ``asyncio.shield(asyncio.wrap_future(future))``, which links
    both ways and then cuts the link again: one hand-off back to the loop, nothing more.
    """
    loop = asyncio.get_running_loop()
    waiting: asyncio.Future[_T] = loop.create_future()

    def settle(done: Future[_T]) -> None:  # on the writer's thread, or here if already done
        if not loop.is_closed():
            loop.call_soon_threadsafe(_copy_outcome, done, waiting)

    future.add_done_callback(settle)
    return await waiting


def _copy_outcome(done: Future[_T], waiting: asyncio.Future[_T]) -> None:
    """Hand ``done``'s outcome to ``waiting``, unless its wait was cancelled meanwhile."""
    if waiting.cancelled():
        return
    if done.cancelled():
        waiting.cancel()
        return
    error = done.exception()
    if error is not None:
        waiting.set_exception(error)
    else:
        waiting.set_result(done.result())


class Lane:
    """One run's writes on the :class:`GroupWriter` the runs of its store share.

    Get one with :func:`lane`; :meth:`end` or :meth:`last` makes the run's last write,
    :meth:`close` gives the lane up without one (after committing what the run queued).
    """

    def __init__(self, writer: GroupWriter) -> None:
        self._writer = writer
        self._open = True

    def post(
        self, write: Callable[[], object], *, on_error: Callable[[BaseException], object]
    ) -> None:
        """Queue a write nobody waits for (see :meth:`GroupWriter.post`)."""
        self._writer.post(write, on_error=on_error, lane=self)

    async def durable(self, write: Callable[[], _T]) -> _T:
        """Queue ``write`` and wait until it is on disk (see :meth:`GroupWriter.durable`)."""
        return await self._writer.durable(write, lane=self)

    def submit(self, write: Callable[[], _T], *, urgent: bool = False) -> Future[_T]:
        """Queue ``write``; its future ends once committed (see :meth:`GroupWriter.submit`)."""
        return self._writer.submit(write, lane=self, urgent=urgent)

    def flush(self) -> None:
        """Block until everything queued so far is on disk."""
        self._writer.flush()

    async def end(self, write: Callable[[], _T]) -> _T:
        """Make the run's last write durably (see :meth:`GroupWriter.end`); leave the lane.

        Cancelling the wait does not cancel the write: it is made all the same.
        """
        try:
            return await self._writer.end(write, lane=self)
        except asyncio.CancelledError:
            self._writer.flush()  # made all the same: on disk before the run goes on
            raise
        finally:
            self._leave()

    def last(self, write: Callable[[], _T]) -> _T:
        """Make the run's last write durably on this thread (:meth:`GroupWriter.here`)."""
        try:
            return self._writer.here(write, lane=self)
        finally:
            self._leave()

    def close(self) -> None:
        """Commit what is queued, unless the run made its last write; leave the lane."""
        if self._open:
            try:
                self.flush()
            finally:
                self._leave()

    def _leave(self) -> None:
        if self._open:
            self._open = False
            self._writer.detach()


_SHARED: dict[int, GroupWriter] = {}
"""The writer of each store runs write to in this process, by the store's ``id``: an entry
keeps its store alive, so the id is not reused while it is there."""
_SHARED_LOCK = threading.Lock()


def lane(store: Store) -> Lane:
    """A lane for one run on the writer this process shares for ``store``."""
    with _SHARED_LOCK:
        writer = _SHARED.get(id(store))
        if writer is None or not writer.attach():
            writer = GroupWriter(store, name=f"writer of {store!r}", shared=True)
            writer.attach()
            _SHARED[id(store)] = writer
    return Lane(writer)


def _forget(writer: GroupWriter) -> None:
    """Drop ``writer`` from the shared ones (its thread is ending)."""
    with _SHARED_LOCK:
        for key, found in list(_SHARED.items()):
            if found is writer:
                del _SHARED[key]


os.register_at_fork(after_in_child=_SHARED.clear)  # a child has none of the threads
