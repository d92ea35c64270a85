"""Lease owner ids, and whether the process an id names is gone.

An owner id names the process that holds a run: ``HOST:PID:SUFFIX``, e.g.
``box:4242:9f3a1c.5d2e8a41.81234567``. The suffix is a random part, a *host key* and the
process's start time:

- the host key is a hash of the host name, the kernel's boot id and the process's PID
  namespace, so two containers on one kernel, or one host before and after a reboot, never
  share a key, and a PID is only ever compared with PIDs of the same namespace;
- the start time (clock ticks since boot, from ``/proc/PID/stat``) tells the process that
  took the lease from a later one that was given the same PID.

A lease whose owner ran on this host key and is gone (no such PID, a zombie, or a PID now
used by a process that started at another time) can be taken over at once: nobody can renew
it or write under it. A lease from another host key, or from an id this module cannot read
(an older form, or a name given by hand), is only taken over once it expires.
"""

from __future__ import annotations

import functools
import hashlib
import os
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")


@dataclass(frozen=True, kw_only=True, slots=True)
class Owner:
    """What an owner id says of the process that holds a lease."""

    host_key: str
    pid: int
    started: int | None
    """Clock ticks since boot when the process started; ``None`` where that is unknown."""


def new_owner_id() -> str:
    """An owner id for this process, e.g. ``box:4242:9f3a1c.5d2e8a41.81234567``."""
    started = _own_start(os.getpid())
    stamp = "-" if started is None else str(started)
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}.{host_key()}.{stamp}"


def parse(owner: str) -> Owner | None:
    """What ``owner`` says, or ``None`` when it is not an id :func:`new_owner_id` made."""
    _, _, rest = owner.partition(":")
    pid, _, suffix = rest.partition(":")
    parts = suffix.split(".")
    if len(parts) != 3 or not pid.isdigit() or not parts[1]:
        return None
    _, key, stamp = parts
    if stamp != "-" and not stamp.isdigit():
        return None
    return Owner(host_key=key, pid=int(pid), started=None if stamp == "-" else int(stamp))


def is_gone(owner: str) -> bool:
    """Whether ``owner`` names a process of this host that no longer runs.

    ``False`` whenever that cannot be known: another host, an id of another form, a process
    that may still be the owner.
    """
    parsed = parse(owner)
    if parsed is None or parsed.host_key != host_key():
        return False
    if parsed.pid == os.getpid():
        return parsed.started is not None and parsed.started != _own_start(parsed.pid)
    return not _alive(parsed.pid, parsed.started)


@functools.cache
def host_key() -> str:
    """A short hash of this host name, boot and PID namespace (see the module docstring)."""
    parts = [socket.gethostname(), _read(_PROC / "sys/kernel/random/boot_id")]
    try:
        parts.append(os.readlink(_PROC / "self/ns/pid"))
    except OSError:
        parts.append("")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:8]


def _alive(pid: int, started: int | None) -> bool:
    """Whether ``pid`` runs and, where ``started`` is known, is the process that started then."""
    stat = _read(_PROC / str(pid) / "stat")
    if not stat:
        return _signalable(pid) if not _PROC.joinpath("self").exists() else False
    state, start = _stat_fields(stat)
    if state in ("Z", "X"):  # a zombie, or dead: it will never write again
        return False
    return started is None or start == started


def _signalable(pid: int) -> bool:
    """Whether ``pid`` exists, where there is no ``/proc`` to read (PIDs may have been reused)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, owned by another user
        return True
    return True


@functools.cache
def _own_start(pid: int) -> int | None:
    """This process's start time, read once (keyed by ``pid``, so a forked child reads its own)."""
    stat = _read(_PROC / str(pid) / "stat")
    return _stat_fields(stat)[1] if stat else None


def _stat_fields(stat: str) -> tuple[str, int | None]:
    """The state and start time in a ``/proc/PID/stat`` line (its name may hold spaces)."""
    fields = stat.rpartition(")")[2].split()
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return "", None


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
