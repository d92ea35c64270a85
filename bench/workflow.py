"""Workflow benchmark: wall time and model calls of the task loop, sequential and parallel.

    python bench/workflow.py [--repeat 3] [--tasks 10] [--latency-ms 200] [--parallel 1 2 4 10]

The built-in ``tasks`` workflow runs a list of ``--tasks`` independent tasks, each allowed
its own file only (``filesAllowed`` disjoint, no ``dependsOn``), in a fresh temporary
workspace per run, with a scripted model (rule form) that answers after ``--latency-ms``:

- ``implement_task``: writes its task's file, then finishes (2 model calls);
- ``task_spec_check``: passes its task with ``update_task``, then finishes (2 model calls);
- ``completeness_verification``: finishes at once (1 model call); then ``complete``.

Each ``--parallel`` value is one row (``max_parallel``), in four groups: in memory and with
a SQLite store (a file in a temporary directory), each in a plain folder and in a git
repository (every passed task is committed). The ideal is the model latency times the
longest chain of model calls: ``ceil(tasks / max_parallel) x 4 + 1`` (sequential: every
task's four calls one after another, then the verification's one). The ratio is the median
wall time over the ideal; the speedup is the group's sequential median over the row's.

Every run must end with ``success``, the workflow at ``complete`` and every task passed;
otherwise the script says which and exits with status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taskdecomp import RunResult, SqlStore
from taskdecomp.strategies.workflow.api import run_workflow
from taskdecomp.strategies.workflow.options import WorkflowOptions

MODEL_MS = 200
TASKS = 10
PARALLEL = (1, 2, 4, 10)
CALLS_PER_TASK = 4
"""implement_task: write, finish; task_spec_check: update_task, finish."""
TARGET_RATIO = 1.10
GROUPS = (("memory", False), ("memory", True), ("sqlite", False), ("sqlite", True))
"""Where the run is kept, and whether the workspace is a git repository."""
IDENTITY = ("-c", "user.name=bench", "-c", "user.email=bench@localhost")


@dataclass(frozen=True, kw_only=True, slots=True)
class Sample:
    """One run: its wall time, model calls, and what is wrong with its outcome (if any)."""

    wall: float
    llm_calls: int
    problem: str | None


def task_list(count: int) -> dict[str, Any]:
    """``count`` independent tasks, task N allowed ``pkg/mN.py`` only."""
    tasks = [
        {
            "id": f"T{no}",
            "title": f"module {no}",
            "summary": f"pkg/m{no}.py defines VALUE = {no}",
            "acceptanceCriteria": [f"pkg/m{no}.py defines VALUE = {no}"],
            "filesAllowed": [f"pkg/m{no}.py"],
            "dependsOn": [],
        }
        for no in range(1, count + 1)
    ]
    return {"schemaVersion": 1, "tasks": tasks}


def script(count: int, latency_ms: float) -> dict[str, Any]:
    """The scripted model's rules, matched on the phase, the task and the first turn."""
    phase = '"phase": "{}"'.format
    first = '"turns_left": 30'
    rules: list[tuple[str, Any]] = []
    for no in range(1, count + 1):
        on = f'"task": {{"id": "T{no}"'
        write = {"path": f"pkg/m{no}.py", "content": f"VALUE = {no}\n"}
        passed = {"task_id": f"T{no}", "status": "passed"}
        rules += [
            (f"{phase('implement_task')}.*{on}.*{first}", _call("write_file", write)),
            (f"{phase('implement_task')}.*{on}", _finish(f"T{no} written")),
            (f"{phase('task_spec_check')}.*{on}.*{first}", _call("update_task", passed)),
            (f"{phase('task_spec_check')}.*{on}", _finish(f"T{no} passed")),
        ]
    rules.append((phase("completeness_verification"), _finish("complete")))
    return {
        "rules": [{"match": pattern, "response": response} for pattern, response in rules],
        "latency_ms": latency_ms,
    }


def _call(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "call", "tool": tool, "args": args}


def _finish(result: str) -> dict[str, Any]:
    return {"kind": "finish", "result": result}


def ideal_seconds(count: int, parallel: int, latency_ms: float) -> float:
    """The model latency times the longest chain of model calls."""
    return (math.ceil(count / parallel) * CALLS_PER_TASK + 1) * latency_ms / 1000


def make_workspace(root: Path, git: bool) -> Path:
    """A workspace with a README (committed when ``git``)."""
    ws = root / "ws"
    ws.mkdir()
    (ws / "README.md").write_text("bench\n", encoding="utf-8")
    if git:
        _git(ws, "init", "-q", "-b", "main")
        _git(ws, "add", "-A")
        _git(ws, *IDENTITY, "commit", "-qm", "start")
    return ws


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, capture_output=True, check=True)


def one_run(count: int, parallel: int, latency_ms: float, stored: bool, git: bool) -> Sample:
    """Run the ``tasks`` workflow once in a fresh temporary directory."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ws = make_workspace(root, git)
        tasks = root / "tasks.json"
        tasks.write_text(json.dumps(task_list(count)), encoding="utf-8")
        model = root / "model.json"
        model.write_text(json.dumps(script(count, latency_ms)), encoding="utf-8")
        defaults = WorkflowOptions()
        options = WorkflowOptions(
            max_parallel=parallel,
            max_tasks=max(count, defaults.max_tasks),
            max_iterations=max(2 * count + 1, defaults.max_iterations),
        )
        store = SqlStore(f"sqlite:///{root / 'runs.db'}") if stored else None
        started = time.perf_counter()
        try:
            result = asyncio.run(
                run_workflow(
                    "tasks",
                    workspace=ws,
                    model=f"scripted:{model}",
                    tasks=tasks,
                    options=options,
                    store=store,
                )
            )
        except Exception as exc:  # run_workflow promises a result: an exception is a failure
            failure = f"raised {type(exc).__name__}: {exc}"
            return Sample(wall=time.perf_counter() - started, llm_calls=0, problem=failure)
        finally:
            if store is not None:
                store.close()
        wall = time.perf_counter() - started
        return Sample(
            wall=wall, llm_calls=result.usage.llm_calls, problem=problem(result, ws, count)
        )


def problem(result: RunResult, ws: Path, count: int) -> str | None:
    """What is wrong with a run's outcome (its stop, its final phase, its tasks), if anything."""
    if result.stop_reason != "success":
        return f"stopped with {result.stop_reason}: {result.message}"
    state = ws / ".taskdecomp"
    status = json.loads((state / "status.json").read_text(encoding="utf-8"))
    tasks = json.loads((state / "tasks.json").read_text(encoding="utf-8"))["tasks"]
    passed = [task["id"] for task in tasks if task["status"] == "passed"]
    if status["phase"] != "complete":
        return f"the workflow ended at {status['phase']!r}, not 'complete'"
    if len(passed) != count:
        return f"{len(passed)} of {count} tasks passed"
    return None


def group_rows(
    kept: str, git: bool, count: int, parallel: tuple[int, ...], latency_ms: float, repeat: int
) -> Iterator[tuple[tuple[str, ...], list[str]]]:
    """One group's rows, each with its runs' problems."""
    group = f"{kept}, {'git' if git else 'no git'}"
    expected = count * CALLS_PER_TASK + 1
    sequential: float | None = None
    for p in parallel:
        samples = [one_run(count, p, latency_ms, kept == "sqlite", git) for _ in range(repeat)]
        wall = statistics.median(s.wall for s in samples)
        sequential = wall if p == 1 else sequential
        ideal = ideal_seconds(count, p, latency_ms)
        calls = sorted({s.llm_calls for s in samples})
        problems = [f"{group}, max_parallel {p}: {s.problem}" for s in samples if s.problem]
        if problems:
            verdict = "FAILED"
        elif not ideal:
            verdict = "-"
        else:
            verdict = "ok" if calls == [expected] and wall / ideal <= TARGET_RATIO else "MISS"
        row = (
            group,
            str(p),
            "/".join(map(str, calls)),
            f"{wall:.2f} s",
            f"{ideal:.2f} s",
            f"{wall / ideal:.3f}" if ideal else "-",
            f"{sequential / wall:.2f}x" if sequential is not None else "-",
            verdict,
        )
        yield row, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per row (median)")
    parser.add_argument("--tasks", type=int, default=TASKS, help="independent tasks in the list")
    parser.add_argument("--latency-ms", type=float, default=MODEL_MS, help="model latency (ms)")
    parser.add_argument(
        "--parallel", type=int, nargs="+", default=list(PARALLEL), help="max_parallel of each row"
    )
    args = parser.parse_args(argv)
    parallel = tuple(sorted(set(args.parallel)))
    expected = args.tasks * CALLS_PER_TASK + 1

    print(
        f"workflow tasks, {args.tasks} tasks with disjoint files, model {args.latency_ms:g} ms, "
        f"median of {args.repeat}; target: {expected} model calls, ratio <={TARGET_RATIO}"
    )
    print(
        f"{'group':<15} {'parallel':>8} {'model':>5} {'wall':>9} {'ideal':>9} {'ratio':>6} "
        f"{'speedup':>7}  target"
    )
    problems: list[str] = []
    for kept, git in GROUPS:
        for row, found in group_rows(kept, git, args.tasks, parallel, args.latency_ms, args.repeat):
            group, p, calls, wall, ideal, ratio, speedup, verdict = row
            print(
                f"{group:<15} {p:>8} {calls:>5} {wall:>9} {ideal:>9} {ratio:>6} {speedup:>7}"
                f"  {verdict}",
                flush=True,
            )
            problems += found
    for line in problems:
        print(f"FAILED {line}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
