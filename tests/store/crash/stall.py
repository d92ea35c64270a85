"""Resume a run, then stall the whole process just before its third step.

Usage: ``python stall.py DB_URL RUN_ID DIR LEASE_SECONDS``. When step 3 starts (before its
``unsafe`` intent is written), the event handler touches ``DIR/stalled.<pid>`` and blocks the
event loop until ``DIR/wake`` exists, as a long pause of the process would: the heartbeat
cannot renew the lease meanwhile. The result is printed as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

from taskdecomp import resume
from taskdecomp.events import Event, StepStarted
from taskdecomp.store import open_store


def main() -> None:
    url, run_id, directory, lease = sys.argv[1:5]
    here = Path(directory)

    def stall(event: Event) -> None:
        if isinstance(event, StepStarted) and event.step_no == 3:
            (here / f"stalled.{os.getpid()}").touch()
            while not (here / "wake").exists():
                time.sleep(0.02)

    store = open_store(url)
    result = asyncio.run(resume(run_id, store=store, on_event=stall, lease_seconds=float(lease)))
    store.close()
    print(json.dumps(result.to_dict()))


if __name__ == "__main__":
    main()
