"""Owner ids: what they say of their process, and when that process is known to be gone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from taskdecomp import owners


def exited_child_owner() -> str:
    """The owner id a process made before it exited (and was reaped)."""
    made = subprocess.run(
        [sys.executable, "-c", "from taskdecomp.owners import new_owner_id; print(new_owner_id())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return made.stdout.strip()


def forged(pid: int, *, started: int | None, key: str | None = None) -> str:
    stamp = "-" if started is None else str(started)
    return f"box:{pid}:abcdef.{key or owners.host_key()}.{stamp}"


def start_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rpartition(")")[2].split()[19])


def test_an_owner_id_names_this_host_this_process_and_its_start() -> None:
    made = owners.new_owner_id()
    parsed = owners.parse(made)
    assert parsed is not None
    assert (parsed.pid, parsed.host_key, parsed.started) == (
        os.getpid(),
        owners.host_key(),
        start_of(os.getpid()),
    )
    assert made.split(":")[1] == str(os.getpid())  # host:pid:suffix, as messages show it


def test_this_process_is_not_gone_whatever_lease_it_took() -> None:
    assert not owners.is_gone(owners.new_owner_id())
    assert owners.new_owner_id() != owners.new_owner_id()  # two leases of one process differ


def test_a_process_that_exited_is_gone() -> None:
    owner = exited_child_owner()
    assert owners.parse(owner) is not None
    assert owners.is_gone(owner)


def test_a_killed_process_not_yet_reaped_is_gone() -> None:
    code = (
        "import time; from taskdecomp.owners import new_owner_id; "
        "print(new_owner_id(), flush=True); time.sleep(600)"
    )
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout is not None
            owner = child.stdout.readline().strip()
            assert not owners.is_gone(owner)  # alive: its lease stands
            child.kill()
            os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # a zombie, not reaped
            assert owners.is_gone(owner)
        finally:
            child.kill()


def test_a_pid_reused_by_a_later_process_is_gone() -> None:
    parent = os.getppid()
    assert not owners.is_gone(forged(parent, started=start_of(parent)))
    assert owners.is_gone(forged(parent, started=start_of(parent) - 1))


def test_another_host_or_an_unreadable_id_is_never_known_gone() -> None:
    gone = owners.parse(exited_child_owner())
    assert gone is not None
    assert not owners.is_gone(forged(gone.pid, started=gone.started, key="00000000"))
    for owner in (f"box:{gone.pid}:9f3a1c", "host:7:alive", "", "a:b:c.d.e", "x:1:y..-"):
        assert not owners.is_gone(owner), owner


def test_a_pid_with_an_unknown_start_is_gone_only_once_it_no_longer_runs() -> None:
    gone = owners.parse(exited_child_owner())
    assert gone is not None
    assert owners.is_gone(forged(gone.pid, started=None))
    assert not owners.is_gone(forged(os.getppid(), started=None))
