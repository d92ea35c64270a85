"""A queue's global limit: every worker together runs no more, and waiting runs are not left
for the fallback poll (set to an hour here) when a slot of the limit frees."""

from __future__ import annotations

from collections import Counter

from tests.scale.conftest import Call, Cluster, starts
from tests.scale.test_workers import HOUR, listening, looks


def most_runs_at_once(calls: list[Call]) -> int:
    """The most runs under way at one moment, a run lasting from its first call's start to
    its last call's end, whichever workers made them."""
    spans: dict[str, list[float]] = {}
    for c in calls:
        span = spans.setdefault(c.run_id, [c.t, c.t])
        span[0], span[1] = min(span[0], c.t), max(span[1], c.t)
    edges = sorted([(a, 1) for a, _ in spans.values()] + [(b, -1) for _, b in spans.values()])
    busy = most = 0
    for _, change in sorted(edges, key=lambda e: (e[0], e[1])):
        busy += change
        most = max(most, busy)
    return most


def test_runs_waiting_on_a_global_limit_are_taken_as_slots_free(cluster: Cluster) -> None:
    model = cluster.model("plan", *looks(200))
    cluster.start("--concurrency", "4", "--global-concurrency", "2", *HOUR)
    listening(cluster, 1)
    cluster.start("--concurrency", "4", *HOUR)  # leaves the queue's limit as it is
    listening(cluster, 2)

    run_ids = [cluster.submit(f"limited {n}", model) for n in range(6)]

    ended = cluster.ended(run_ids, timeout=90)
    assert {s.stop_reason for s in ended.values()} == {"success"}
    calls = cluster.calls()
    assert starts(calls) == Counter({(r, s): 1 for r in run_ids for s in ("s1", "s2", "s3")})
    assert most_runs_at_once(calls) == 2


def test_one_worker_below_a_global_limit_takes_every_waiting_run(cluster: Cluster) -> None:
    model = cluster.model("plan", *looks(100))
    cluster.start("--concurrency", "4", "--global-concurrency", "2", *HOUR)
    listening(cluster, 1)

    run_ids = [cluster.submit(f"limited {n}", model) for n in range(6)]

    ended = cluster.ended(run_ids, timeout=90)
    assert {s.stop_reason for s in ended.values()} == {"success"}
    assert most_runs_at_once(cluster.calls()) == 2
