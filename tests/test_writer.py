"""The group-commit writer on a real SQLite store: order, groups, durability, failures."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest
from sqlalchemy import insert, select

from taskdecomp.errors import StoreError
from taskdecomp.run import RunId
from taskdecomp.store import SqlStore, open_store, schema
from taskdecomp.store.base import NewRun
from taskdecomp.writer import GroupWriter, Lane, lane


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    opened = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    yield opened
    opened.close()


def put_event(store: SqlStore, n: int) -> None:
    with store.write() as conn:
        conn.execute(insert(schema.events).values(run_id="r", kind=f"e{n}", at=float(n), data="{}"))


def event_write(store: SqlStore, n: int) -> Callable[[], None]:
    """A write that stores event ``e<n>``."""
    return lambda: put_event(store, n)


def kinds(store: SqlStore) -> list[str]:
    with store.read() as conn:
        rows = conn.execute(select(schema.events.c.kind).order_by(schema.events.c.id)).all()
    return [row[0] for row in rows]


class Held:
    """A first write that holds the writer inside its transaction until ``gate`` is set."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self.gate, self.inside = threading.Event(), threading.Event()

    def __call__(self) -> None:
        self.inside.set()
        self.gate.wait(10)
        put_event(self.store, 0)


@pytest.fixture
def run_row(store: SqlStore) -> None:
    store.create_run(NewRun(run_id=RunId("r"), goal="g", model=None, tools=None, config={}))


@pytest.mark.usefixtures("run_row")
def test_writes_queued_during_a_commit_go_together_into_the_next_one(store: SqlStore) -> None:
    first = Held(store)
    writer = GroupWriter(store, name="test", linger=0)
    before = store.commits
    writer.submit(first)
    assert first.inside.wait(10)
    futures = [writer.submit(event_write(store, n)) for n in range(1, 20)]
    futures.append(writer.submit(lambda: put_event(store, 20), durable=True))
    first.gate.set()
    futures[-1].result(10)
    assert all(f.done() and f.exception() is None for f in futures)
    assert kinds(store) == [f"e{n}" for n in range(21)]  # in the order given
    assert store.commits - before == 2  # the blocked first write, then the twenty queued
    writer.close()


@pytest.mark.usefixtures("run_row")
def test_only_groups_with_a_durable_write_wait_for_the_disk(store: SqlStore) -> None:
    writer = GroupWriter(store, name="test", linger=0)
    lazy = store.durable_commits
    writer.submit(lambda: put_event(store, 1)).result(10)
    assert store.durable_commits == lazy
    writer.submit(lambda: put_event(store, 2), durable=True).result(10)
    assert store.durable_commits == lazy + 1
    writer.close()


@pytest.mark.usefixtures("run_row")
def test_a_failing_write_fails_alone_and_the_rest_of_its_group_commits(store: SqlStore) -> None:
    gate = threading.Event()
    writer = GroupWriter(store, name="test", linger=0)
    writer.submit(lambda: gate.wait(10))

    def broken() -> None:
        put_event(store, 99)
        raise StoreError("the disk is full")

    good = writer.submit(lambda: put_event(store, 1))
    bad = writer.submit(broken)
    later = writer.submit(lambda: put_event(store, 2))
    gate.set()
    writer.close()
    assert good.exception() is None and later.exception() is None
    assert isinstance(bad.exception(), StoreError)
    assert kinds(store) == ["e1", "e2"]  # the broken write's own insert was rolled back


@pytest.mark.usefixtures("run_row")
def test_a_posted_write_that_fails_reports_to_its_callback_and_the_rest_commit(
    store: SqlStore,
) -> None:
    gate = threading.Event()
    errors: list[tuple[str, BaseException]] = []
    writer = GroupWriter(store, name="test", linger=0)
    writer.submit(lambda: gate.wait(10))

    def broken() -> None:
        put_event(store, 99)
        raise StoreError("the disk is full")

    def report(name: str) -> Callable[[BaseException], None]:
        return lambda exc: errors.append((name, exc))

    writer.post(event_write(store, 1), on_error=report("good"))
    writer.post(broken, on_error=report("bad"))
    writer.post(event_write(store, 2), on_error=report("later"))
    gate.set()
    writer.close()
    assert [(name, str(exc)) for name, exc in errors] == [("bad", "the disk is full")]
    assert kinds(store) == ["e1", "e2"]


@pytest.mark.usefixtures("run_row")
def test_posted_writes_linger_together_until_a_durable_write_or_a_close_ends_the_wait(
    store: SqlStore,
) -> None:
    writer = GroupWriter(store, name="test", linger=600)  # only a wake-up ends the wait
    errors: list[BaseException] = []
    before = store.commits
    for n in range(1, 4):
        writer.post(event_write(store, n), on_error=errors.append)
    writer.submit(event_write(store, 4), durable=True).result(60)
    assert (store.commits - before, kinds(store)) == (1, ["e1", "e2", "e3", "e4"])
    writer.post(event_write(store, 5), on_error=errors.append)
    closing = threading.Thread(target=writer.close)
    closing.start()
    closing.join(60)
    assert not closing.is_alive() and kinds(store)[-1] == "e5" and not errors


@pytest.mark.usefixtures("run_row")
def test_posted_writes_are_committed_together_after_a_linger_without_a_wake_up(
    store: SqlStore,
) -> None:
    writer = GroupWriter(store, name="test", linger=0.2)
    errors: list[BaseException] = []
    before = (store.commits, store.durable_commits)
    for n in range(1, 4):  # none wakes the thread: they wait for its next turn
        writer.post(event_write(store, n), on_error=errors.append)
    deadline = time.monotonic() + 60
    while kinds(store) != ["e1", "e2", "e3"] and time.monotonic() < deadline:
        time.sleep(0.01)
    commits = (store.commits - before[0], store.durable_commits - before[1])
    assert (kinds(store), commits) == (["e1", "e2", "e3"], (1, 0))  # one group, no fsync
    writer.close()
    assert not errors


@pytest.mark.usefixtures("run_row")
def test_a_durable_write_queued_behind_another_does_not_wait_out_a_linger(
    store: SqlStore,
) -> None:
    first = Held(store)
    writer = GroupWriter(store, name="test", linger=600)
    writer.submit(first, durable=True)
    assert first.inside.wait(10)
    writer.submit(lambda: put_event(store, 1), durable=True)  # a group of its own
    errors: list[BaseException] = []
    writer.post(event_write(store, 2), on_error=errors.append)
    last = writer.submit(event_write(store, 3), durable=True)
    first.gate.set()
    last.result(60)  # the write before it lingers only while no durable write is queued
    assert kinds(store) == ["e0", "e1", "e2", "e3"] and not errors
    writer.close()


@pytest.mark.usefixtures("run_row")
def test_an_error_handler_that_raises_does_not_stop_the_writer(
    store: SqlStore, caplog: pytest.LogCaptureFixture
) -> None:
    def handler(exc: BaseException) -> None:
        raise ValueError("the handler is broken")

    def broken() -> None:
        raise StoreError("the disk is full")

    writer = GroupWriter(store, name="test", linger=0)
    writer.post(broken, on_error=handler)
    after = writer.submit(lambda: put_event(store, 1), durable=True)
    assert after.result(60) is None and kinds(store) == ["e1"]
    writer.close()
    assert "error handler failed" in caplog.text


@pytest.mark.usefixtures("run_row")
def test_a_write_cancelled_before_it_runs_is_not_made(store: SqlStore) -> None:
    gate = threading.Event()
    writer = GroupWriter(store, name="test", linger=0)
    writer.submit(lambda: gate.wait(10))
    dropped = writer.submit(lambda: put_event(store, 1))
    assert dropped.cancel()
    kept = writer.submit(lambda: put_event(store, 2))
    gate.set()
    writer.close()
    assert kept.exception() is None and kinds(store) == ["e2"]


@pytest.mark.usefixtures("run_row")
def test_a_write_racing_the_close_is_made_or_refused_never_left_waiting(store: SqlStore) -> None:
    writer = GroupWriter(store, name="test", linger=0.001)
    futures: list[Future[None]] = []
    refused = threading.Event()

    def submit_until_refused() -> None:
        while True:
            try:
                futures.append(writer.submit(event_write(store, len(futures))))
                time.sleep(0.0005)
            except RuntimeError:
                refused.set()
                return

    racers = [threading.Thread(target=submit_until_refused) for _ in range(3)]
    for racer in racers:
        racer.start()
    while len(futures) < 50:
        time.sleep(0.001)
    writer.close()
    for racer in racers:
        racer.join(60)
    assert refused.is_set() and futures
    assert all(future.done() for future in futures)  # none queued after the stop
    assert len(kinds(store)) == len(futures)


@pytest.mark.usefixtures("run_row")
def test_the_last_write_is_made_on_the_calling_thread_with_everything_queued_in_one_commit(
    store: SqlStore,
) -> None:
    writer = GroupWriter(store, name="test", linger=600)  # the thread never takes a group
    errors: list[BaseException] = []
    for n in range(1, 4):
        writer.post(event_write(store, n), on_error=errors.append)
    before = (store.commits, store.durable_commits)
    callers: list[threading.Thread] = []

    def final() -> str:
        callers.append(threading.current_thread())
        put_event(store, 4)
        return "ended"

    assert writer.last(final) == "ended"
    assert callers == [threading.current_thread()]
    assert (store.commits - before[0], store.durable_commits - before[1]) == (1, 1)
    assert kinds(store) == ["e1", "e2", "e3", "e4"] and not errors
    writer._thread.join(60)  # told to stop, not waited for
    assert not writer._thread.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        writer.post(event_write(store, 5), on_error=errors.append)
    with pytest.raises(RuntimeError, match="closed"):
        writer.last(event_write(store, 6))
    writer.close()  # a no-op now


@pytest.mark.usefixtures("run_row")
def test_the_last_write_waits_for_the_group_the_thread_is_committing(store: SqlStore) -> None:
    first = Held(store)
    writer = GroupWriter(store, name="test", linger=0)
    writer.submit(first)
    assert first.inside.wait(10)
    writer.submit(event_write(store, 1))  # queued behind the held group
    ending = threading.Thread(target=writer.last, args=(event_write(store, 2),))
    ending.start()
    ending.join(0.2)
    assert ending.is_alive()  # waits while the thread is inside its transaction
    first.gate.set()
    ending.join(60)
    assert not ending.is_alive() and kinds(store) == ["e0", "e1", "e2"]


@pytest.mark.usefixtures("run_row")
@pytest.mark.parametrize(
    ("raised", "kept"),
    [
        (StoreError("the disk is full"), ["e1", "e2"]),  # a failure: the rest is still made
        (KeyboardInterrupt(), []),  # Ctrl-C while the caller makes the group: it stops there
    ],
)
def test_a_last_write_that_raises_fails_alone_unless_it_is_an_interrupt(
    store: SqlStore, raised: BaseException, kept: list[str]
) -> None:
    writer = GroupWriter(store, name="test", linger=600)
    errors: list[BaseException] = []
    writer.post(event_write(store, 1), on_error=errors.append)
    waited = writer.submit(event_write(store, 2))  # queued without waking the thread

    def broken() -> None:
        put_event(store, 99)
        raise raised

    with pytest.raises(type(raised)):
        writer.last(broken)
    assert kinds(store) == kept
    assert waited.done()  # made, or failed: nobody is left waiting, nothing fails silently
    interrupted = isinstance(raised, KeyboardInterrupt)
    assert [type(error) for error in errors] == ([StoreError] if interrupted else [])
    assert isinstance(waited.exception(), StoreError) == interrupted
    writer._thread.join(60)
    assert not writer._thread.is_alive()


def test_a_closed_writer_refuses_writes(store: SqlStore) -> None:
    writer = GroupWriter(store, name="test")
    writer.close()
    writer.close()  # twice is fine
    with pytest.raises(RuntimeError, match="closed"):
        writer.submit(lambda: None)


def test_batches_do_not_nest(store: SqlStore) -> None:
    with store.batch(), pytest.raises(RuntimeError, match="nest"), store.batch():
        pass


@pytest.mark.usefixtures("run_row")
def test_runs_sharing_a_writer_end_in_one_durable_commit(store: SqlStore) -> None:
    lanes = [lane(store) for _ in range(3)]
    first = Held(store)
    held = lanes[0]._writer.submit(first)  # the thread is inside a transaction meanwhile
    assert first.inside.wait(10)
    before = (store.commits, store.durable_commits)

    async def end_all() -> list[int]:
        async def end(n: int, one: Lane) -> int:
            return await one.end(lambda: put_event(store, n) or n)

        ending = [asyncio.create_task(end(n, one)) for n, one in enumerate(lanes, 1)]
        await asyncio.sleep(0.05)
        first.gate.set()
        return await asyncio.gather(*ending)

    assert asyncio.run(end_all()) == [1, 2, 3]
    assert held.result(10) is None
    assert (store.commits - before[0], store.durable_commits - before[1]) == (2, 1)
    assert kinds(store) == ["e0", "e1", "e2", "e3"]


@pytest.mark.usefixtures("run_row")
def test_a_run_alone_on_the_writer_ends_on_its_own_thread(store: SqlStore) -> None:
    one = lane(store)
    callers: list[threading.Thread] = []

    def final() -> None:
        callers.append(threading.current_thread())
        put_event(store, 1)

    asyncio.run(one.end(final))
    assert callers == [threading.current_thread()] and kinds(store) == ["e1"]


@pytest.mark.usefixtures("run_row")
def test_the_shared_writer_ends_once_no_run_uses_it_and_a_new_run_gets_another(
    store: SqlStore,
) -> None:
    first = lane(store)
    writer = first._writer
    errors: list[BaseException] = []
    first.post(event_write(store, 1), on_error=errors.append)
    first.close()  # commits what the run queued, and leaves
    assert kinds(store) == ["e1"]
    writer._thread.join(60)
    assert not writer._thread.is_alive()
    second = lane(store)
    assert second._writer is not writer and second._writer._thread.is_alive()
    second.last(event_write(store, 2))
    assert kinds(store) == ["e1", "e2"] and not errors


@pytest.mark.usefixtures("run_row")
def test_an_interrupt_while_one_run_ends_fails_the_writes_of_the_others(store: SqlStore) -> None:
    ending, other = lane(store), lane(store)
    errors: list[BaseException] = []
    other.post(event_write(store, 1), on_error=errors.append)  # nobody waits for it

    def interrupted() -> None:
        put_event(store, 100)
        raise KeyboardInterrupt  # Ctrl-C while the ending run makes its group

    with pytest.raises(KeyboardInterrupt):
        ending.last(interrupted)
    assert [type(error) for error in errors] == [StoreError]  # its run learns of it
    other.post(event_write(store, 2), on_error=errors.append)
    other.close()
    assert kinds(store) == ["e2"] and len(errors) == 1


def test_a_cancelled_wait_leaves_its_write_to_fail_without_an_unretrieved_error(
    store: SqlStore, caplog: pytest.LogCaptureFixture
) -> None:
    import gc

    writer = GroupWriter(store, name="w", linger=0)
    release = threading.Event()

    def failing() -> None:
        release.wait(10)
        raise RuntimeError("the write failed")

    async def cancelled_wait() -> None:
        waiting = asyncio.create_task(writer.durable(failing))
        await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        release.set()  # the write fails only now, with nobody waiting for it
        await asyncio.sleep(0.2)

    asyncio.run(cancelled_wait())
    writer.close()
    gc.collect()
    assert "never retrieved" not in caplog.text
