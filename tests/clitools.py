"""The command as the tests run it: in this process, or in a child process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from taskdecomp.cli import main

EXE = Path(sys.executable).with_name("taskdecomp")
"""The installed command: the script pip wrote for the entry point, as a user runs it."""

CHILD = (sys.executable, "-c", "import sys; from taskdecomp.cli import main; main(sys.argv[1:])")
"""The command in a child process, through :func:`taskdecomp.cli.main`; its arguments follow."""

ENTRY = (sys.executable, "-c", "from taskdecomp_entry import main; main()")
"""The command in a child process as the console script starts it (Ctrl-C set up first)."""


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``taskdecomp ARGV`` in this process: its exit code, its stdout and its stderr.

    The output is what ``capsys`` captured since the test last read it.
    """
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    out, err = capsys.readouterr()
    code = exited.value.code
    return (code if isinstance(code, int) else 0), out, err
