"""The ``taskdecomp`` command line.

Exit codes: 0 when the work succeeded, 1 when it stopped for any other reason, 2 for a usage
or configuration error (one line on stderr, no traceback), 130 when interrupted (Ctrl-C).
"""

from __future__ import annotations

import sys

import click

from taskdecomp.cli import approvals, runs, serve, trees
from taskdecomp.cli._app import EXIT_INTERRUPTED, EXIT_USAGE, app
from taskdecomp.errors import ConfigError

__all__ = ["app", "approvals", "main", "runs", "serve", "trees"]


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI and exit with its code."""
    try:
        code = app.main(args=argv, prog_name="taskdecomp", standalone_mode=False)
    except click.UsageError as exc:
        _fail(exc.format_message())
    except click.ClickException as exc:
        _fail(exc.format_message())
    except click.Abort as exc:
        if isinstance(exc.__context__, KeyboardInterrupt):
            sys.exit(EXIT_INTERRUPTED)  # Ctrl-C before or outside a run: nothing to report
        _fail("aborted")
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    except ConfigError as exc:
        _fail(str(exc))
    sys.exit(code if isinstance(code, int) else 0)


def _fail(message: str) -> None:
    first = " ".join(message.split())
    print(f"taskdecomp: error: {first}", file=sys.stderr)
    sys.exit(EXIT_USAGE)
