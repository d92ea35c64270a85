"""The command run in this process, as the tests call it."""

from __future__ import annotations

import pytest

from taskdecomp.cli import main


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``taskdecomp ARGV`` in this process: its exit code, its stdout and its stderr.

    The output is what ``capsys`` captured since the test last read it.
    """
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    out, err = capsys.readouterr()
    code = exited.value.code
    return (code if isinstance(code, int) else 0), out, err
