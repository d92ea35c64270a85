"""Fixtures for queued runs: a fresh PostgreSQL database per module, real worker processes.

The server is the one ``TEST_PG_URL`` names (default ``postgresql://postgres@127.0.0.1/test``);
each test module creates a database of its own there (DBOS keeps its ``dbos`` schema in the
run store's database) and drops it at the end. Each test gets a :class:`Cluster`: a queue
of its own in that database, the workers it starts (``taskdecomp worker`` child processes,
always killed at the end of the test), the scripted models they register and the call log
that ``tests/scale/tools.py`` writes from every worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from sqlalchemy.engine import make_url

from taskdecomp.budget import Budget
from taskdecomp.errors import StoreError
from taskdecomp.run import RunId
from taskdecomp.scale.submit import submit
from taskdecomp.store import SqlStore, open_store
from taskdecomp.store.base import RunSummary
from tests.clitools import ENTRY

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1/test"
TOOLS = Path(__file__).with_name("tools.py")
LEASE = 2.0
"""Every worker's lease (``TASKDECOMP_LEASE_SECONDS``): a dead worker's runs move on after it."""
TERMINAL = ("ok", "stopped")
SETTLE = 0.3
"""How long a step runs before the test kills its worker: past the few milliseconds in
which, in the default (``async``) durability, the previous step's checkpoint may still be
on its way to the store (a kill then runs that step again, as documented)."""

T = TypeVar("T")


def wait_for(
    check: Callable[[], T | None], *, timeout: float, every: float = 0.1, what: Callable[[], str]
) -> T:
    """``check()`` once it is truthy; fail with ``what()`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what()}")
        time.sleep(every)


def admin_url() -> str:
    return os.environ.get("TEST_PG_URL", DEFAULT_PG_URL)


def admin() -> psycopg.Connection[tuple[Any, ...]]:
    url = make_url(admin_url()).set(drivername="postgresql")
    return psycopg.connect(url.render_as_string(hide_password=False), autocommit=True)


@contextlib.contextmanager
def fresh_database() -> Iterator[str]:
    """The URL of a new, empty database, dropped with everything in it afterwards."""
    name = f"td_scale_{uuid.uuid4().hex[:12]}"
    with admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(admin_url()).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def scale_db() -> Iterator[str]:
    """A fresh database for the module, with DBOS's system tables made.

    A worker makes them as it first starts; here they are there before, as on a database
    where workers have run, so a run submitted before the test's workers start is queued
    at once.
    """
    with fresh_database() as url:
        dbos = Path(sys.executable).with_name("dbos")
        subprocess.run([dbos, "migrate", "-s", url], capture_output=True, check=True)
        yield url


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``taskdecomp ARGS`` in a child process; it must succeed."""
    done = subprocess.run(
        [*ENTRY, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done


def step(step_id: str, tool: str, n: int, ms: int | None = None) -> dict[str, Any]:
    """A plan step calling ``tool`` of ``tests/scale/tools.py``."""
    args: dict[str, Any] = {"n": n} if ms is None else {"n": n, "ms": ms}
    return {"id": step_id, "title": f"step {step_id}", "tool": tool, "args": args}


@dataclass(frozen=True, kw_only=True)
class Call:
    """One line of the call log."""

    event: str
    """``start`` or ``end``."""
    tool: str
    key: str
    """The idempotency key the call received: ``<run id>:<step id>``."""
    run_id: str
    step: str
    pid: int
    """The worker process that made the call."""
    t: float


def calls_in(log: Path) -> list[Call]:
    if not log.exists():
        return []
    found = []
    for line in log.read_text(encoding="utf-8").splitlines():
        data = json.loads(line)
        key = str(data["key"])
        run_id, _, step_id = key.partition(":")
        event, tool, pid, t = data["event"], data["tool"], data["pid"], data["t"]
        found.append(
            Call(event=event, tool=tool, key=key, run_id=run_id, step=step_id, pid=pid, t=t)
        )
    return found


def starts(calls: Iterable[Call]) -> Counter[tuple[str, str]]:
    """How many calls began, by (run id, step id)."""
    return Counter((c.run_id, c.step) for c in calls if c.event == "start")


@dataclass
class Cluster:
    """One test's queue, its workers, its models and its call log."""

    db: str
    home: Path
    queue: str = field(default_factory=lambda: f"q{uuid.uuid4().hex[:10]}")
    models: dict[str, str] = field(default_factory=dict)
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    killed: dict[int, float] = field(default_factory=dict)
    """The workers the test killed: process id -> when (``time.time()``)."""
    _store: SqlStore | None = None

    @property
    def call_log(self) -> Path:
        return self.home / "calls.jsonl"

    @property
    def store(self) -> SqlStore:
        if self._store is None:
            self._store = open_store(self.db)
        return self._store

    def model(self, name: str, *steps: dict[str, Any], latency_ms: int = 0) -> str:
        """Register a scripted model on the workers to come: a plan of ``steps``, then done.

        It answers by rule, the planner's request with the plan and any other with "done":
        a run taken over after its combine call was counted but before its end was stored
        asks the combiner again, which a list script (one answer per call) could not answer.
        """
        script = self.home / f"model-{name}.json"
        plan = {"kind": "plan", "steps": list(steps)}
        rules = [{"match": '"max_plan_steps"', "response": plan}]
        script.write_text(json.dumps({"rules": rules, "default": "done", "latency_ms": latency_ms}))
        self.models[name] = f"scripted:{script}"
        return name

    def start(
        self, *extra: str, count: int = 1, entry: Iterable[str] = ENTRY
    ) -> list[subprocess.Popen[bytes]]:
        """Start ``count`` workers on this queue, with the models registered so far."""
        started = []
        for _ in range(count):
            index = len(self.workers)
            argv = [
                *entry, "worker", "--db", self.db, "--queue", self.queue, "--processes", "1",
                "--tools", f"scale={TOOLS}", "--executor-id", f"{self.queue}-w{index}",
                *(f"--model={name}={spec}" for name, spec in self.models.items()), *extra,
            ]  # fmt: skip
            env = {
                **os.environ,
                "TASKDECOMP_LEASE_SECONDS": str(LEASE),
                "SCALE_CALLS": str(self.call_log),
            }
            with (
                open(self.home / f"worker{index}.out", "wb") as out,
                open(self.home / f"worker{index}.err", "wb") as err,
            ):
                proc = subprocess.Popen(
                    argv, env=env, stdout=out, stderr=err, start_new_session=True
                )
            self.workers.append(proc)
            started.append(proc)
        return started

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [proc for proc in self.workers if proc.poll() is None]

    def kill(self, pid: int) -> None:
        """SIGKILL the worker ``pid`` (one this cluster started) and reap it."""
        proc = next(p for p in self.workers if p.pid == pid)
        _kill(proc)
        self.killed[pid] = time.time()

    def submit(self, goal: str, model: str, **options: Any) -> str:
        """Queue a run from this process; return its id."""
        max_seconds = options.pop("max_seconds", None)
        budget = Budget(max_seconds=max_seconds) if max_seconds is not None else None
        run_id, _ = submit(
            goal, store=self.store, db=self.db, tools="scale", model=model,
            queue=self.queue, budget=budget, **options,
        )  # fmt: skip
        return run_id

    def summaries(self) -> dict[str, RunSummary]:
        """Every stored run by id; empty while the store cannot be reached."""
        try:
            return {s.run_id: s for s in self.store.list_runs()}
        except StoreError:
            return {}

    def summary(self, run_id: str) -> RunSummary:
        return self.store.load_run(RunId(run_id)).summary

    def ended(self, run_ids: Iterable[str], *, timeout: float) -> dict[str, RunSummary]:
        """Wait until every run in ``run_ids`` has ended; their summaries."""
        wanted = set(run_ids)

        def check() -> dict[str, RunSummary] | None:
            found = self.summaries()
            done = {r: found[r] for r in wanted if r in found and found[r].status in TERMINAL}
            return done if len(done) == len(wanted) else None

        def what() -> str:
            found = self.summaries()
            waiting = {r: found[r].status if r in found else "missing" for r in wanted}
            waiting = {r: s for r, s in waiting.items() if s not in TERMINAL}
            return f"runs not ended: {waiting}\n{self.deliveries(waiting)}\n{self.logs()}"

        return wait_for(check, timeout=timeout, every=0.2, what=what)

    def deliveries(self, run_ids: Iterable[str]) -> str:
        """The queue engine's deliveries of ``run_ids``, for failure messages."""
        try:
            with psycopg.connect(self.db) as conn:
                found = conn.execute(
                    "SELECT workflow_uuid, status, executor_id FROM dbos.workflow_status"
                    " WHERE split_part(workflow_uuid, ':', 1) = ANY(%s) ORDER BY created_at",
                    (list(run_ids),),
                ).fetchall()
        except psycopg.Error as exc:
            return f"deliveries: cannot read them ({exc})"
        return "deliveries (id, status, worker): " + "; ".join(map(str, found))

    def calls(self) -> list[Call]:
        return calls_in(self.call_log)

    def started(self, run_id: str, step_id: str, *, timeout: float) -> Call:
        """Wait for the first call of ``run_id``'s step ``step_id`` to begin."""

        def check() -> Call | None:
            found = [
                c for c in self.calls()
                if c.event == "start" and (c.run_id, c.step) == (run_id, step_id)
            ]  # fmt: skip
            return found[0] if found else None

        return wait_for(
            check,
            timeout=timeout,
            what=lambda: f"step {step_id} of {run_id} did not start\n{self.logs()}",
        )

    def kill_during(self, run_id: str, step_id: str) -> Call:
        """SIGKILL the worker that runs ``run_id``'s step ``step_id`` once it has begun."""
        call = self.started(run_id, step_id, timeout=120)
        time.sleep(SETTLE)
        self.kill(call.pid)
        return call

    def recoveries(self) -> dict[str, int]:
        """Worker deaths counted per run, as the queue's table holds them."""
        with psycopg.connect(self.db) as conn:
            rows = conn.execute("SELECT run_id, recoveries FROM queued_runs").fetchall()
        return {str(run_id): int(count) for run_id, count in rows}

    def stderr(self, pid: int) -> str:
        """What worker ``pid`` has written to its stderr so far."""
        index = next(i for i, proc in enumerate(self.workers) if proc.pid == pid)
        return (self.home / f"worker{index}.err").read_text(errors="replace")

    def logs(self) -> str:
        """The tail of every worker's stderr, for failure messages."""
        parts = []
        for index, proc in enumerate(self.workers):
            err = self.stderr(proc.pid)
            parts.append(f"--- worker {index} (pid {proc.pid}, exit {proc.poll()}):\n{err[-3000:]}")
        return "\n".join(parts)

    def close(self) -> None:
        for proc in self.workers:
            _kill(proc)
        if self._store is not None:
            self._store.close()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):  # it died just now
            os.killpg(proc.pid, signal.SIGKILL)  # the worker leads a process group of its own
    proc.wait(timeout=30)


@pytest.fixture
def cluster(scale_db: str, tmp_path: Path) -> Iterator[Cluster]:
    """A queue of the test's own; its workers are killed when the test ends."""
    made = Cluster(db=scale_db, home=tmp_path)
    try:
        yield made
    finally:
        made.close()
