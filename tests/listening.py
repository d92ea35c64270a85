"""A server the tests start in a child process and reach over 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def listening(
    argv: Sequence[str], port: int, *, env: Mapping[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` in a child process, once it accepts connections on 127.0.0.1:``port``.

    Its stderr is kept and shown if it dies before listening. At the end it is terminated,
    and killed if it still holds on after 30 s (a call it waits for, say).
    """
    with tempfile.TemporaryFile() as stderr:
        process = subprocess.Popen(
            list(argv),
            env={**os.environ, **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                if process.poll() is not None:
                    stderr.seek(0)
                    raise AssertionError(f"{argv[0]} exited: {stderr.read().decode()[-2000:]}")
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, f"{argv[0]} did not listen in 60 s"
                    time.sleep(0.05)
            yield process
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
