"""What every command shares: the click group, common options, the store, model wiring.

Exit codes: 0 when the work succeeded, 1 when it stopped for any other reason, 2 for a usage
or configuration error (one line on stderr, no traceback), 3 when a run waits for approval,
130 when interrupted (Ctrl-C).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import click

from taskdecomp import jsonsafe
from taskdecomp.errors import ConfigError, StrictJSONError
from taskdecomp.models import Model
from taskdecomp.models.local import is_available
from taskdecomp.settings import OpenAISettings, Settings
from taskdecomp.store import SqlStore, open_store

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


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="taskdecomp")
def app() -> None:
    """Controllable task-decomposition agents: plan, validate, execute, combine."""


def local_model_available() -> bool:
    """Whether the embedded model's extra is installed (tests replace this)."""
    return is_available()


@contextlib.contextmanager
def open_run_store(settings: Settings, db: str | None) -> Iterator[SqlStore]:
    """The store named by ``--db``, the environment or the default, closed afterwards."""
    store = open_store(settings.store_url(db), busy_timeout=settings.busy_timeout)
    try:
        yield store
    finally:
        store.close()


def build_models(
    planner: str,
    combiner: str | None,
    *,
    base_url: str | None,
    openai_settings: OpenAISettings,
) -> tuple[Model | str, Model | str | None]:
    """The planner's and combiner's models; ``--base-url`` goes to the ``openai:`` ones."""
    specs = [planner] if combiner is None else [planner, combiner]
    if base_url and not any(spec.partition(":")[0] == "openai" for spec in specs):
        raise ConfigError(
            f"--base-url applies to openai: models only, not {planner!r}; "
            "use --model openai:MODEL with it"
        )

    def build(spec: str) -> Model | str:
        provider, _, rest = spec.partition(":")
        if provider != "openai":
            return spec
        from taskdecomp.models.openai import openai_model

        return openai_model(rest, base_url=base_url, settings=openai_settings)

    return build(planner), build(combiner) if combiner is not None else None


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


def short(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, printable whatever it holds (lone surrogates)."""
    text = " ".join(text.split()) if limit < 200 else text
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp).astimezone().strftime("%Y-%m-%d %H:%M:%S")
