"""What every command shares: the click group, common options, the store, model wiring.

Exit codes: 0 when the work succeeded, 1 when it stopped for any other reason, 2 for a usage
or configuration error (one line on stderr, no traceback), 3 when a run waits for approval,
130 when interrupted (Ctrl-C).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from taskdecomp import jsonsafe
from taskdecomp.cli.display import console, literal
from taskdecomp.durable import DURABILITIES
from taskdecomp.errors import ConfigError, StoreConfigError, StrictJSONError
from taskdecomp.models import Model, local, resolve_model
from taskdecomp.models.local import is_available
from taskdecomp.settings import OpenAISettings, Settings
from taskdecomp.store import SqlStore, normalize_url, open_store
from taskdecomp.tools import Toolset, load_toolset

EXIT_STOPPED = 1
EXIT_USAGE = 2
EXIT_PAUSED = 3
EXIT_INTERRUPTED = 130
"""Ctrl-C (SIGINT), as shells report a process it ended."""

DB_OPTION = click.option(
    "--db",
    metavar="URL",
    help="Run store: sqlite:///PATH, a file path or postgresql://user@host/db.  "
    "[env: TASKDECOMP_DATABASE_URL; default: runs.db in the data directory, TASKDECOMP_HOME]",
)


DURABILITY_OPTION = click.option(
    "--durability",
    type=click.Choice(DURABILITIES),
    help="How checkpoints reach the disk: async commits finished steps in groups and waits "
    "for the disk only before unsafe calls, at pauses and at the end; sync commits every "
    "step durably.  [env: TASKDECOMP_DURABILITY; default: async]",
)


class PipeClosed(Exception):
    """Whoever read stdout went away (``taskdecomp show ID | head -1``): end quietly."""


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:  # before click turns it into exit status 1
            raise PipeClosed from exc


@click.group(
    cls=_Group,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="taskdecomp")
def app() -> None:
    """Controllable task-decomposition agents: plan, validate, execute, combine."""


_debug: logging.Handler | None = None
"""The handler that prints debug logs (tool tracebacks), while ``--debug`` is on."""


def debug_enabled() -> bool:
    """Whether ``--debug`` (or ``TASKDECOMP_DEBUG=1``) asked for tracebacks."""
    return _debug is not None


def set_debug(on: bool) -> None:
    """Print tracebacks, or stop: of errors here, and of tools that raise (via logging)."""
    global _debug
    logger = logging.getLogger("taskdecomp")
    if on and _debug is None:
        _debug = _StderrHandler()
        _debug.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger.addHandler(_debug)
        logger.setLevel(logging.DEBUG)
    elif not on and _debug is not None:
        logger.removeHandler(_debug)
        logger.setLevel(logging.NOTSET)
        _debug = None


class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is now (the live status may have wrapped it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:
            self.handleError(record)


def _debug_flag(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        set_debug(True)


DEBUG_OPTION = click.option(
    "--debug",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_debug_flag,
    help="Print the traceback (file and line) when a toolset fails to import or a tool "
    "raises.  [env: TASKDECOMP_DEBUG=1]",
)


def _local_threads_flag(ctx: click.Context, param: click.Parameter, value: int | None) -> None:
    if value is not None:
        defaults = local.local_defaults()
        local.set_local_defaults(dataclasses.replace(defaults, n_threads=value))


LOCAL_THREADS_OPTION = click.option(
    "--local-threads",
    type=click.IntRange(min=1),
    expose_value=False,
    is_eager=True,
    callback=_local_threads_flag,
    help="CPU threads of the embedded model (local); default: the cores the machine's load "
    "leaves free, at most 4.  [env: TASKDECOMP_LOCAL_THREADS]",
)

GOAL_FILE_OPTION = click.option(
    "--goal-file",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    help="Read the goal from this file ('-': standard input) instead of GOAL.",
)


def read_goal(goal: str | None, goal_file: Path | None, *, required: bool = True) -> str | None:
    """The goal from GOAL, ``-`` (standard input) or ``--goal-file``.

    Raises:
        click.UsageError: none or both given (when ``required``), or the goal is empty.
        ConfigError: the goal file cannot be read.
    """
    if goal is not None and goal_file is not None:
        raise click.UsageError("give the goal as GOAL or with --goal-file, not both")
    if goal_file is not None:
        text: str | None = _read_text(goal_file).strip()
    elif goal == "-":
        text = sys.stdin.read().strip()
    else:
        text = goal
    if text is None:
        if required:
            raise click.UsageError(
                "Missing argument 'GOAL': give it, or --goal-file PATH, or - to read it "
                "from standard input"
            )
        return None
    if not text.strip():
        raise click.UsageError("the goal is empty; say in words what to achieve")
    return text


def _read_text(path: Path) -> str:
    if str(path) == "-":
        return sys.stdin.read()
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"goal file {str(path)!r} does not exist") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"goal file {str(path)!r} is not UTF-8 text: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read goal file {str(path)!r}: {exc.strerror or exc}") from None


def local_model_available() -> bool:
    """Whether the embedded model's extra is installed (tests replace this)."""
    return is_available()


@contextlib.contextmanager
def open_run_store(
    settings: Settings, db: str | None, *, create: bool = False, quiet: bool = False
) -> Iterator[SqlStore]:
    """The store named by ``--db``, the environment or the default, closed afterwards.

    Only ``create`` (``run``, ``decompose``) makes a new SQLite file, and says so on stderr
    unless ``quiet``; reading commands refuse a file that does not exist, so a mistyped
    ``--db`` is an error instead of an empty new store.

    Raises:
        StoreConfigError: the store cannot be opened, or (without ``create``) it does not exist.
    """
    url = settings.store_url(db)
    path = sqlite_file(url)
    new = path is not None and not path.exists()
    if new and not create:
        raise StoreConfigError(
            f"no run store at {str(path)!r}: nothing has run with it yet, or the path is "
            "mistyped; check --db / TASKDECOMP_DATABASE_URL (taskdecomp run creates it)"
        )
    store = open_store(url, busy_timeout=settings.busy_timeout)
    if new and not quiet:
        console(stderr=True).print(literal(f"created the run store {path}", "dim"), soft_wrap=True)
    try:
        yield store
    finally:
        store.close()


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite store URL; ``None`` for PostgreSQL and in-memory stores."""
    parsed = normalize_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    return None if database.startswith("file:") else Path(database).expanduser()


def build_models(
    planner: str,
    combiner: str | None,
    *,
    base_url: str | None,
    openai_settings: OpenAISettings,
) -> tuple[Model, Model | None]:
    """The planner's and combiner's models; ``--base-url`` goes to the ``openai:`` ones.

    Model strings are resolved here, before anything is opened or created, so a bad one is
    a usage error with nothing left behind.
    """
    specs = [planner] if combiner is None else [planner, combiner]
    if base_url and not any(spec.partition(":")[0] == "openai" for spec in specs):
        raise ConfigError(
            f"--base-url applies to openai: models only, not {planner!r}; "
            "use --model openai:MODEL with it"
        )

    def build(spec: str) -> Model:
        provider, _, rest = spec.partition(":")
        if provider != "openai":
            return resolve_model(spec)
        from taskdecomp.models.openai import openai_model

        return openai_model(rest, base_url=base_url, settings=openai_settings)

    return build(planner), build(combiner) if combiner is not None else None


def load_tools(source: str) -> Toolset:
    """Load a toolset and warn, on stderr, about each public function it skipped.

    Raises:
        ToolsetError: it cannot be loaded.
    """
    toolset = load_toolset(source)
    err = console(stderr=True)
    for name, why in toolset.skipped.items():
        err.print(
            literal(f"warning: toolset {source!r}: skipped {name!r}: {why}", "yellow"),
            soft_wrap=True,
        )
    return toolset


def names(allow: str | None) -> list[str] | None:
    return [name.strip() for name in allow.split(",") if name.strip()] if allow else None


def echo_json(data: Any) -> None:
    """Print ``data`` as indented, strict JSON; text that UTF-8 cannot carry is escaped.

    Raises:
        click.ClickException: ``data`` has no strict JSON form (a NaN kept by an older
            version, say); nothing is printed on stdout.
    """
    try:
        text = jsonsafe.dumps(data, indent=2, ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: keep it, escaped
            text = jsonsafe.dumps(data, indent=2, ensure_ascii=True)
    except StrictJSONError as exc:
        raise click.ClickException(f"cannot print strict JSON: {exc}") from exc
    click.echo(text)
