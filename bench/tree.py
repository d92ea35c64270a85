"""Tree benchmark: a plan tree worked through against its ideal; as needed against upfront.

    python bench/tree.py [--repeat 3] [--sections 4] [--tasks 10] [--hard 2]
                         [--model-ms 200] [--tool-ms 100] [--parallel 8 40] [--quick]

``--quick`` is a small run for the tests (2 sections of 4 tasks, 20 ms and 10 ms, once).
The script exits with status 1, saying why, when a tree run does not succeed, a hard task
is left undone, or as needed makes no fewer model calls than upfront.

The goal "Launch a developer conference in Berlin" has ``--sections`` sections of
``--tasks`` tasks each (4 x 10 = 40). A task is done by one tool call, ``do_task(task)``,
after ``--tool-ms``; a scripted model answers every call after ``--model-ms``. Every run
keeps its plan tree and its checkpoints in a SQLite file of its own.

(1) **Critical path.** The tree stored as it is (the root, its sections, their tasks: 3
    levels, 40 leaves), executed with ``decompose=none``. A leaf costs 2 model turns
    (``call``, ``finish``) and 1 tool call; an inner node, 1 roll-up call. At most
    ``max_parallel`` leaves or roll-ups hold a slot at once, so the ideal is::

        ceil(leaves / max_parallel) x (2 x model + tool) + roll-up levels x model

    No leaf runs without a slot, so the last one ends no sooner than the first term; the
    roll-ups of its section and of the root come after it, one model call each. With
    ``max_parallel`` at least the number of leaves, that is the tree's critical path.
    Target: the median wall time within 1.05x of the ideal.
(2) **As needed against upfront**, from the goal alone. ``--hard`` tasks of each section
    (8 of 40) cannot be done in one go: ``do_task`` refuses them, and wants their 3 parts
    done one by one. As needed, the executor tries the goal, each section and each task;
    it asks to split the goal and the sections, asks to split half the hard tasks (it
    sees they are big), and calls the tool for the other half (which fails). Upfront, the
    decomposer grows the whole tree first: like any decomposer that has not tried the
    tasks, it cannot tell the hard ones from the others, so every task gets its 3 parts
    (the depth budget, 3, stops there). Same model, same answers, node budget room for
    both. Target: as needed makes fewer model calls.
(3) **Flat plans** on the same goal, for contrast: ``plan_execute`` and ``replan`` with a
    planner that writes the tasks as one wave of tool steps, with the hard tasks and with
    none, beside ``tree`` as needed on the same two goals. A flat plan is cheap when every
    task is one tool call (2 model calls for 40 tasks); a task that fails stops it, and
    nothing in it can split a task into parts.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import re
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taskdecomp import Budget, ScriptedModel, SqlStore, Toolset, TreeOptions, open_store, run
from taskdecomp.run import RunId
from taskdecomp.store.trees import TreeRepository
from taskdecomp.strategies.tree import Decompose
from taskdecomp.strategies.tree.view import run_tree
from taskdecomp.tree import NewNode

GOAL = "Launch a developer conference in Berlin"
SECTIONS = ("Venue", "Speakers", "Sponsors", "Attendees", "Program", "Marketing")
PARTS = 3
TARGET_RATIO = 1.05
ROLLUP = "All of its subtasks are done."
REPORT = "The conference is ready to launch."


@dataclass(frozen=True, kw_only=True, slots=True)
class Shape:
    """The goal's tree: its sections, their tasks, and which tasks are hard."""

    sections: int
    tasks: int
    hard: int
    """Hard tasks per section."""

    def section_names(self) -> list[str]:
        """The sections, in order ("Venue", "Speakers", ...; numbered past the sixth)."""
        many = len(SECTIONS)
        return [
            SECTIONS[no % many] + (f" {no // many + 1}" if no >= many else "")
            for no in range(self.sections)
        ]

    def task_names(self, section: str) -> list[str]:
        """The tasks of ``section``, in order."""
        return [f"{section} task {no}" for no in range(1, self.tasks + 1)]

    def all_tasks(self) -> list[str]:
        """Every task of the goal, section by section."""
        return [task for section in self.section_names() for task in self.task_names(section)]

    def leaves(self) -> int:
        """Tasks in all."""
        return self.sections * self.tasks

    def easy(self) -> Shape:
        """The same goal with no hard task."""
        return Shape(sections=self.sections, tasks=self.tasks, hard=0)

    def hard_tasks(self) -> list[str]:
        """The hard tasks, spread over each section (the 3rd and 8th of 10)."""
        picked = []
        for section in self.section_names():
            names = self.task_names(section)
            for no in range(self.hard):
                picked.append(names[min(len(names) - 1, int((no + 0.5) * self.tasks / self.hard))])
        return picked

    def judged_big(self) -> list[str]:
        """The hard tasks the executor sees are big (every other one): it asks to split."""
        return self.hard_tasks()[::2]

    def parts(self, task: str) -> list[str]:
        """The parts a task is split into."""
        return [f"{task} part {no}" for no in range(1, PARTS + 1)]

    def most_nodes(self) -> int:
        """Every node a run may add below the goal: sections, tasks, parts of every task."""
        return self.sections * (1 + self.tasks * (1 + PARTS))


@dataclass(frozen=True, kw_only=True, slots=True)
class Sample:
    """One run, as measured."""

    wall: float
    stop: str
    llm_calls: int
    phases: dict[str, int]
    tool_calls: int
    tokens: int
    nodes: int
    done: int
    """Tasks of the goal done (a hard one: all its parts done)."""
    recovered: int
    """Hard tasks done."""


# -- the tools and the model -----------------------------------------------------------


def toolset(shape: Shape, tool_ms: float) -> Toolset:
    hard = set(shape.hard_tasks())

    async def do_task(task: str) -> dict[str, Any]:
        """Do one task of the conference plan; a big task must be done part by part."""
        await asyncio.sleep(tool_ms / 1000)
        if task in hard:
            raise ValueError(f"{task!r} is too big to do in one go: do its parts one by one")
        return {"done": task}

    return Toolset.from_functions([do_task])


def _step(name: str) -> str:
    """The executor's request for the node named ``name``."""
    return rf'"step": \{{"id": "node-[0-9.]+", "title": {re.escape(_quoted(name))}'


def _target(name: str) -> str:
    """The decomposer's request for the node named ``name``."""
    return rf'"target_task": \{{"id": [0-9]+, "name": {re.escape(_quoted(name))}'


def _quoted(name: str) -> str:
    return f'"{name}"'


def _children(names: list[str], *, leaf: bool) -> dict[str, Any]:
    return {
        "children": [
            {"name": name, "instruction": f"{name}.", "dependencies": [], "leaf": leaf}
            for name in names
        ]
    }


def model(shape: Shape, model_ms: float) -> ScriptedModel:
    """Answers for every phase: the executor, the decomposer, roll-ups, flat plans."""
    rules: list[Any] = [(r'"turns": \[\{', {"kind": "finish", "result": "done"}, "execute")]
    big = {GOAL, *shape.section_names(), *shape.judged_big()}
    for name in sorted(big):
        why = {"kind": "decompose", "reason": f"{name} has several parts"}
        rules.append((_step(name), why, "execute"))
    for task in shape.all_tasks():
        for name in (task, *shape.parts(task)):
            call = {"kind": "call", "tool": "do_task", "args": {"task": name}}
            rules.append((_step(name), call, "execute"))
    rules.append((_target(GOAL), _children(shape.section_names(), leaf=False), "decompose"))
    for section in shape.section_names():
        tasks = _children(shape.task_names(section), leaf=False)
        rules.append((_target(section), tasks, "decompose"))
    for task in shape.all_tasks():
        rules.append((_target(task), _children(shape.parts(task), leaf=True), "decompose"))
    rules += [
        (".", ROLLUP, "rollup"),
        (".", flat_plan(shape), "plan"),
        (".", REPORT, "finalize"),
        (".", {"kind": "respond", "response": REPORT}, "replan"),
    ]
    return ScriptedModel(rules=rules, latency_ms=model_ms)


def flat_plan(shape: Shape) -> dict[str, Any]:
    """Every task as a tool step, all in one wave."""
    steps = [
        {"id": f"t{no}", "title": task, "tool": "do_task", "args": {"task": task}, "depends_on": []}
        for no, task in enumerate(shape.all_tasks(), start=1)
    ]
    return {"kind": "plan", "steps": steps}


# -- runs -------------------------------------------------------------------------------


@contextmanager
def fresh_store() -> Iterator[SqlStore]:
    with tempfile.TemporaryDirectory(prefix="bench-tree-") as folder:
        store = open_store(f"sqlite:///{Path(folder) / 'runs.db'}")
        try:
            yield store
        finally:
            store.close()


def stored_tree(store: SqlStore, shape: Shape) -> int:
    """The goal's tree with its sections and tasks, stored: its plan id."""
    repo = TreeRepository(store)
    tree = repo.create_plan(GOAL, [NewNode(name=GOAL)])
    root = tree.nodes[0].id
    sections = repo.write_children(
        tree.id, root, [NewNode(name=name) for name in shape.section_names()]
    )
    for section in sections:
        tasks = [NewNode(name=task, leaf=True) for task in shape.task_names(section.name)]
        repo.write_children(tree.id, section.id, tasks)
    return int(tree.id)


def budget(shape: Shape, parallel: int) -> Budget:
    many = 10 * shape.most_nodes() + 100
    return Budget(
        max_plan_steps=shape.sections * shape.tasks,
        max_execute_steps=many,
        max_tool_calls=many,
        max_seconds=900,
        max_parallel=parallel,
    )


def measure(
    shape: Shape,
    args: argparse.Namespace,
    *,
    strategy: str,
    decompose: Decompose = "as-needed",
    stored: bool = False,
    parallel: int = 8,
) -> Sample:
    """Run the goal once with ``strategy`` in a fresh store."""
    scripted = model(shape, args.model_ms)
    with fresh_store() as store:
        options: dict[str, Any] = {}
        if strategy == "tree":
            widest = max(shape.sections, shape.tasks, PARTS)
            options["tree"] = TreeOptions(
                decompose=decompose,
                max_nodes=shape.most_nodes(),
                max_children=widest,
            )
        if stored:
            options["plan"] = stored_tree(store, shape)
        started = time.perf_counter()
        result = asyncio.run(
            run(
                "" if stored else GOAL,
                tools=toolset(shape, args.tool_ms),
                model=scripted,
                store=store,
                strategy=strategy,
                budget=budget(shape, parallel),
                **options,
            )
        )
        wall = time.perf_counter() - started
        nodes, done = _tree_outcome(store, result.run_id) if strategy == "tree" else (0, set())
    if strategy != "tree":
        done = {entry.plan_step.title for entry in result.history}
    phases: dict[str, int] = {}
    for call in scripted.calls:
        phases[call.phase] = phases.get(call.phase, 0) + 1
    return Sample(
        wall=wall,
        stop=result.stop_reason,
        llm_calls=result.usage.llm_calls,
        phases=phases,
        tool_calls=result.usage.tool_calls,
        tokens=result.usage.tokens_in + result.usage.tokens_out,
        nodes=nodes,
        done=len(done & set(shape.all_tasks())),
        recovered=len(done & set(shape.hard_tasks())),
    )


def _tree_outcome(store: SqlStore, run_id: str) -> tuple[int, set[str]]:
    """The nodes of the run's tree, and the names of those that ended ``ok``."""
    drawn = run_tree(store, store.load_run(RunId(run_id)))
    assert drawn is not None, "a tree run has its tree"
    ok = {node["name"] for node in drawn["nodes"] if node["status"] == "ok"}
    return len(drawn["nodes"]), ok


def median(shape: Shape, args: argparse.Namespace, **how: Any) -> Sample:
    """The sample with the median wall time of ``--repeat`` runs (its counts are the same)."""
    samples = sorted((measure(shape, args, **how) for _ in range(args.repeat)), key=_wall)
    calls = {sample.llm_calls for sample in samples}
    if len(calls) > 1:
        raise SystemExit(f"model calls differ between identical runs: {sorted(calls)}")
    return samples[(len(samples) - 1) // 2]


def _wall(sample: Sample) -> float:
    return sample.wall


# -- the three tables -------------------------------------------------------------------


def rollup_levels(shape: Shape) -> int:
    """Roll-up calls on the path from the last leaf to the root (one child: no call)."""
    return int(shape.tasks > 1) + int(shape.sections > 1)


def ideal_ms(shape: Shape, args: argparse.Namespace, parallel: int) -> float:
    """See (1) in the module docstring: the last wave of leaves, then its roll-ups."""
    leaf = 2 * args.model_ms + args.tool_ms
    return math.ceil(shape.leaves() / parallel) * leaf + rollup_levels(shape) * args.model_ms


def critical_path(shape: Shape, args: argparse.Namespace, problems: list[str]) -> list[str]:
    """Table (1): the stored tree executed as it is, against its ideal."""
    easy = shape.easy()
    lines = [
        f"(1) critical path: the stored tree (root, {shape.sections} sections, {shape.tasks} "
        f"tasks each: {shape.leaves()} leaves), decompose none, median of {args.repeat}",
        "ideal = ceil(leaves / max_parallel) x (2 model + 1 tool) "
        f"+ {rollup_levels(shape)} roll-up levels x model",
        f"{'max_parallel':>12} {'leaves':>6} {'model':>5} {'tools':>5} {'wall':>10} "
        f"{'ideal':>10} {'ratio':>6}  target",
    ]
    for parallel in args.parallel:
        sample = median(
            easy, args, strategy="tree", decompose="none", stored=True, parallel=parallel
        )
        ideal = ideal_ms(easy, args, parallel)
        ratio = sample.wall * 1000 / ideal if ideal else math.inf
        verdict = "ok" if sample.stop == "success" and ratio <= TARGET_RATIO else "MISS"
        if sample.stop != "success":
            problems.append(f"(1) max_parallel {parallel}: {sample.stop}")
        lines.append(
            f"{parallel:>12} {shape.leaves():>6} {sample.llm_calls:>5} {sample.tool_calls:>5} "
            f"{sample.wall * 1000:>8.1f}ms {ideal:>8.0f}ms {ratio:>6.3f}  "
            f"<={TARGET_RATIO} {verdict}"
        )
    return lines


def as_needed_upfront(
    shape: Shape, args: argparse.Namespace, problems: list[str]
) -> tuple[list[str], Sample]:
    """Table (2), and the as-needed run (for table (3))."""
    lines = [
        f"(2) as needed against upfront, from the goal: {len(shape.hard_tasks())} of "
        f"{shape.leaves()} tasks need splitting into {PARTS} parts, max_parallel 8, "
        f"median of {args.repeat}",
        f"{'mode':<9} {'model':>5} {'execute':>7} {'decompose':>9} {'rollup':>6} {'tools':>5} "
        f"{'tokens':>7} {'nodes':>5} {'wall':>10} {'done':>5} {'hard':>4}  stop",
    ]
    samples: dict[Decompose, Sample] = {}
    for mode in ("as-needed", "upfront"):
        sample = samples[mode] = median(shape, args, strategy="tree", decompose=mode)
        phases = sample.phases
        if sample.stop != "success" or sample.recovered < len(shape.hard_tasks()):
            problems.append(f"(2) {mode}: {sample.stop}, {sample.recovered} hard tasks done")
        lines.append(
            f"{mode:<9} {sample.llm_calls:>5} {phases.get('execute', 0):>7} "
            f"{phases.get('decompose', 0):>9} {phases.get('rollup', 0):>6} "
            f"{sample.tool_calls:>5} {sample.tokens:>7} {sample.nodes:>5} "
            f"{sample.wall * 1000:>8.1f}ms {sample.done:>5} {sample.recovered:>4}  {sample.stop}"
        )
    needed, upfront = samples["as-needed"], samples["upfront"]
    fewer = needed.llm_calls < upfront.llm_calls
    if not fewer:
        problems.append("(2) as needed made no fewer model calls than upfront")
    lines.append(
        f"as needed: {needed.llm_calls} model calls, upfront {upfront.llm_calls} "
        f"({needed.llm_calls / upfront.llm_calls:.2f}x); tokens "
        f"{needed.tokens / upfront.tokens:.2f}x; wall {needed.wall / upfront.wall:.2f}x; "
        f"target: fewer model calls {'ok' if fewer else 'MISS'}"
    )
    return lines, needed


def flat(shape: Shape, args: argparse.Namespace, tree_hard: Sample) -> list[str]:
    """Table (3): the goal as flat plans, beside the tree as needed."""
    lines = [
        f"(3) flat plans on the same goal: {shape.leaves()} tasks as one wave of tool steps, "
        f"max_parallel 8, median of {args.repeat}",
        f"{'strategy':<12} {'hard':>4} {'model':>5} {'tools':>5} {'tokens':>7} {'wall':>10} "
        f"{'done':>5} {'recovered':>9}  stop",
    ]
    for goal in (shape, shape.easy()):
        count = len(goal.hard_tasks())
        for strategy in ("plan_execute", "replan", "tree"):
            if strategy == "tree" and goal is shape:
                sample = tree_hard  # the as-needed run of (2)
            else:
                sample = median(goal, args, strategy=strategy)
            lines.append(
                f"{strategy:<12} {count:>4} {sample.llm_calls:>5} {sample.tool_calls:>5} "
                f"{sample.tokens:>7} {sample.wall * 1000:>8.1f}ms {sample.done:>5} "
                f"{f'{sample.recovered}/{count}':>9}  {sample.stop}"
            )
    return lines


def _machine() -> str:
    try:
        load = f", load average {os.getloadavg()[0]:.1f}"
    except OSError:
        load = ""
    return f"{os.cpu_count()} cores{load}"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per row (median)")
    parser.add_argument("--sections", type=int, default=4, help="sections of the goal")
    parser.add_argument("--tasks", type=int, default=10, help="tasks per section")
    parser.add_argument("--hard", type=int, default=2, help="hard tasks per section")
    parser.add_argument("--model-ms", type=float, default=200, help="model latency (ms)")
    parser.add_argument("--tool-ms", type=float, default=100, help="tool latency (ms)")
    parser.add_argument(
        "--parallel",
        type=int,
        nargs="+",
        help="max_parallel of each row of (1) (default: 8 and every leaf at once)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a small run: 2 x 4 tasks, 20/10 ms, once"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat, args.sections, args.tasks, args.hard = 1, 2, 4, 1
        args.model_ms, args.tool_ms, args.parallel = 20, 10, [4, 8]
    args.parallel = args.parallel or [8, args.sections * args.tasks]
    if not (args.repeat >= 1 and args.sections >= 1 and args.tasks >= 1):
        parser.error("--repeat, --sections and --tasks take whole numbers from 1")
    if not 0 <= args.hard <= args.tasks:
        parser.error("--hard takes a whole number from 0 to --tasks")
    if min(args.parallel) < 1 or args.model_ms < 0 or args.tool_ms < 0:
        parser.error("--parallel takes whole numbers from 1; latencies are never negative")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    shape = Shape(sections=args.sections, tasks=args.tasks, hard=args.hard)
    print(
        f"tree, model {args.model_ms:g} ms, tools {args.tool_ms:g} ms, SQLite store, {_machine()}"
    )
    problems: list[str] = []
    for line in critical_path(shape, args, problems):
        print(line, flush=True)
    print()
    lines, needed = as_needed_upfront(shape, args, problems)
    for line in lines:
        print(line, flush=True)
    print()
    for line in flat(shape, args, needed):
        print(line, flush=True)
    for problem in problems:
        print(f"FAILED {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
