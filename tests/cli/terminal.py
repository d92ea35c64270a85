"""The command in a real terminal: a pseudo-terminal of a given size, and Ctrl-C typed into it.

A plain pipe hides what matters here: rich draws a live status only on a terminal, and
sizes tables from it. :func:`spawn` starts the installed ``taskdecomp`` (or any program) as
the session leader of a new pty, so ``\\x03`` reaches it as a terminal's Ctrl-C does.
"""

from __future__ import annotations

import errno
import fcntl
import os
import pty
import re
import select
import signal
import struct
import termios
import time
from dataclasses import dataclass, field

from tests.clitools import EXE

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]")


def plain(raw: bytes) -> str:
    """What a person reads: escape sequences gone, carriage returns as line ends."""
    text = _ANSI.sub("", raw.decode("utf-8", "replace"))
    return text.replace("\r\n", "\n").replace("\r", "\n")


@dataclass
class Terminal:
    """A program running in a pty: everything it wrote so far, and its exit status."""

    pid: int
    fd: int
    raw: bytearray = field(default_factory=bytearray)
    status: int | None = None

    @property
    def text(self) -> str:
        return plain(bytes(self.raw))

    def read_until(self, needle: str | re.Pattern[str], timeout: float = 60) -> str:
        """Read until ``needle`` shows (in :attr:`text`); fail after ``timeout`` seconds."""
        until = time.monotonic() + timeout
        while time.monotonic() < until:
            found = (
                needle.search(self.text) if isinstance(needle, re.Pattern) else needle in self.text
            )
            if found:
                return self.text
            if not self._read(0.1) and self.status is not None:
                break
        raise AssertionError(f"{needle!r} did not show; the terminal shows:\n{self.text}")

    def ctrl_c(self) -> None:
        """Type Ctrl-C: the terminal sends SIGINT to the program's process group."""
        os.write(self.fd, b"\x03")

    def wait(self, timeout: float = 60) -> int:
        """Read to the end; the exit code (``-N`` for a signal). Kills the program on timeout."""
        until = time.monotonic() + timeout
        while self.status is None and time.monotonic() < until:
            self._read(0.1)
            self._reap()
        if self.status is None:
            os.kill(self.pid, signal.SIGKILL)
            raise AssertionError(f"still running after {timeout}s:\n{self.text}")
        while self._read(0.05):
            pass
        os.close(self.fd)
        return self.status

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False
        try:
            chunk = os.read(self.fd, 65536)
        except OSError as exc:  # EIO: the program closed the terminal
            if exc.errno != errno.EIO:
                raise
            self._reap(block=True)
            return False
        self.raw.extend(chunk)
        return bool(chunk)

    def _reap(self, *, block: bool = False) -> None:
        if self.status is not None:
            return
        pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        if pid:
            self.status = os.waitstatus_to_exitcode(status)


def spawn(
    argv: list[str], *, columns: int = 80, rows: int = 40, env: dict[str, str] | None = None
) -> Terminal:
    """Start ``argv`` in a new ``columns`` x ``rows`` terminal, with ``env`` added."""
    environ = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(columns), **(env or {})}
    environ.pop("NO_COLOR", None)
    pid, fd = pty.fork()
    if pid == 0:  # the child: exec at once
        try:
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
            os.execve(argv[0], argv, environ)
        finally:
            os._exit(127)
    return Terminal(pid=pid, fd=fd)


def taskdecomp(*args: str, columns: int = 80, env: dict[str, str] | None = None) -> Terminal:
    """The installed command in a terminal."""
    return spawn([str(EXE), *args], columns=columns, env=env)
