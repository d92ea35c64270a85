"""Queued runs under load: workers killed at random, the database restarted, nothing done twice.

Hundreds of runs of a three-step plan (``look`` read-only, ``put`` idempotent, ``charge``
unsafe) go through real worker processes while the test kills workers with SIGKILL at
seeded random moments, or restarts the PostgreSQL server under them. Whatever happens,
every run ends, an ``unsafe`` call is made at most once, a step runs again only when a
worker gave its run up (and then with the run's own idempotency key), and a dead worker's
runs end on another worker, with ``success`` or with the unsafe step in doubt.
"""

from __future__ import annotations

import logging
import random
import shutil
import signal
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from taskdecomp.store.base import RunSummary
from tests.scale.conftest import (
    Call,
    Cluster,
    admin,
    admin_url,
    starts,
    step,
    wait_for,
)

logger = logging.getLogger(__name__)

MODEL_MS = 200
"""The scripted model's latency: a run makes two model calls."""
TOOL_MS = 100
PLAN = (
    step("s1", "look", 1, ms=TOOL_MS),
    step("s2", "put", 2, ms=TOOL_MS),
    step("s3", "charge", 3, ms=TOOL_MS),
)
TOOL_OF = {"s1": "look", "s2": "put", "s3": "charge"}
SIDE_EFFECTS = {"look": "read_only", "put": "idempotent", "charge": "unsafe"}
IN_DOUBT = "interrupted_unknown_outcome:s3"
"""How a run whose ``charge`` call started and left no outcome ends: it is not called again."""
ENDINGS = {"success", IN_DOUBT}

RUNS = 200
WORKERS = 3
KILLS = 10
SEED = 20260427
WORKER_OPTIONS = ("--max-recoveries", str(KILLS + 1))
"""No run can be parked as ``poisoned``: every run must end on its merits."""


@dataclass(frozen=True, kw_only=True)
class Kill:
    """One worker the test killed."""

    pid: int
    executor: str
    at: float
    """``time.time()`` just after the kill."""
    held: frozenset[str]
    """The runs it held the lease of when it died."""


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """One row of the store's ``attempts`` table."""

    run_id: str
    step: str
    side_effects: str
    key: str
    state: str


@pytest.mark.slow
def test_200_runs_end_once_each_while_ten_workers_are_killed_at_random(cluster: Cluster) -> None:
    rng = random.Random(SEED)
    model = cluster.model("plan", *PLAN, latency_ms=MODEL_MS)
    run_ids = [cluster.submit(f"load {n}", model) for n in range(RUNS)]
    began = time.monotonic()
    cluster.start(*WORKER_OPTIONS, count=WORKERS)
    kills: list[Kill] = []
    with psycopg.connect(cluster.db, autocommit=True) as watch:
        for threshold in sorted(rng.sample(range(RUNS // 20, RUNS * 9 // 10), KILLS)):
            wait_for(
                lambda: _ended_count(watch) >= threshold,  # noqa: B023 - used at once
                timeout=120,
                every=0.05,
                what=lambda: f"{threshold} runs did not end\n{cluster.logs()}",  # noqa: B023
            )
            time.sleep(rng.uniform(0.0, 0.5))  # anywhere in a model call or a step
            kills.append(_kill_one(cluster, watch, rng))
            cluster.start(*WORKER_OPTIONS)

    ended = cluster.ended(run_ids, timeout=180)
    calls = cluster.calls()
    logger.info(
        "%d runs over %d workers, %d killed: %.1f s; endings %s; %d runs held by killed "
        "workers; steps run again %s",
        RUNS, WORKERS, KILLS, time.monotonic() - began,
        Counter(s.stop_reason for s in ended.values()), sum(len(k.held) for k in kills),
        _again(calls),
    )  # fmt: skip
    recoveries = cluster.recoveries()
    _assert_ended_once_each(ended, calls, recoveries, _attempts(cluster))
    _assert_moved_to_other_workers(cluster, kills, ended, calls, recoveries)
    assert len(kills) == KILLS
    killed = {w.pid: w.returncode for w in cluster.workers if w.pid in cluster.killed}
    assert killed == dict.fromkeys((k.pid for k in kills), -signal.SIGKILL)
    assert sum(len(k.held) for k in kills) >= KILLS, kills  # the kills hit runs in flight
    assert len(cluster.alive()) == WORKERS


@pytest.mark.slow
def test_runs_in_flight_end_once_each_across_a_postgresql_restart(cluster: Cluster) -> None:
    version = _local_cluster_version()
    model = cluster.model("plan", *PLAN, latency_ms=MODEL_MS)
    workers = cluster.start(*WORKER_OPTIONS, count=2)
    before = [cluster.submit(f"before the restart {n}", model) for n in range(60)]
    with psycopg.connect(cluster.db, autocommit=True) as watch:
        first_boot = watch.execute("SELECT pg_postmaster_start_time()").fetchone()

        def some_ended_and_calls_in_flight() -> set[tuple[str, str]] | None:
            return _in_flight(cluster.calls()) if _ended_count(watch) >= 10 else None

        in_flight = wait_for(  # the restart hits runs that ended, that are in a step, queued
            some_ended_and_calls_in_flight,
            timeout=60,
            every=0.05,
            what=lambda: f"no runs ended with calls in flight\n{cluster.logs()}",
        )
    with _server_up_afterwards(version):
        _restart(version)
        wait_for(lambda: cluster.summaries(), timeout=60, what=lambda: "the store is not back")
        after = [cluster.submit(f"after the restart {n}", model) for n in range(20)]
        ended = cluster.ended(before + after, timeout=180)
        with admin() as conn:
            second_boot = conn.execute("SELECT pg_postmaster_start_time()").fetchone()

    calls = cluster.calls()
    recoveries = cluster.recoveries()
    logger.info(
        "restart: %d calls in flight; endings %s; recoveries %s; steps run again %s",
        len(in_flight), Counter(s.stop_reason for s in ended.values()),
        Counter(recoveries[r] for r in before), _again(calls),
    )  # fmt: skip
    # An immediate shutdown loses the commits that did not wait for the disk (async
    # durability): a run in flight may find its read-only step's checkpoint gone and run
    # that step again, with no worker death counted. The unsafe step still runs once.
    _assert_ended_once_each(ended, calls, recoveries, _attempts(cluster), lost_writes=set(before))
    begun = starts(calls)
    for run_id in after:  # a run that began after the restart met nothing unusual
        assert ended[run_id].stop_reason == "success", (run_id, cluster.logs())
        assert recoveries[run_id] == 0, run_id
        assert {s: begun[(run_id, s)] for s in TOOL_OF} == dict.fromkeys(TOOL_OF, 1), run_id
    assert all(w.poll() is None for w in workers), cluster.logs()  # they rode it out
    assert second_boot != first_boot  # the server the runs use did restart


def _assert_ended_once_each(
    ended: dict[str, RunSummary],
    calls: list[Call],
    recoveries: dict[str, int],
    attempts: list[Attempt],
    *,
    lost_writes: set[str] | None = None,
) -> None:
    """Every run ended well, and a step ran twice only where the side-effect rules allow.

    ``lost_writes``: runs whose commits that did not wait for the disk may have been lost
    (the database crashed under them), so a run with no worker death may still have run a
    read-only or idempotent step again.
    """
    reasons = {r: (s.status, s.stop_reason) for r, s in ended.items()}
    assert {r: s for r, s in reasons.items() if s[1] not in ENDINGS} == {}
    assert {s for s, reason in reasons.values() if reason == "success"} <= {"ok"}
    assert {s for s, reason in reasons.values() if reason == IN_DOUBT} <= {"stopped"}
    # each call names, by its idempotency key, a run of this test and the step that calls it
    assert [c for c in calls if c.run_id not in ended or TOOL_OF.get(c.step) != c.tool] == []
    begun = starts(calls)
    assert {k: n for k, n in begun.items() if k[1] == "s3" and n > 1} == {}  # unsafe: once
    charged = {a.run_id: a.state for a in attempts if a.side_effects == "unsafe"}
    for run_id, summary in ended.items():
        ran = {s: begun[(run_id, s)] for s in TOOL_OF}
        seen = (run_id, summary.stop_reason, ran, charged.get(run_id), recoveries[run_id])
        if summary.stop_reason == "success":  # every step ran, the charge call once
            assert min(ran.values()) >= 1 and ran["s3"] == 1, seen
            assert charged[run_id] == "ok", seen
        else:  # its intent is all the store has: the worker gave the run up after writing
            # it, in the call or before it (then the call never began)
            assert recoveries[run_id] >= 1 and charged[run_id] == "started", seen
        if recoveries[run_id] == 0 and run_id not in (lost_writes or set()):
            # one worker ran it start to end: every step once
            assert ran == dict.fromkeys(TOOL_OF, 1), (run_id, ran)
    for attempt in attempts:  # the store's attempts carry the same keys, one unsafe a run
        assert attempt.key == f"{attempt.run_id}:{attempt.step}", attempt
        assert attempt.side_effects == SIDE_EFFECTS[TOOL_OF[attempt.step]], attempt
    unsafe = Counter(a.run_id for a in attempts if a.side_effects == "unsafe")
    assert {r: n for r, n in unsafe.items() if n > 1} == {}


def _assert_moved_to_other_workers(
    cluster: Cluster,
    kills: list[Kill],
    ended: dict[str, RunSummary],
    calls: list[Call],
    recoveries: dict[str, int],
) -> None:
    """Each run a killed worker held was taken over, and another worker ended it.

    A run whose ``charge`` call was cut off by the kill ends in doubt.
    """
    enders = _enders(cluster)
    workers = {w.pid for w in cluster.workers}
    for kill in kills:
        for run_id in kill.held:
            assert recoveries[run_id] >= 1, (run_id, kill)
            assert enders[run_id] in workers - {kill.pid}, (run_id, kill, enders[run_id])
        own = [c for c in calls if c.pid == kill.pid and c.step == "s3"]
        cut_off = {run_id for run_id, _ in _in_flight(own)}
        assert {r: ended[r].stop_reason for r in cut_off} == dict.fromkeys(cut_off, IN_DOUBT)


def _kill_one(cluster: Cluster, watch: psycopg.Connection[Any], rng: random.Random) -> Kill:
    """SIGKILL a random live worker, one holding runs if any does; what it held."""
    holding = _holders(watch, live=True)
    alive = cluster.alive()
    victim = rng.choice([w for w in alive if holding.get(w.pid)] or alive)
    cluster.kill(victim.pid)
    time.sleep(0.2)  # a commit it sent as it died is through before its runs are read
    index = cluster.workers.index(victim)
    held = frozenset(_holders(watch, live=False).get(victim.pid, ()))
    return Kill(pid=victim.pid, executor=_executor(cluster, index), at=time.time(), held=held)


def _holders(watch: psycopg.Connection[Any], *, live: bool) -> dict[int, list[str]]:
    """Running runs by the process id of their lease's owner (``host:pid:suffix``)."""
    query = "SELECT id, lease_owner FROM runs WHERE status = 'running' AND lease_owner IS NOT NULL"
    if live:
        query += " AND lease_expires_at > extract(epoch FROM now())"
    found: dict[int, list[str]] = defaultdict(list)
    for run_id, owner in watch.execute(query).fetchall():
        found[int(str(owner).split(":")[1])].append(str(run_id))
    return found


def _ended_count(watch: psycopg.Connection[Any]) -> int:
    row = watch.execute("SELECT count(*) FROM runs WHERE status IN ('ok', 'stopped')").fetchone()
    return int(row[0]) if row is not None else 0


def _enders(cluster: Cluster) -> dict[str, int]:
    """The process that ended each run, by run id: its lease's last owner (``host:pid:suffix``)."""
    with psycopg.connect(cluster.db) as conn:
        rows = conn.execute("SELECT id, lease_owner FROM runs").fetchall()
    return {str(run_id): int(str(owner).split(":")[1]) for run_id, owner in rows if owner}


def _attempts(cluster: Cluster) -> list[Attempt]:
    with psycopg.connect(cluster.db) as conn:
        rows = conn.execute(
            "SELECT run_id, step_id, side_effects, idempotency_key, state FROM attempts"
        ).fetchall()
    return [Attempt(run_id=r, step=s, side_effects=e, key=k, state=t) for r, s, e, k, t in rows]


def _again(calls: Iterable[Call]) -> Counter[str]:
    """How many steps began more than once, by tool."""
    return Counter(TOOL_OF[step] for (_, step), n in starts(calls).items() if n > 1)


def _in_flight(calls: Iterable[Call]) -> set[tuple[str, str]]:
    """The (run, step) calls that began and have not returned."""
    began = starts(calls)
    returned = Counter((c.run_id, c.step) for c in calls if c.event == "end")
    return {key for key, n in began.items() if n > returned[key]}


def _executor(cluster: Cluster, index: int) -> str:
    return f"{cluster.queue}-w{index}"  # as Cluster.start names its workers


def _local_cluster_version() -> str:
    """The version of the local cluster ``TEST_PG_URL`` names, which the test restarts."""
    host = make_url(admin_url()).host
    found = sorted(p.parent.name for p in Path("/etc/postgresql").glob("*/main"))
    if shutil.which("pg_ctlcluster") is None or host not in ("127.0.0.1", "localhost", None):
        pytest.skip("restarting the server needs a local cluster managed by pg_ctlcluster")
    assert len(found) == 1, f"one cluster 'main' expected in /etc/postgresql, got {found}"
    return found[0]


def _pg_ctl(version: str, *action: str) -> None:
    done = subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", *action],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, (action, done.stdout, done.stderr)


def _restart(version: str) -> None:
    """Restart the server as after a crash: no checkpoint, unflushed commits may be lost."""
    _pg_ctl(version, "restart", "-m", "immediate")


def _ready() -> bool:
    done = subprocess.run(
        ["pg_isready", "-h", "127.0.0.1", "-t", "5"], capture_output=True, check=False
    )
    return done.returncode == 0


@contextmanager
def _server_up_afterwards(version: str) -> Iterator[None]:
    """Whatever happens inside, leave the server accepting connections (other tests follow)."""
    try:
        yield
    finally:
        deadline = time.monotonic() + 90
        while not _ready() and time.monotonic() < deadline:
            time.sleep(0.5)
        if not _ready():
            _pg_ctl(version, "start")
            wait_for(_ready, timeout=60, what=lambda: "PostgreSQL did not come back")
