"""Scale-out benchmark: queued runs through 1, 2 and 4 worker processes on one PostgreSQL.

    python bench/scale.py [--runs 40] [--workers 1 2 4] [--concurrency 8] [--sequential 10]
                          [--latency-ms 200] [--tool-ms 100] [--host 127.0.0.1] [--user postgres]

Creates a database of its own on ``--host`` (``createdb``, user ``--user``) and drops it at
the end, with the ``taskdecomp worker`` processes it starts (``--concurrency`` runs at once
each), also when it fails or is interrupted. Every run is the same workload: a scripted
planner answers after ``--latency-ms`` with a 3-step plan (two independent tool steps, then
one that depends on both; the tool waits ``--tool-ms``), then the combine call answers after
``--latency-ms``: two model calls and two tool waves, ideally 600 ms.

- throughput: for each ``--workers`` value, that many workers are started and warmed up
  (each has executed a run), then ``--runs`` runs are submitted at once (from 4 threads,
  after a random pause as below); runs/s is the runs over the time from the first submit
  to the last run's stored end. A worker takes runs off the queue once a second (DBOS's
  polling interval), at most ``--concurrency`` minus those it is running.
- first step: from a run's submit (its stored start) to its first ``StepStarted`` event,
  p50 and p99. It includes the planner's call, and under load the wait for a free slot.
- per run: ``--sequential`` runs one after another, in this process (``taskdecomp.run``
  with a store on the same database) and queued through one idle worker (submit, wait for
  its end, pause a random 0 to 1 s so that submits do not fall in step with the worker's
  once-a-second look at the queue, submit the next); the overhead is the queued median
  minus the in-process one. Run time is the stored end minus the stored start (for a
  queued run: its submit), so it includes the wait for the worker to pick the run up.
- DBOS's floor: as many empty DBOS workflows as short runs, enqueued at once (a DBOS
  enqueue and a ``NOTIFY`` each, from 4 threads) and executed by one process that takes
  them off the queue as a worker takes runs (its ``Dispatcher``, woken by the same
  listener, starting each with DBOS's ``execute_dequeued_workflow``, ``--concurrency`` at
  once); the workflow only gives its slot back. Its runs/s is the most a queued short run
  could reach through DBOS on this machine, whatever taskdecomp does per run; its times
  are DBOS's: the workflow's creation to the record of its end.

Every run must end with ``success`` after its three steps; otherwise the script says which
and exits with status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select, text

from taskdecomp import run
from taskdecomp.run import RunId
from taskdecomp.scale import dispatch, engine, wakeup
from taskdecomp.scale.submit import submit
from taskdecomp.store import RunSummary, SqlStore, open_store, schema

MODEL_MS = 200
TOOL_MS = 100
RUNS = 40
SHORT_RUNS = 200
WORKERS = (1, 2)
CONCURRENCY = 8
SEQUENTIAL = 10
SUBMITTERS = 4
STEPS = 3
READY_SECONDS = 90.0
"""How long workers may take to start and execute their first run."""
POLL_SECONDS = 1.0
"""How often a DBOS worker looks for work on a queue (DBOS's default)."""
STOP_SECONDS = 20.0
"""How long a worker may take to stop on SIGTERM before it is killed."""
TOOLS = '''
import asyncio


async def work(name: str) -> dict:
    """Do a small piece of work."""
    await asyncio.sleep({seconds})
    return {{"done": name}}
'''
PLAN = {
    "kind": "plan",
    "steps": [
        {"id": "a", "title": "A", "tool": "work", "args": {"name": "a"}, "depends_on": []},
        {"id": "b", "title": "B", "tool": "work", "args": {"name": "b"}, "depends_on": []},
        {"id": "c", "title": "C", "tool": "work", "args": {"name": "c"}, "depends_on": ["a", "b"]},
    ],
}
GOAL = "benchmark"
FLOOR_QUEUE = "bench-floor"
"""The queue of the empty workflows that measure DBOS's floor."""
FLOOR_WORKFLOW = "bench.empty"


class BenchError(Exception):
    """The benchmark cannot go on (a worker died, runs did not end in time)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Setup:
    """Where the benchmark runs and the workloads' files."""

    db: str
    tools: Path
    model: Path
    logs: Path
    concurrency: int
    short_tools: Path
    """The short runs' toolset: the same plan with tools that return at once."""
    short_model: Path
    """The short runs' model: it answers at once."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Timing:
    """One ended run: stored start to end, start to first step, what is wrong with it."""

    run_seconds: float
    first_step: float
    problem: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Throughput:
    """One row: runs at once through some workers."""

    workers: int
    wall: float
    timings: list[Timing]
    empty: bool = False
    """Empty DBOS workflows (DBOS's floor), not runs."""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def write_workload(folder: Path, latency_ms: float, tool_ms: float) -> tuple[Path, Path]:
    """The toolset file and the scripted model's rules file."""
    tools = folder / "tools.py"
    tools.write_text(TOOLS.format(seconds=tool_ms / 1000), encoding="utf-8")
    script = {
        "rules": [
            {"match": "task decomposition planner", "response": PLAN},
            {"match": "reporting assistant", "response": "All done."},
        ],
        "latency_ms": latency_ms,
    }
    model = folder / "model.json"
    model.write_text(json.dumps(script), encoding="utf-8")
    return tools, model


@contextmanager
def database(host: str, user: str) -> Iterator[str]:
    """A new database on ``host``, dropped afterwards; yields its URL."""
    name = f"taskdecomp_bench_{os.getpid()}_{secrets.token_hex(3)}"
    _pg("createdb", host, user, name)
    try:
        yield f"postgresql://{user}@{host}/{name}"
    finally:
        _pg("dropdb", host, user, "--if-exists", "--force", name)


def _pg(command: str, host: str, user: str, *args: str) -> None:
    done = subprocess.run(
        [command, "-h", host, "-U", user, *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise BenchError(f"{command} failed: {done.stderr.strip()}")


# -- worker processes ---------------------------------------------------------------------


def start_worker(setup: Setup, no: int) -> subprocess.Popen[bytes]:
    """One ``taskdecomp worker`` process, its output in ``setup.logs``."""
    code = "import sys; from taskdecomp.cli import main; main(sys.argv[1:])"
    argv = [
        sys.executable, "-c", code, "worker", "--db", setup.db,
        "--concurrency", str(setup.concurrency), "--executor-id", f"bench-{no}",
        "--processes", "1",
        "--tools", f"bench={setup.tools}", "--model", f"fast=scripted:{setup.model}",
        "--tools", f"short={setup.short_tools}", "--model", f"zero=scripted:{setup.short_model}",
    ]  # fmt: skip
    return spawn(argv, setup.logs / f"worker-{no}.log")


def spawn(argv: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """``argv`` in a session of its own, without ``TASKDECOMP_`` settings, logging to a file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKDECOMP_")}
    with log_path.open("ab") as log:
        return subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            start_new_session=True,
        )  # fmt: skip


def stop_workers(procs: list[subprocess.Popen[bytes]]) -> list[str]:
    """SIGTERM every worker, then SIGKILL those still there; say which needed it."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    killed = []
    deadline = time.monotonic() + STOP_SECONDS
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            killed.append(f"worker {proc.pid} did not stop {STOP_SECONDS:g} s after SIGTERM")
    return killed


@contextmanager
def workers(
    setup: Setup, store: SqlStore, count: int, notes: list[str]
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` workers, each of which has executed a run; all stopped afterwards."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs = [start_worker(setup, no) for no in range(1, count + 1)]
        warm_up(setup, store, procs)
        yield procs
    finally:
        notes += stop_workers(procs)


def warm_up(setup: Setup, store: SqlStore, procs: list[subprocess.Popen[bytes]]) -> None:
    """Submit waves of runs until every worker process has executed one."""
    waiting = {proc.pid for proc in procs}
    deadline = time.monotonic() + READY_SECONDS
    wait_for_queue(store, procs, deadline)
    while waiting:
        ids = submit_all(setup, store, len(procs) * setup.concurrency)[0]
        wait_ended(store, ids, procs, deadline)
        waiting -= owner_pids(store, ids)


def wait_for_queue(
    store: SqlStore,
    procs: list[subprocess.Popen[bytes]],
    deadline: float,
    *,
    queue: str = engine.DEFAULT_QUEUE,
) -> None:
    """Wait until a worker has created DBOS's tables and registered ``queue``.

    Submitting needs DBOS's tables; only a worker's launch creates them.
    """
    tables = text("SELECT to_regclass('dbos.queues') IS NOT NULL")
    registered = text("SELECT EXISTS (SELECT 1 FROM dbos.queues WHERE name = :queue)")
    while True:
        with store.read() as conn:
            if (
                conn.execute(tables).scalar()
                and conn.execute(registered, {"queue": queue}).scalar()
            ):
                return
        check_alive(procs, deadline, "no worker registered the queue")
        time.sleep(0.1)


def check_alive(procs: list[subprocess.Popen[bytes]], deadline: float, late: str) -> None:
    """Raise when a worker has exited, or ``deadline`` has passed (saying ``late``)."""
    dead = [proc for proc in procs if proc.poll() is not None]
    if dead:
        raise BenchError(f"worker {dead[0].pid} exited with {dead[0].returncode}")
    if time.monotonic() > deadline:
        raise BenchError(late)


def owner_pids(store: SqlStore, ids: list[RunId]) -> set[int]:
    """The process ids of the workers that took ``ids`` (from each run's lease owner)."""
    runs = schema.runs
    with store.read() as conn:
        owners = conn.execute(select(runs.c.lease_owner).where(runs.c.id.in_(ids))).scalars()
        return {int(owner.split(":")[-2]) for owner in owners if owner}


# -- runs ---------------------------------------------------------------------------------


def submit_one(setup: Setup, store: SqlStore, *, short: bool = False) -> tuple[RunId, float]:
    """Queue a run of the workload (or the short one); its id and how long the submit took."""
    tools, model = ("short", "zero") if short else ("bench", "fast")
    started = time.perf_counter()
    run_id, _ = submit(GOAL, store=store, db=setup.db, tools=tools, model=model)
    return run_id, time.perf_counter() - started


def submit_all(
    setup: Setup, store: SqlStore, count: int, *, short: bool = False
) -> tuple[list[RunId], list[float]]:
    """Queue ``count`` runs at once from :data:`SUBMITTERS` threads."""
    with ThreadPoolExecutor(SUBMITTERS) as pool:
        done = list(pool.map(lambda _: submit_one(setup, store, short=short), range(count)))
    return [run_id for run_id, _ in done], [seconds for _, seconds in done]


def wait_ended(
    store: SqlStore,
    ids: list[RunId],
    procs: list[subprocess.Popen[bytes]],
    deadline: float,
) -> dict[RunId, RunSummary]:
    """Wait until every run of ``ids`` has ended (counted every 0.1 s); their summaries."""
    runs = schema.runs
    ended = (
        select(func.count())
        .select_from(runs)
        .where(runs.c.id.in_(ids), runs.c.status.not_in(("queued", "running")))
    )
    while True:
        with store.read() as conn:
            if conn.execute(ended).scalar_one() == len(set(ids)):
                break
        check_alive(procs, deadline, f"{len(set(ids))} runs did not all end")
        time.sleep(0.1)
    wanted = set(ids)
    return {s.run_id: s for s in store.list_runs() if s.run_id in wanted}


def timing(store: SqlStore, summary: RunSummary) -> Timing:
    """A stored run's times, and what is wrong with its outcome, if anything."""
    events = store.load_events(summary.run_id)
    starts = [event.at for event in events if event.kind == "StepStarted"]
    problem = None
    if summary.stop_reason != "success":
        problem = f"run {summary.run_id} stopped with {summary.stop_reason}"
    elif len(starts) != STEPS:
        problem = f"run {summary.run_id} started {len(starts)} steps, not {STEPS}"
    return Timing(
        run_seconds=(summary.finished_at or summary.started_at) - summary.started_at,
        first_step=(min(starts) if starts else summary.started_at) - summary.started_at,
        problem=problem,
    )


def in_process(setup: Setup, store: SqlStore, count: int) -> list[Timing]:
    """``count`` runs one after another in this process, stored in the same database."""
    model = f"scripted:{setup.model}"
    found = []
    for _ in range(count):
        result = asyncio.run(run(GOAL, tools=str(setup.tools), model=model, store=store))
        found.append(timing(store, store.load_run(result.run_id).summary))
    return found


def in_process_throughput(setup: Setup, store: SqlStore, count: int, *, short: bool) -> Throughput:
    """``count`` runs in this process, :attr:`Setup.concurrency` at once, stored in the database.

    The runs/s is measured as for queued runs: from the first stored start to the last end.
    """
    tools, model = (setup.short_tools, setup.short_model) if short else (setup.tools, setup.model)

    async def all_runs() -> list[RunId]:
        slots = asyncio.Semaphore(setup.concurrency)

        async def one() -> RunId:
            async with slots:
                done = await run(GOAL, tools=str(tools), model=f"scripted:{model}", store=store)
                return done.run_id

        return list(await asyncio.gather(*(one() for _ in range(count))))

    ids = asyncio.run(all_runs())
    summaries = {s.run_id: s for s in store.list_runs() if s.run_id in set(ids)}
    first = min(s.started_at for s in summaries.values())
    last = max(s.finished_at or s.started_at for s in summaries.values())
    timings = [timing(store, summary) for summary in summaries.values()]
    return Throughput(workers=0, wall=last - first, timings=timings)


def queued_one_by_one(
    setup: Setup, store: SqlStore, count: int, procs: list[subprocess.Popen[bytes]]
) -> tuple[list[Timing], list[float]]:
    """``count`` queued runs, each submitted after the one before has ended.

    A random pause of up to :data:`POLL_SECONDS` before each submit keeps the submits out
    of step with the worker's polling of the queue (which would make every wait the same).
    """
    found, submits = [], []
    for _ in range(count):
        time.sleep(random.uniform(0, POLL_SECONDS))
        run_id, seconds = submit_one(setup, store)
        ended = wait_ended(store, [run_id], procs, time.monotonic() + 60)
        found.append(timing(store, ended[run_id]))
        submits.append(seconds)
    return found, submits


def throughput(
    setup: Setup,
    store: SqlStore,
    count: int,
    procs: list[subprocess.Popen[bytes]],
    *,
    short: bool = False,
) -> Throughput:
    """Submit ``count`` runs at once (after a random pause, as one by one) and wait for them."""
    time.sleep(random.uniform(0, POLL_SECONDS))
    ids = submit_all(setup, store, count, short=short)[0]
    ended = wait_ended(store, ids, procs, time.monotonic() + 600)
    first = min(s.started_at for s in ended.values())
    last = max(s.finished_at or s.started_at for s in ended.values())
    timings = [timing(store, summary) for summary in ended.values()]
    return Throughput(workers=len(procs), wall=last - first, timings=timings)


# -- DBOS's floor: empty workflows through a worker's claim path -----------------------------


def floor_worker(db: str, concurrency: int) -> None:
    """Execute empty workflows of :data:`FLOOR_QUEUE` as a worker executes runs, until killed.

    What ``taskdecomp worker`` does around a run, and nothing of the run: DBOS launched
    with the same configuration and without its own queue polling, a :class:`Dispatcher`
    at ``concurrency`` woken by a :class:`~taskdecomp.scale.wakeup.Listener`, and a
    workflow whose body gives its slot back, as a delivery's does when its run ends.
    """
    module = engine.dbos()
    dispatcher = dispatch.Dispatcher(FLOOR_QUEUE, concurrency)

    @module.DBOS.workflow(name=FLOOR_WORKFLOW)  # type: ignore[untyped-decorator]
    def empty(no: int) -> int:
        dispatcher.done(str(module.DBOS.workflow_id))
        return no

    module.DBOS(config=engine.config(db, executor_id="bench-floor"))
    module.DBOS.listen_queues([])
    module.DBOS.launch()
    module.DBOS.register_queue(FLOOR_QUEUE, on_conflict="never_update")
    dispatch.require_internals(FLOOR_QUEUE)
    wakeup.Listener(engine.system_url(db), FLOOR_QUEUE, dispatcher.wake).start()
    dispatcher.wake()
    dispatcher.run(threading.Event())  # SIGTERM ends the process


def start_floor_worker(setup: Setup) -> subprocess.Popen[bytes]:
    """The process of :func:`floor_worker`, its output in ``setup.logs``."""
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        "from scale import floor_worker; floor_worker(sys.argv[1], int(sys.argv[2]))"
    )
    argv = [sys.executable, "-c", code, setup.db, str(setup.concurrency)]
    return spawn(argv, setup.logs / "worker-floor.log")


def enqueue_empty(setup: Setup, store: SqlStore, count: int) -> list[str]:
    """Queue ``count`` empty workflows at once from :data:`SUBMITTERS` threads, as submits do."""
    client = engine.shared_client(setup.db)

    def one(no: int) -> str:
        workflow_id = f"floor-{secrets.token_hex(8)}"
        options = {
            "workflow_name": FLOOR_WORKFLOW,
            "queue_name": FLOOR_QUEUE,
            "workflow_id": workflow_id,
            "app_version": engine.APP_VERSION,
        }
        client.enqueue(options, no)
        wakeup.notify(store, FLOOR_QUEUE)
        return workflow_id

    with ThreadPoolExecutor(SUBMITTERS) as pool:
        return list(pool.map(one, range(count)))


def wait_empty(
    store: SqlStore, ids: list[str], proc: subprocess.Popen[bytes], deadline: float
) -> list[tuple[str, int, int]]:
    """Wait until DBOS has recorded the end of every workflow of ``ids``.

    Returns:
        Each one's status, creation and last update (ms since the epoch).
    """
    ended = text(
        "SELECT status, created_at, updated_at FROM dbos.workflow_status "
        "WHERE workflow_uuid = ANY(:ids) AND status NOT IN ('ENQUEUED', 'PENDING')"
    )
    while True:
        with store.read() as conn:
            found = [(str(s), int(c), int(u)) for s, c, u in conn.execute(ended, {"ids": ids})]
        if len(found) == len(ids):
            return found
        check_alive([proc], deadline, f"{len(ids)} empty workflows did not all end")
        time.sleep(0.1)


def floor(setup: Setup, store: SqlStore, count: int, notes: list[str]) -> Throughput:
    """``count`` empty workflows at once through one :func:`floor_worker` (warmed up first)."""
    proc = start_floor_worker(setup)
    try:
        deadline = time.monotonic() + READY_SECONDS
        wait_for_queue(store, [proc], deadline, queue=FLOOR_QUEUE)
        wait_empty(store, enqueue_empty(setup, store, setup.concurrency), proc, deadline)
        time.sleep(random.uniform(0, POLL_SECONDS))
        found = wait_empty(store, enqueue_empty(setup, store, count), proc, time.monotonic() + 600)
    finally:
        notes += stop_workers([proc])
    timings = [
        Timing(
            run_seconds=(updated - created) / 1000,
            first_step=float("nan"),
            problem=None if status == "SUCCESS" else f"an empty workflow ended {status}",
        )
        for status, created, updated in found
    ]
    wall = (max(u for _, _, u in found) - min(c for _, c, _ in found)) / 1000
    return Throughput(workers=1, wall=wall, timings=timings, empty=True)


# -- the report ---------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


THROUGHPUT = "{:<20} {:>5} {:>5} {:>8} {:>6} {:>8} {:>8}  {:>8} {:>8}  {:>8} {:>8}"
THROUGHPUT_HEAD = [
    THROUGHPUT.format("", "", "", "", "", "x in", "x 1", "first step", "", "run", ""),
    THROUGHPUT.format(
        "runs through", "slots", "runs", "wall", "runs/s", "process", "worker",
        "p50", "p99", "p50", "p99",
    ),
]  # fmt: skip


def rate(row: Throughput) -> float:
    return len(row.timings) / row.wall if row.wall > 0 else float("nan")


def throughput_row(row: Throughput, concurrency: int, local: float, one: float | None) -> str:
    firsts = [t.first_step for t in row.timings]
    runs = [t.run_seconds for t in row.timings]
    label = "this process" if row.workers == 0 else f"queued, {row.workers} worker"
    label += "s" if row.workers > 1 else ""
    if row.empty:
        label = f"DBOS alone, {row.workers} worker"
    return THROUGHPUT.format(
        label,
        max(1, row.workers) * concurrency,
        len(runs),
        f"{row.wall:.2f} s",
        f"{rate(row):.1f}",
        f"{rate(row) / local:.2f}x",
        f"{rate(row) / one:.2f}x" if one and row.workers else "-",
        "-" if row.empty else ms(percentile(firsts, 0.5)),
        "-" if row.empty else ms(percentile(firsts, 0.99)),
        ms(percentile(runs, 0.5)),
        ms(percentile(runs, 0.99)),
    )


PER_RUN = "{:<17} {:>8} {:>8}  {:>8} {:>8}"


def per_run_rows(local: list[Timing], queued: list[Timing]) -> list[str]:
    rows = [
        PER_RUN.format("", "run", "", "first step", ""),
        PER_RUN.format("", "p50", "p99", "p50", "p99"),
    ]
    for label, timings in (("in process", local), ("queued, 1 worker", queued)):
        runs = [t.run_seconds for t in timings]
        firsts = [t.first_step for t in timings]
        rows.append(
            PER_RUN.format(
                label,
                ms(statistics.median(runs)),
                ms(percentile(runs, 0.99)),
                ms(statistics.median(firsts)),
                ms(percentile(firsts, 0.99)),
            )
        )
    gap = [_median_gap(queued, local, "run_seconds"), _median_gap(queued, local, "first_step")]
    rows.append(
        PER_RUN.format("overhead", f"{gap[0] * 1000:+.0f} ms", "", f"{gap[1] * 1000:+.0f} ms", "")
    )
    return rows


def _median_gap(queued: list[Timing], local: list[Timing], field: str) -> float:
    return statistics.median(getattr(t, field) for t in queued) - statistics.median(
        getattr(t, field) for t in local
    )


def bench(args: argparse.Namespace, setup: Setup, notes: list[str]) -> list[str]:
    """Every measurement, printed at the end; the runs' problems."""
    problems: list[str] = []
    store = open_store(setup.db)
    workloads = {True: args.short_runs, False: args.runs}
    try:
        local = in_process(setup, store, args.sequential)
        rows: dict[bool, list[Throughput]] = {
            short: [in_process_throughput(setup, store, count, short=short)]
            for short, count in workloads.items()
        }
        rows[True].insert(1, floor(setup, store, args.short_runs, notes))
        queued: list[Timing] = []
        submits: list[float] = []
        for count in args.workers:
            with workers(setup, store, count, notes) as procs:
                if count == 1:
                    queued, submits = queued_one_by_one(setup, store, args.sequential, procs)
                for short, runs in workloads.items():
                    rows[short].append(throughput(setup, store, runs, procs, short=short))
        if not queued:
            with workers(setup, store, 1, notes) as procs:
                queued, submits = queued_one_by_one(setup, store, args.sequential, procs)
        for short, found in rows.items():
            print()
            if short:
                print(f"short runs: model and tools 0 ms, {args.short_runs} runs at once")
                print(
                    "DBOS alone: as many empty DBOS workflows through a worker's claim path "
                    "(times: enqueued to recorded end)"
                )
            else:
                print(
                    f"model {args.latency_ms:g} ms, tools {args.tool_ms:g} ms: "
                    f"{args.runs} runs at once"
                )
            for line in THROUGHPUT_HEAD:
                print(line)
            one = next((rate(r) for r in found if r.workers == 1 and not r.empty), None)
            for row in found:
                print(throughput_row(row, setup.concurrency, rate(found[0]), one))
                problems += [t.problem for t in row.timings if t.problem]
        print()
        print(f"per run, {args.sequential} runs one after another (the slower workload)")
        for line in per_run_rows(local, queued):
            print(line)
        print(f"submit() p50 {ms(statistics.median(submits))}, p99 {ms(percentile(submits, 0.99))}")
        problems += [t.problem for t in local + queued if t.problem]
    finally:
        store.close()
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=RUNS, help="runs submitted at once per row")
    parser.add_argument(
        "--short-runs", type=int, default=SHORT_RUNS, help="short (0 ms) runs at once per row"
    )
    parser.add_argument(
        "--workers", type=int, nargs="+", default=list(WORKERS), help="worker processes per row"
    )
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY, help="runs per worker")
    parser.add_argument("--sequential", type=int, default=SEQUENTIAL, help="runs one by one")
    parser.add_argument("--latency-ms", type=float, default=MODEL_MS, help="model latency (ms)")
    parser.add_argument("--tool-ms", type=float, default=TOOL_MS, help="tool latency (ms)")
    parser.add_argument("--host", default="127.0.0.1", help="PostgreSQL server")
    parser.add_argument("--user", default="postgres", help="PostgreSQL user (creates databases)")
    args = parser.parse_args(argv)
    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1 (runs at once per worker)")
    args.workers = sorted(set(args.workers))
    ideal = 2 * args.latency_ms + 2 * args.tool_ms
    print(
        f"scale-out, model {args.latency_ms:g} ms, tools {args.tool_ms:g} ms: 2 model calls and "
        f"2 tool waves a run (ideal {ideal:g} ms); PostgreSQL on {args.host}"
    )
    print(
        f"throughput: runs submitted at once per row, {args.concurrency} runs at once per "
        "worker process (and in this process)"
    )
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            with database(args.host, args.user) as db:
                tools, model = write_workload(Path(tmp), args.latency_ms, args.tool_ms)
                (Path(tmp) / "short").mkdir()
                short_tools, short_model = write_workload(Path(tmp) / "short", 0, 0)
                setup = Setup(
                    db=db, tools=tools, model=model, logs=Path(tmp), concurrency=args.concurrency,
                    short_tools=short_tools, short_model=short_model,
                )  # fmt: skip
                problems = bench(args, setup, notes)
        except BenchError as exc:
            problems = [str(exc)]
        notes += worker_output(Path(tmp))
    for line in notes:
        print(f"note: {line}")
    for line in problems:
        print(f"FAILED {line}")
    return 1 if problems else 0


def worker_output(logs: Path, limit: int = 10) -> list[str]:
    """What the workers printed besides their banner (warnings, errors), first lines only."""
    lines = []
    for log in sorted(logs.glob("worker-*.log")):
        printed = log.read_text(encoding="utf-8", errors="replace").splitlines()
        lines += [f"{log.name}: {line}" for line in printed if not line.startswith("worker on")]
    return lines[:limit] + ([f"... {len(lines) - limit} more lines"] if len(lines) > limit else [])


if __name__ == "__main__":
    import signal

    def _terminated(signum: int, frame: object) -> None:
        raise SystemExit(143)  # unwinds through the finally blocks: workers and database go

    signal.signal(signal.SIGTERM, _terminated)
    raise SystemExit(main())
