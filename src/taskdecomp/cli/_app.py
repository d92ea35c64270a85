"""What every command shares: the click group, common options, the store, model wiring.

Exit codes: 0 when the work succeeded, 1 when it stopped for any other reason, 2 for a usage
or configuration error (one line on stderr, no traceback), 3 when a run waits for approval,
130 when interrupted (Ctrl-C).

Nothing heavy is imported here, nor by ``--help``, ``--version`` or a usage error: a
command's module is imported when that command is used (:data:`COMMANDS`), the settings are
read just before a command runs, and the store, the models and the toolsets when asked for.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from taskdecomp._version import __version__
from taskdecomp.durability import DURABILITIES
from taskdecomp.errors import ConfigError, StoreConfigError, StrictJSONError

if TYPE_CHECKING:
    import logging

    from taskdecomp.durability import Durability
    from taskdecomp.engine import Environment
    from taskdecomp.models import Model
    from taskdecomp.models.outputs import OutputMode
    from taskdecomp.roles import Role
    from taskdecomp.settings import Settings
    from taskdecomp.store import SqlStore
    from taskdecomp.tools import Toolset

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


BASE_URL_OPTION = click.option(
    "--base-url",
    help="The server of every model whose provider connects to one (openai:, or a "
    "plugin's).  [env: OPENAI_BASE_URL for openai:]",
)

OUTPUT_MODE_OPTION = click.option(
    "--output-mode",
    type=click.Choice(("native", "tool", "json", "prompt")),
    help="How models of a provider that connects to a server are asked for JSON: native "
    "(a schema the server enforces), tool (a forced tool call), json (JSON mode, schema in "
    "the prompt) or prompt (schema in the prompt only). A refused mode falls back down "
    "this list.  [env: TASKDECOMP_OUTPUT_MODE; default: native]",
)

DURABILITY_OPTION = click.option(
    "--durability",
    type=click.Choice(DURABILITIES),
    help="How checkpoints reach the disk: async commits finished steps in groups and waits "
    "for the disk only before unsafe calls, at pauses and at the end; sync commits every "
    "step durably.  [env: TASKDECOMP_DURABILITY; default: async]",
)


def _trace_content(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        from taskdecomp.telemetry import trace_content

        trace_content(True)


TRACE_CONTENT_OPTION = click.option(
    "--trace-content",
    is_flag=True,
    expose_value=False,
    callback=_trace_content,
    help="Put prompts, tool arguments and observations into OpenTelemetry spans (secrets "
    "replaced); without it spans hold names, ids, counts and outcomes only.  "
    "[env: TASKDECOMP_TRACE_CONTENT]",
)


COMMANDS: dict[str, tuple[str, str]] = {
    "approve": (
        "approvals",
        "Approve what RUN_ID waits for (a plan or a tool call) and continue the run.",
    ),
    "cancel": ("scale", "Cancel a queued run before it starts, or a running one within a second."),
    "decompose": (
        "trees",
        "Decompose GOAL into a new plan tree, or a stored plan (--plan), or one node (--node).",
    ),
    "mcp": ("mcp", "Serve MCP tools that run goals as controlled agents (stdio, or --http PORT)."),
    "reject": (
        "approvals",
        "End RUN_ID, which waits for approval, with stop reason approval_rejected.",
    ),
    "resume": (
        "runs",
        "Continue RUN_ID after a crash, a kill or a max_seconds stop, without repeating steps.",
    ),
    "run": (
        "runs",
        "Plan GOAL with the model, validate the plan, execute it with the tools, combine.",
    ),
    "runs": ("runs", "List stored runs: id, status, stop reason, start time, duration and goal."),
    "serve": (
        "serve",
        "Serve the HTTP API, the live event streams and the web page at http://HOST:PORT/.",
    ),
    "show": ("runs", "Print a stored run: its plan, trace and history."),
    "submit": ("scale", "Queue a run of GOAL and print its id at once; a worker executes it."),
    "tools": ("tools", "List the tools of each TOOLSET as the planner will see them."),
    "tree": ("trees", "Show stored plan tree PLAN_ID, or list the stored plans."),
    "worker": ("scale", "Take runs off a queue and execute them, until Ctrl-C or SIGTERM."),
    "workflow": ("workflows", "Workflows: YAML phases with guarded transitions over a task list."),
}
"""Each command's module in :mod:`taskdecomp.cli` and the first paragraph of its help.

``taskdecomp --help`` lists the commands from here, so it imports none of them; a test
checks that it agrees with the commands themselves.
"""


class PipeClosed(Exception):
    """Whoever read stdout went away (``taskdecomp show ID | head -1``): end quietly."""


class _Command(click.Command):
    def invoke(self, ctx: click.Context) -> Any:
        _configure()  # its arguments parsed: the command is about to run
        return super().invoke(ctx)


class _Group(click.Group):
    """A group whose commands' modules are imported only when a command is used."""

    command_class = _Command
    group_class = type  # subgroups (workflow) are of this class too

    def __init__(
        self, *args: Any, lazy: Mapping[str, tuple[str, str]] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            importlib.import_module(f"taskdecomp.cli.{self.lazy[cmd_name][0]}")  # registers it
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List the commands as click does, from :data:`COMMANDS` for those not imported."""
        commands = [
            (name, self.commands.get(name) or click.Command(name, help=self.lazy[name][1]))
            for name in self.list_commands(ctx)
        ]
        shown = [(name, command) for name, command in commands if not command.hidden]
        if shown:
            limit = formatter.width - 6 - max(len(name) for name, _ in shown)
            with formatter.section("Commands"):
                formatter.write_dl(
                    [(name, command.get_short_help_str(limit)) for name, command in shown]
                )

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:  # before click turns it into exit status 1
            raise PipeClosed from exc


@click.group(
    cls=_Group,
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="taskdecomp")
def app() -> None:
    """Controllable task-decomposition agents: plan, validate, execute, combine."""


_settings: Settings | None = None
"""The settings this command read (:func:`load_settings`)."""
_local_threads: int | None = None
"""``--local-threads``, when given: it wins over ``TASKDECOMP_LOCAL_THREADS``."""


def load_settings() -> Settings:
    """The settings from the environment and ``.env``, read once per command.

    Raises:
        ConfigError: a variable does not parse.
    """
    global _settings
    if _settings is None:
        from taskdecomp.settings import load_settings as read

        _settings = read()
    return _settings


def _configure() -> None:
    """Put the settings to use: ``TASKDECOMP_DEBUG`` and the embedded model's defaults.

    Log handlers redact secrets from here on (:func:`taskdecomp.redact.install_log_filter`).
    """
    from taskdecomp import redact

    redact.install_log_filter()
    from taskdecomp.settings import otel_variables

    otel = otel_variables()
    if otel:  # else OpenTelemetry is not even imported
        from taskdecomp.telemetry import setup

        setup.configure(otel)
    try:
        settings = load_settings()
    except ConfigError:
        return  # a command that needs the settings reports it when it reads them
    if settings.debug:
        set_debug(True)
    if settings.trace_content:
        from taskdecomp.telemetry import trace_content

        trace_content(True)
    from taskdecomp.models import local

    threads = settings.local_threads if _local_threads is None else _local_threads
    local.set_local_defaults(
        local.LocalDefaults(n_threads=threads, state_dir=settings.llama_state_dir())
    )


def reset() -> None:
    """Forget what an earlier command in this process read or turned on."""
    global _settings, _local_threads
    _settings = _local_threads = None
    set_debug(False)
    content = sys.modules.get("taskdecomp.telemetry.content")  # not imported: nothing to undo
    if content is not None:
        content.trace_content(False)


_debug: logging.Handler | None = None
"""The handler that prints debug logs (tool tracebacks), while ``--debug`` is on."""


def debug_enabled() -> bool:
    """Whether ``--debug`` (or ``TASKDECOMP_DEBUG=1``) asked for tracebacks."""
    return _debug is not None


def set_debug(on: bool) -> None:
    """Print tracebacks, or stop: of errors here, and of tools that raise (via logging)."""
    global _debug
    if on == (_debug is not None):
        return  # as asked already; logging, a few milliseconds, need not be imported
    import logging

    logger = logging.getLogger("taskdecomp")
    if _debug is None:
        _debug = _stderr_handler()
        logger.addHandler(_debug)
        logger.setLevel(logging.DEBUG)
    else:
        logger.removeHandler(_debug)
        logger.setLevel(logging.NOTSET)
        _debug = None


def _stderr_handler() -> logging.Handler:
    import logging

    class StderrHandler(logging.Handler):
        """Writes to whatever ``sys.stderr`` is now (the live status may have wrapped it)."""

        def emit(self, record: logging.LogRecord) -> None:
            try:
                sys.stderr.write(self.format(record) + "\n")
            except Exception:
                self.handleError(record)

    from taskdecomp.redact import add_log_filter

    handler = StderrHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    add_log_filter(handler)  # tool tracebacks may hold a key
    return handler


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
    global _local_threads
    if value is not None:
        _local_threads = value


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
                "from standard input (or --plan ID to execute a stored plan tree)"
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
    from taskdecomp.models.local import is_available

    return is_available()


@contextlib.contextmanager
def needs_extra(command: str, extra: str, *packages: str) -> Iterator[None]:
    """Turn the import of a missing ``packages`` in the block into a usage error.

    The error names the extra that installs them; a package missing from an installed one
    (a broken install) is left as it is.

    Raises:
        ConfigError: one of ``packages`` is not installed.
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in packages:
            raise
        raise ConfigError(
            f"'taskdecomp {command}' needs the {extra} extra: pip install 'taskdecomp[{extra}]'"
        ) from None


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
    from taskdecomp.cli.display import console, literal
    from taskdecomp.store import open_store

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
    from taskdecomp.store import normalize_url

    parsed = normalize_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    return None if database.startswith("file:") else Path(database).expanduser()


def environment(
    settings: Settings, store: SqlStore, durability: Durability | None = None
) -> Environment:
    """The engine's environment for one command: its store, lease and durability."""
    from taskdecomp.engine import Environment

    return Environment(
        store=store,
        lease_seconds=settings.lease_seconds,
        durability=durability or settings.durability,
    )


def build_models(
    planner: str,
    roles: Mapping[Role, str] | None,
    *,
    base_url: str | None,
    output_mode: OutputMode | None = None,
) -> tuple[Model, dict[Role, Model]]:
    """The run's model and the models of the roles that have their own.

    Model strings are resolved here, before anything is opened or created, so a bad one is
    a usage error with nothing left behind. ``--base-url`` and ``--output-mode`` (else
    ``TASKDECOMP_OUTPUT_MODE``) reach every one of them whose provider connects to a server
    (``openai``, or a plugin's); the output mode reaches ``local`` too. ``--base-url`` with
    models of two providers that connect is refused: one server would get both.
    """
    from taskdecomp.models import PROVIDERS, Connection, connects, resolve_model
    from taskdecomp.models import takes_output_mode as takes_mode

    providers = {spec.partition(":")[0] for spec in [planner, *(roles or {}).values()]}
    for flag, value, applies, which in (
        ("--base-url", base_url, connects, "connects to a server"),
        ("--output-mode", output_mode, takes_mode, "asks for structured output in modes"),
    ):
        if value and not any(applies(provider) for provider in providers):
            servers = sorted(  # the built-ins first, then a plugin's
                (name for name in PROVIDERS.names() if applies(name)),
                key=lambda name: (name not in PROVIDERS.builtins, name),
            )
            raise ConfigError(
                f"{flag} applies to models of a provider that {which} "
                f"({', '.join(servers)}), not {planner!r}; use --model {servers[0]}:MODEL with it"
            )
    reached = sorted(provider for provider in providers if connects(provider))
    if base_url and len(reached) > 1:  # one server would get every provider's calls and keys
        raise ConfigError(
            f"--base-url would send the calls of {', '.join(reached)}, and their keys, to one "
            "server; give each provider's server in its own variable instead "
            "(OPENAI_BASE_URL, ANTHROPIC_BASE_URL, GOOGLE_GEMINI_BASE_URL, ...)"
        )
    connection = Connection(
        base_url=base_url, output_mode=output_mode or load_settings().output_mode
    )

    def build(spec: str) -> Model:
        return resolve_model(spec, connection=connection)

    return build(planner), {role: build(spec) for role, spec in (roles or {}).items()}


def load_tools(source: str | Sequence[str]) -> Toolset:
    """Load a toolset, one of several ``--tools``, and warn on stderr of each function skipped.

    Raises:
        ToolsetError: one cannot be loaded, or two offer one tool name.
    """
    from taskdecomp.cli.display import console, literal
    from taskdecomp.toolsets import load_toolsets

    sources = [source] if isinstance(source, str) else list(source)
    toolset = load_toolsets(sources)
    err = console(stderr=True)
    shown = sources[0] if len(sources) == 1 else toolset.source
    for name, why in toolset.skipped.items():
        err.print(
            literal(f"warning: toolset {shown!r}: skipped {name!r}: {why}", "yellow"),
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
    from taskdecomp import jsonsafe

    try:
        text = jsonsafe.dumps(data, indent=2, ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: keep it, escaped
            text = jsonsafe.dumps(data, indent=2, ensure_ascii=True)
    except StrictJSONError as exc:
        raise click.ClickException(f"cannot print strict JSON: {exc}") from exc
    click.echo(text)
