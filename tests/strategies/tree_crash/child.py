"""Tree-crash child: start, resume or approve one stored ``tree`` run; maybe die on the way.

Usage::

    python child.py run URL RUN_ID SCRIPT PLAN_ID OPTIONS
    python child.py resume URL RUN_ID
    python child.py approve URL RUN_ID

``run`` executes stored plan ``PLAN_ID`` with the ``tree`` strategy, the toolset next to
this file and the model ``logged:SCRIPT`` (:mod:`model`); ``OPTIONS`` is a JSON object of
:class:`~taskdecomp.TreeOptions` fields. ``resume`` and ``approve`` go on with a stored run
through :func:`taskdecomp.resume_sync` and :func:`taskdecomp.approve_sync`, as a fresh
process that knows nothing but the store.

Every event is written as a JSON line (``n``, ``event``, ``detail``) to
``TREE_CRASH_EVENTS``. ``TREE_CRASH_AT`` may make the process kill itself with SIGKILL:
``count:<n>`` at its ``n``-th event; ``event:<Class>`` or ``event:<Class>:<detail>`` at the
first such event (``detail``: the event's node id, model phase or tool); ``write:<node
name>`` right after the children of that node are stored (committed, before the process
reads anything back; ``write:<node name>:<k>``: after the ``k``-th such write);
``tool:...`` and ``model:...`` are read by the toolset and the model.
``TREE_CRASH_DURABILITY`` is the run's durability (default ``async``). The result is
printed as JSON.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from model import register

from taskdecomp import TreeOptions, approve_sync, open_store, resume_sync, run_sync
from taskdecomp.events import Event
from taskdecomp.run import RunResult
from taskdecomp.store.trees import TreeRepository
from taskdecomp.tree import NewNode, NodeId, PlanNode, PlanTreeId

HERE = Path(__file__).parent
LEASE = 600.0
"""Far longer than a test: only its owner's death lets another process take the run."""


def _detail(event: Event) -> str:
    for name in ("node_id", "phase", "tool"):
        value = getattr(event, name, None)
        if value is not None:
            return str(value)
    return ""


def dies_at(event: Event, n: int, spec: str) -> bool:
    """Whether the ``n``-th event of the process, ``event``, is where ``spec`` says to die."""
    kind, _, rest = spec.partition(":")
    if kind == "count":
        return n == int(rest)
    if kind == "event":
        name, _, detail = rest.partition(":")
        return type(event).__name__ == name and detail in ("", _detail(event))
    return False


def watcher(path: Path, spec: str) -> Callable[[Event], None]:
    """Writes each event down, and kills the process where ``spec`` says."""
    seen = 0
    dead = False

    def on_event(event: Event) -> None:
        nonlocal seen, dead
        seen += 1
        line = {"n": seen, "event": type(event).__name__, "detail": _detail(event)}
        with path.open("a", encoding="utf-8") as log:
            log.write(json.dumps(line) + "\n")
        if not dead and dies_at(event, seen, spec):
            dead = True
            os.kill(os.getpid(), signal.SIGKILL)

    return on_event


def die_after_writing(spec: str) -> None:
    """Make the process die right after the write ``spec`` names (``write:<name>[:<k>]``)."""
    kind, _, name = spec.partition(":")
    if kind != "write":
        return
    head, _, count = name.rpartition(":")
    name, nth = (head, int(count)) if count.isdigit() else (name, 1)
    writes = 0
    write = TreeRepository.write_children

    def written(
        self: TreeRepository,
        plan_id: PlanTreeId,
        parent_id: NodeId | None,
        children: Sequence[NewNode],
        *,
        replace: bool = False,
    ) -> list[PlanNode]:
        nonlocal writes
        stored = write(self, plan_id, parent_id, children, replace=replace)
        parent = self.get_plan_tree(plan_id).node(parent_id) if parent_id is not None else None
        if parent is not None and parent.name == name:
            writes += 1
            if writes == nth:
                os.kill(os.getpid(), signal.SIGKILL)
        return stored

    TreeRepository.write_children = written  # type: ignore[method-assign]  # the kill point


def main() -> None:
    mode, url, run_id, *rest = sys.argv[1:]
    register()
    store = open_store(url)
    spec = os.environ.get("TREE_CRASH_AT", "")
    die_after_writing(spec)
    common = {
        "store": store,
        "on_event": watcher(Path(os.environ["TREE_CRASH_EVENTS"]), spec),
        "lease_seconds": LEASE,
        "durability": os.environ.get("TREE_CRASH_DURABILITY", "async"),
    }
    result: RunResult
    if mode == "run":
        script, plan_id, options = rest
        result = run_sync(
            "",  # the goal is the stored plan's title
            tools=str(HERE / "tools.py"),
            model=f"logged:{script}",
            strategy="tree",
            tree=TreeOptions(**json.loads(options)),
            plan=int(plan_id),
            run_id=run_id,
            **common,
        )
    elif mode == "resume":
        result = resume_sync(run_id, **common)
    elif mode == "approve":
        result = approve_sync(run_id, **common)
    else:
        raise SystemExit(f"unknown mode {mode!r}; use run, resume or approve")
    store.close()
    print(json.dumps(result.to_dict()))


if __name__ == "__main__":
    main()
