"""How many CPU cores other processes keep busy right now.

The one-minute load average is a poor guide for choosing llama.cpp's threads: it lags by a
minute and counts this process too, so a process that has just decoded on two threads
would see its own load and pick one. :func:`busy_cores` samples the machine's CPU time
(``/proc/stat``) over a fraction of a second and takes this process's own share out.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

SAMPLE_SECONDS = 0.25
"""How long :func:`busy_cores` watches the machine."""


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """The machine's CPU time so far, in clock ticks, summed over its cores."""

    total: int
    idle: int


def read_cpu_times(path: str = "/proc/stat") -> CpuTimes:
    """The machine's CPU times from ``/proc/stat`` (its first, all-cores line).

    Raises:
        OSError: there is no such file (not Linux) or it cannot be read.
        ValueError: its first line is not the all-cores line.
    """
    with open(path, encoding="ascii") as stat:
        fields = stat.readline().split()
    if not fields or fields[0] != "cpu":
        raise ValueError(f"{path}: no 'cpu' line first")
    # user nice system idle iowait irq softirq steal (guest time is inside user already)
    ticks = [int(value) for value in fields[1:9]]
    return CpuTimes(total=sum(ticks), idle=ticks[3] + (ticks[4] if len(ticks) > 4 else 0))


def busy_from(
    before: CpuTimes, after: CpuTimes, *, cores: int, own_seconds: float, wall_seconds: float
) -> float:
    """Cores busy between two readings, less this process's own CPU time over that span."""
    ticks = after.total - before.total
    if ticks <= 0 or wall_seconds <= 0:
        return 0.0
    busy = (1 - (after.idle - before.idle) / ticks) * cores
    return max(0.0, min(float(cores), busy - own_seconds / wall_seconds))


def busy_cores(seconds: float = SAMPLE_SECONDS) -> float | None:
    """Cores other processes kept busy over the next ``seconds``; ``None`` where unknown.

    Blocks for ``seconds``. ``None`` on platforms without ``/proc/stat``.
    """
    try:
        before, own, began = read_cpu_times(), time.process_time(), time.perf_counter()
        time.sleep(seconds)
        after = read_cpu_times()
    except (OSError, ValueError):
        return None
    return busy_from(
        before,
        after,
        cores=os.cpu_count() or 1,
        own_seconds=time.process_time() - own,
        wall_seconds=time.perf_counter() - began,
    )
