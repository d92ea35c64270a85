"""``taskdecomp worker`` refuses a bad command line once, in the command's own process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.clitools import ENTRY
from tests.scale.conftest import Cluster


def test_a_bad_toolset_with_several_processes_is_one_error_and_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "missing.py"
    done = subprocess.run(
        [*ENTRY, "worker", "--db", "postgresql://postgres@127.0.0.1/unused", "--processes", "3",
         "--tools", f"gone={missing}"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, done.stderr
    assert "Traceback" not in done.stderr


CHANGED_DBOS = (
    sys.executable,
    "-c",
    "import dbos._core as core; del core.execute_dequeued_workflow; "
    "from taskdecomp_entry import main; main()",
)
"""The worker command on a DBOS whose internals changed (as another version's might)."""


def test_a_dbos_without_the_internals_a_worker_uses_is_one_error_at_start(
    cluster: Cluster,
) -> None:
    (worker,) = cluster.start(entry=CHANGED_DBOS)

    assert worker.wait(timeout=60) == 2, cluster.logs()
    err = cluster.stderr(worker.pid)
    assert "execute_dequeued_workflow" in err and "dbos>=3.4,<3.5" in err, err
    assert "Traceback" not in err
