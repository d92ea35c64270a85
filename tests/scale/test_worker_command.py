"""``taskdecomp worker`` refuses a bad command line once, in the command's own process."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.clitools import ENTRY


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
