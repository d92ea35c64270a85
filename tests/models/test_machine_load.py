"""The cores other processes keep busy, measured without this process's own share."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from taskdecomp.models.machine_load import CpuTimes, busy_cores, busy_from, read_cpu_times

LINUX = Path("/proc/stat").exists()


def test_busy_cores_are_the_non_idle_share_less_our_own() -> None:
    before, after = CpuTimes(total=1000, idle=600), CpuTimes(total=1400, idle=700)

    # 400 ticks, 100 idle: 75% of 4 cores busy, one of them ours
    assert busy_from(before, after, cores=4, own_seconds=0.5, wall_seconds=0.5) == 2.0
    assert busy_from(before, after, cores=4, own_seconds=0.0, wall_seconds=0.5) == 3.0
    assert busy_from(before, after, cores=4, own_seconds=9.0, wall_seconds=0.5) == 0.0
    assert busy_from(before, before, cores=4, own_seconds=0.0, wall_seconds=0.5) == 0.0


def test_cpu_times_are_read_from_the_all_cores_line(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  10 1 5 100 4 0 2 0 0 0\ncpu0 5 0 2 50 2 0 1 0 0 0\n")
    assert read_cpu_times(str(stat)) == CpuTimes(total=122, idle=104)

    stat.write_text("intr 1 2 3\n")
    with pytest.raises(ValueError, match="no 'cpu' line"):
        read_cpu_times(str(stat))


@pytest.mark.skipif(not LINUX, reason="/proc/stat is Linux's")
def test_another_process_spinning_counts() -> None:
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        assert (busy_cores(0.5) or 0.0) >= 0.25  # lenient: the machine may be shared
    finally:
        spinner.kill()
        spinner.wait()
