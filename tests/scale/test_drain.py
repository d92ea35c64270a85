"""A worker told to stop while a run outlasts its drain ends with that run, not before or never.

SIGTERM gives the runs in flight the drain (``DRAIN_SECONDS``) to finish; a run still
under way after it keeps its process alive until it ends (its steps are not cut short and
it is not stored as cancelled), and then the process exits with 0.
"""

from __future__ import annotations

import signal
import sys
from collections import Counter

from tests.scale.conftest import Cluster, starts, step
from tests.scale.test_workers import HOUR, listening

SHORT_DRAIN = (
    sys.executable,
    "-c",
    "import taskdecomp.scale.worker as w; w.DRAIN_SECONDS = 1; "
    "from taskdecomp_entry import main; main()",
)
"""The worker command with a one-second drain, which the run below outlasts."""
STEPS = ("s1", "s2", "s3", "s4", "s5", "s6")


def test_a_worker_stopped_during_a_longer_run_exits_once_the_run_has_ended(
    cluster: Cluster,
) -> None:
    model = cluster.model("slow", *(step(s, "look", n, ms=700) for n, s in enumerate(STEPS, 1)))
    (worker,) = cluster.start(*HOUR, entry=SHORT_DRAIN)
    listening(cluster, 1)
    run_id = cluster.submit("outlasts the drain", model)
    cluster.started(run_id, "s1", timeout=60)

    worker.send_signal(signal.SIGTERM)

    assert worker.wait(timeout=120) == 0, cluster.logs()
    summary = cluster.summary(run_id)
    assert (summary.status, summary.stop_reason) == ("ok", "success"), cluster.logs()
    calls = cluster.calls()
    assert starts(calls) == Counter({(run_id, s): 1 for s in STEPS})
    assert sorted(c.step for c in calls if c.event == "end") == sorted(STEPS)
