"""The ``taskdecomp`` console script's entry point.

It lives outside the ``taskdecomp`` package so that it runs before the package is imported:
Ctrl-C while the package loads (half a second or more on a cold disk) then ends the process
quietly with exit status 130, the shell's convention, instead of a ``KeyboardInterrupt``
traceback. ``taskdecomp.cli:main`` stays the command line itself.
"""

from __future__ import annotations

import os
import signal
from types import FrameType


def main() -> None:
    """Run the command line; Ctrl-C before it is loaded exits with 130 and prints nothing."""
    signal.signal(signal.SIGINT, _interrupted)
    from taskdecomp.cli import main as cli_main

    signal.signal(signal.SIGINT, signal.default_int_handler)
    cli_main()


def _interrupted(signum: int, frame: FrameType | None) -> None:
    os._exit(130)  # nothing has been printed or opened yet
