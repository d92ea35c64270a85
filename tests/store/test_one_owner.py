"""One owner per run, with real processes on both backends.

An order is fetched, waits for approval (a tool that blocks on a file) and is invoiced by an
``unsafe`` tool that appends its process id to a ledger. Every run starts as a
``taskdecomp run`` killed with SIGKILL while it waits, so the store holds an interrupted run
with a live lease (2 s). Then two resumes race for it:

- a second resume of a run whose owner is alive is refused at once (exit 2, one line naming
  the owner); once that owner is killed and its lease expired, it takes over and finishes;
- an owner that stalls past its lease (frozen with SIGSTOP inside a tool, or with its event
  loop blocked just before the unsafe step) is taken over; when it wakes it can neither
  record its step nor call the unsafe tool: its result is ``lease_lost``, and the store
  keeps the new owner's outcome.

In every case the invoice is sent exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import taskdecomp
from taskdecomp.run import RunId
from taskdecomp.store import open_store
from tests.clitools import CHILD

HERE = Path(__file__).parent / "crash"
LEASE = 2.0
SRC = str(Path(taskdecomp.__file__).resolve().parent.parent)


def wait_for(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Order:
    """The files, the store and the processes of one order."""

    def __init__(self, url: str, tmp: Path) -> None:
        self.url = url
        self.dir = tmp / "order"
        self.dir.mkdir()
        script = tmp / "script.json"
        steps = [
            {"id": "fetch", "title": "fetch", "tool": "fetch_order", "args": {"n": 7}},
            {"id": "approve", "title": "approve", "tool": "wait_for_approval", "args": {"n": 7}},
            {"id": "invoice", "title": "invoice", "tool": "send_invoice", "args": {"n": 7}},
        ]
        plan = {"kind": "plan", "steps": steps}
        rules = [{"match": "available_tools", "response": plan}]
        script.write_text(json.dumps({"rules": rules, "default": "invoice sent"}))
        self.script = script
        self.store = open_store(url)
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]),
            "INVOICE_DIR": str(self.dir),
            "TASKDECOMP_LEASE_SECONDS": str(LEASE),
        }
        self.run_id = RunId("")
        self.children: list[subprocess.Popen[str]] = []

    def start(self, *argv: str) -> subprocess.Popen[str]:
        child = subprocess.Popen(
            argv,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.children.append(child)
        return child

    def close(self) -> None:
        """Kill what a failed test left running (a stopped child is continued first)."""
        for child in self.children:
            if child.poll() is None:
                os.kill(child.pid, signal.SIGCONT)
                child.kill()
                child.communicate()
        self.store.close()

    def cli(self, *args: str) -> subprocess.Popen[str]:
        return self.start(*CHILD, *args, "--db", self.url)

    def resume(self) -> subprocess.Popen[str]:
        return self.cli("resume", self.run_id, "--json")

    def at_gate(self, child: subprocess.Popen[str]) -> None:
        waiting = self.dir / f"waiting.{child.pid}"
        wait_for(lambda: waiting.exists() or child.poll() is not None, "the approval step")
        assert child.poll() is None, child.communicate()

    def interrupted(self) -> None:
        """A ``taskdecomp run`` killed at the approval step; returns once its lease expired."""
        tools = str(HERE / "invoice.py")
        first = self.cli(  # sync: the fetch is on disk before the kill, whatever the timing
            "run",
            "invoice order 7",
            "--tools",
            tools,
            "--model",
            f"scripted:{self.script}",
            "--durability",
            "sync",
        )
        self.at_gate(first)
        first.kill()
        first.communicate()
        (summary,) = self.store.list_runs()
        self.run_id = summary.run_id
        assert self.owner_pid() == first.pid
        self.wait_until_expired()

    def owner_pid(self) -> int | None:
        lease = self.store.load_run(self.run_id).lease
        return None if lease is None else int(lease.owner.split(":")[-2])

    def wait_until_expired(self) -> None:
        def expired() -> bool:
            lease = self.store.load_run(self.run_id).lease
            return lease is None or lease.expires_at < time.time()

        wait_for(expired, "the lease to expire")

    def invoices(self) -> list[int]:
        ledger = self.dir / "invoices"
        return [int(line) for line in ledger.read_text().split()] if ledger.exists() else []

    def open_gate(self) -> None:
        (self.dir / "open").touch()

    def check_finished_by(self, pid: int) -> None:
        """The store holds the run as ``pid``'s resume (segment 3) finished it, invoiced once."""
        stored = self.store.load_run(self.run_id)
        assert (stored.summary.status, stored.summary.stop_reason) == ("ok", "success")
        assert (stored.answer, stored.segments, stored.lease) == ("invoice sent", 3, None)
        assert self.invoices() == [pid]
        invoiced = [a for a in stored.attempts if a.start.step_id == "invoice"]
        assert [(a.start.segment, a.state) for a in invoiced] == [(3, "ok")]


@pytest.fixture
def order(store_url: str, tmp_path: Path) -> Iterator[Order]:
    made = Order(store_url, tmp_path)
    yield made
    made.close()


def finished(child: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = child.communicate(timeout=120)
    return child.returncode, out, err


def test_a_second_resume_is_refused_while_the_owner_lives_and_takes_over_once_it_died(
    order: Order,
) -> None:
    order.interrupted()
    first = order.resume()
    order.at_gate(first)
    taken = order.store.load_run(order.run_id).lease
    assert taken is not None and order.owner_pid() == first.pid
    time.sleep(LEASE * 1.5)  # longer than the lease: the heartbeat keeps it alive
    renewed = order.store.load_run(order.run_id).lease
    assert renewed is not None and renewed.epoch == taken.epoch
    assert renewed.expires_at > taken.expires_at

    code, out, err = finished(order.resume())
    assert code == 2, (out, err)
    assert err.startswith(
        f"taskdecomp: error: run '{order.run_id}' is in flight in another process: its owner "
        f"'{socket.gethostname()}:{first.pid}:"
    ), err
    assert err.count("\n") == 1 and out == ""
    assert first.poll() is None and order.invoices() == []

    first.kill()
    first.communicate()
    order.wait_until_expired()
    order.open_gate()
    second = order.resume()
    code, out, err = finished(second)
    assert code == 0, err
    assert json.loads(out)["stop_reason"] == "success"
    order.check_finished_by(second.pid)


def test_an_owner_frozen_in_a_tool_past_its_lease_cannot_record_its_step(
    order: Order,
) -> None:
    order.interrupted()
    stale = order.resume()
    order.at_gate(stale)
    os.kill(stale.pid, signal.SIGSTOP)
    try:
        order.wait_until_expired()
        order.open_gate()
        second = order.resume()
        code, out, err = finished(second)
        assert code == 0, err
        order.check_finished_by(second.pid)
    finally:
        os.kill(stale.pid, signal.SIGCONT)
    code, out, err = finished(stale)
    assert code == 1, err
    result = json.loads(out)
    assert (result["status"], result["stop_reason"], result["answer"]) == (
        "stopped",
        "lease_lost",
        None,
    )
    assert f"'{socket.gethostname()}:{second.pid}:" in result["message"]
    assert "took it over at epoch 3 after that lease expired" in result["message"]
    order.check_finished_by(second.pid)  # the stale owner wrote nothing, invoiced nothing
    stored = order.store.load_run(order.run_id)
    assert [a.start.segment for a in stored.attempts] == [1, 3, 3]


def test_an_owner_stalled_before_the_unsafe_step_cannot_call_it(order: Order) -> None:
    order.interrupted()
    order.open_gate()
    stall = (sys.executable, str(HERE / "stall.py"))
    stale = order.start(*stall, order.url, order.run_id, str(order.dir), str(LEASE))
    stalled = order.dir / f"stalled.{stale.pid}"
    wait_for(lambda: stalled.exists() or stale.poll() is not None, "the stall")
    assert stale.poll() is None, stale.communicate()
    assert order.owner_pid() == stale.pid
    order.wait_until_expired()

    second = order.resume()
    code, out, err = finished(second)
    assert code == 0, err
    order.check_finished_by(second.pid)

    (order.dir / "wake").touch()
    code, out, err = finished(stale)
    assert code == 0, err
    result = json.loads(out)
    assert (result["status"], result["stop_reason"]) == ("stopped", "lease_lost")
    assert f"'{socket.gethostname()}:{second.pid}:" in result["message"]
    order.check_finished_by(second.pid)  # the invoice was sent once, by the new owner
    stored = order.store.load_run(order.run_id)
    assert [(a.start.step_id, a.start.segment) for a in stored.attempts] == [
        ("fetch", 1),
        ("approve", 2),
        ("invoice", 3),
    ]


def test_a_resume_right_after_a_kill_takes_over_at_once_and_one_of_two_proceeds(
    order: Order,
) -> None:
    order.env["TASKDECOMP_LEASE_SECONDS"] = "600"  # expiry cannot explain a take-over
    first = order.cli(
        "run", "invoice order 7", "--tools", str(HERE / "invoice.py"),
        "--model", f"scripted:{order.script}", "--durability", "sync",
    )  # fmt: skip
    order.at_gate(first)
    first.kill()
    first.communicate()
    (summary,) = order.store.list_runs()
    order.run_id = summary.run_id
    lease = order.store.load_run(order.run_id).lease
    assert lease is not None and lease.expires_at > time.time() + 500

    resumed = order.resume()  # at once: the owner is a dead process of this host
    order.at_gate(resumed)
    resumed.kill()  # a resume killed as it works is taken over at once too
    resumed.communicate()

    racing = [order.resume(), order.resume()]
    wait_for(lambda: any(r.poll() is not None for r in racing), "one resume to be refused")
    loser = next(r for r in racing if r.poll() is not None)
    winner = next(r for r in racing if r is not loser)
    code, out, err = finished(loser)
    assert code == 2, (out, err)
    assert f"its owner '{socket.gethostname()}:{winner.pid}:" in err, err
    assert order.owner_pid() == winner.pid and order.invoices() == []

    order.open_gate()
    code, out, err = finished(winner)
    assert code == 0, err
    assert json.loads(out)["stop_reason"] == "success"
    stored = order.store.load_run(order.run_id)
    assert (stored.summary.stop_reason, stored.segments, stored.lease) == ("success", 3, None)
    assert order.invoices() == [winner.pid]
