"""The ``taskdecomp`` command line.

Exit codes: 0 when the work succeeded, 1 when it stopped for any other reason or the store
failed while in use (a database gone, a full disk, a lost lease), 2 for a usage or
configuration error the command can fix (one line on stderr, no traceback unless
``--debug``), 3 when a run waits for approval, 130 when interrupted (Ctrl-C).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from types import ModuleType
from typing import NoReturn

import click

from taskdecomp.cli._app import (
    COMMANDS,
    EXIT_INTERRUPTED,
    EXIT_STOPPED,
    EXIT_USAGE,
    PipeClosed,
    app,
    debug_enabled,
    reset,
)
from taskdecomp.errors import ConfigError, TaskdecompError

__all__ = [
    "app",
    "approvals",
    "main",
    "mcp",
    "runs",
    "scale",
    "serve",
    "tools",
    "trees",
    "workflows",
]


def __getattr__(name: str) -> ModuleType:
    """Import a command module the first time it is named (they load on demand)."""
    if name not in {module for module, _ in COMMANDS.values()}:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module(f"{__name__}.{name}")


def main(argv: list[str] | None = None) -> NoReturn:
    """Entry point: run the CLI and exit with its code."""
    reset()  # a process may run several commands (tests do)
    try:
        code = app.main(args=argv, prog_name="taskdecomp", standalone_mode=False)
    except click.UsageError as exc:
        _fail(exc.format_message())
    except click.ClickException as exc:
        _fail(exc.format_message())
    except click.Abort as exc:
        if isinstance(exc.__context__, KeyboardInterrupt):
            _exit(EXIT_INTERRUPTED)  # Ctrl-C before or outside a run: nothing to report
        _fail("aborted")
    except KeyboardInterrupt:
        _exit(EXIT_INTERRUPTED)
    except PipeClosed:
        _exit(0, stdout_gone=True)  # the reader had what it wanted (| head)
    except TaskdecompError as exc:  # a store failing in use is not the command's fault
        if debug_enabled():
            import traceback  # here only: it costs every command a few milliseconds

            traceback.print_exception(exc)
        _fail(str(exc), code=EXIT_USAGE if isinstance(exc, ConfigError) else EXIT_STOPPED)
    _exit(code if isinstance(code, int) else 0)


def _fail(message: str, *, code: int = EXIT_USAGE) -> NoReturn:
    first = " ".join(message.split())
    print(f"taskdecomp: error: {first}", file=sys.stderr)
    _exit(code)


def _exit(code: int, *, stdout_gone: bool = False) -> NoReturn:
    """Exit with ``code``, at once and quietly when Ctrl-C comes again meanwhile.

    While the embedded model still works on a call the run abandoned (Ctrl-C, a deadline),
    the process ends without the interpreter's cleanup: that would wait for the call, or
    free the model under it.
    """
    if stdout_gone:  # nothing more can reach it; keep the final flush from failing
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    local = sys.modules.get("taskdecomp.models.local")  # not imported: no model to wait for
    if local is not None and local.busy():
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)
    sys.exit(code)
