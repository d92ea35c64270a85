"""Crash-harness child: start one stored run, maybe killing itself at a chosen moment.

Usage: ``python child.py DB_URL RUN_ID TOOLS SCRIPT READY_FILE``. ``CRASH_AT`` may be
``before_intent:<n>`` (step ``n`` started, nothing committed), ``after_return:<n>`` (its
tool returned, not yet checkpointed) or ``after_checkpoint:<n>`` (its checkpoint committed).
``CRASH_LEASE`` is the run's lease in seconds (a resume need not wait for it after a kill);
``CRASH_DURABILITY`` the run's durability (``async`` by default).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from taskdecomp import run
from taskdecomp.events import Event, ModelCalled, RunStarted, StepFinished, StepStarted
from taskdecomp.store import open_store

STEPS = 6


def should_die(event: Event, point: str, n: int) -> bool:
    """Whether ``event`` is the moment ``point:n`` names."""
    if isinstance(event, StepStarted):
        return (point, event.step_no) in (("before_intent", n), ("after_checkpoint", n + 1))
    if isinstance(event, StepFinished):
        return point == "after_return" and event.entry.step_no == n
    if isinstance(event, ModelCalled):
        return event.phase == "finalize" and point == "after_checkpoint" and n == STEPS
    return False


def watcher(point: str, n: int, ready: Path) -> Callable[[Event], None]:
    def on_event(event: Event) -> None:
        if isinstance(event, RunStarted):
            ready.touch()
        if should_die(event, point, n):
            os.kill(os.getpid(), signal.SIGKILL)

    return on_event


def main() -> None:
    url, run_id, tools, script, ready = sys.argv[1:6]
    point, _, n = os.environ.get("CRASH_AT", "").partition(":")
    store = open_store(url)
    result = asyncio.run(
        run(
            "crash harness",
            tools=tools,
            model=f"scripted:{script}",
            store=store,
            run_id=run_id,
            on_event=watcher(point, int(n or 0), Path(ready)),
            lease_seconds=float(os.environ.get("CRASH_LEASE", "30")),
            durability=os.environ.get("CRASH_DURABILITY", "async"),  # checked by run()
        )
    )
    print(result.stop_reason)


if __name__ == "__main__":
    main()
