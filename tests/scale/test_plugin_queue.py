"""Queued runs of a plugin's strategy, provider and toolset source (``tests/plugin``).

``taskdecomp submit --strategy one_call`` stores the strategy's options with the run; a
worker started with ``--tools notes=notes:DIR`` and ``--base-url`` executes it.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.scale.conftest import Cluster, cli


def test_a_worker_runs_a_submitted_run_of_the_plugins_strategy(
    cluster: Cluster, tmp_path: Path
) -> None:
    notes = tmp_path / "notes"
    cluster.start("--tools", f"notes=notes:{notes}", "--base-url", "http://127.0.0.1:9/v1")
    submitted = json.loads(
        cli(
            "submit", "one queued note", "--tools", "notes", "--model", "echo:queued",
            "--strategy", "one_call", "--option", "tool=note",
            "--option", 'args={"text": "queued"}',
            "--queue", cluster.queue, "--db", cluster.db, "--json",
        ).stdout
    )  # fmt: skip
    planned = json.loads(
        cli(
            "submit", "three queued notes", "--tools", "notes", "--model", "echo:queued",
            "--queue", cluster.queue, "--db", cluster.db, "--json",
        ).stdout
    )  # fmt: skip
    ids = [submitted["run_id"], planned["run_id"]]
    ended = cluster.ended(ids, timeout=60)
    assert {ended[i].stop_reason for i in ids} == {"success"}
    one = cluster.store.load_run(ended[ids[0]].run_id)
    assert one.config["strategy"] == "one_call"
    answer = json.loads(one.answer or "")
    assert answer["last"] == "queued" and 1 <= answer["notes"] <= 4  # the runs run at once
    three = cluster.store.load_run(ended[ids[1]].run_id)
    assert three.answer == "queued said three times, via http://127.0.0.1:9/v1"
    written = (notes / "notes.txt").read_text().splitlines()  # the two runs interleave
    assert sorted(written) == ["queued", "queued 1", "queued 2", "queued 3"]
