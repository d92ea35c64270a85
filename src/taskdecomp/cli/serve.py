"""``serve``: the HTTP API, event streams and web page on uvicorn."""

from __future__ import annotations

import logging
from types import FrameType
from typing import Any

import click

from taskdecomp import redact
from taskdecomp.cli import _app
from taskdecomp.cli._app import (
    BASE_URL_OPTION,
    DB_OPTION,
    LOCAL_THREADS_OPTION,
    app,
    load_settings,
    needs_extra,
)
from taskdecomp.errors import ConfigError
from taskdecomp.settings import choose_model, load_decomp_settings, load_openai_settings

GRACE_SECONDS = 3
"""How long open connections get to finish once the server is told to stop."""


@app.command("serve")
@LOCAL_THREADS_OPTION
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option(
    "--tools",
    "toolsets",
    multiple=True,
    required=True,
    metavar="NAME=PATH",
    help="A toolset clients may use by NAME (a .py file or module); repeat for more.",
)
@click.option(
    "--model",
    "models",
    multiple=True,
    help="A model runs may use; repeat for more (the first is the default).  "
    "[default: as for run: TASKDECOMP_MODEL, openai, local]",
)
@BASE_URL_OPTION
@click.option("--decomp-model", help="The decomposer's model.  [env: DECOMP_MODEL]")
@click.option("--chat-model", help="The chat agent's model; without it POST /chat is off.")
@click.option(
    "--cors-origin",
    "cors_origins",
    multiple=True,
    help="An origin browsers may call the API from; repeat for more.  "
    "[env: TASKDECOMP_CORS_ORIGINS, comma-separated; default: CORS off]",
)
@click.option(
    "--log-level",
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
    default="info",
    show_default=True,
)
@click.option(
    "--executor",
    type=click.Choice(["process", "queue"]),
    default="process",
    show_default=True,
    help="Run in this process, or submit runs to a queue that `taskdecomp worker` "
    "processes execute (PostgreSQL --db; --tools and --model names as the workers register).",
)
@click.option(
    "--queue", default="default", show_default=True, help="The queue runs go to (--executor queue)."
)
@DB_OPTION
def serve_command(
    host: str,
    port: int,
    toolsets: tuple[str, ...],
    models: tuple[str, ...],
    base_url: str | None,
    decomp_model: str | None,
    chat_model: str | None,
    cors_origins: tuple[str, ...],
    log_level: str,
    executor: str,
    queue: str,
    db: str | None,
) -> int:
    """Serve the HTTP API, the live event streams and the web page at http://HOST:PORT/.

    Listens on 127.0.0.1 unless told otherwise; any other address needs TASKDECOMP_API_TOKEN,
    which every API request must then send as 'Authorization: Bearer TOKEN'. Runs, plans and
    the chat agent use the same store as the other commands. SIGTERM or Ctrl-C stops taking
    work, cancels runs in flight (stored as cancelled, resumable) and exits.
    """
    with needs_extra("serve", "server", "fastapi", "uvicorn"):
        import uvicorn

        from taskdecomp.server import create_app, open_service
    if executor == "queue":
        with needs_extra("serve --executor queue", "scale", "dbos"):
            import dbos  # noqa: F401  # the queue: say so before the server starts
    import dataclasses

    config = _config(host, toolsets, models, decomp_model, chat_model, cors_origins, db)
    if base_url:
        from taskdecomp.models import Connection, connects

        specs = [*config.models, config.decomp_model, config.chat_model]
        if not any(connects(spec.partition(":")[0]) for spec in specs if spec):
            raise ConfigError(
                "--base-url applies to models of a provider that connects to a server, and "
                "none of this server's models (--model, --decomp-model, --chat-model) does"
            )
        config = dataclasses.replace(config, connection=Connection(base_url=base_url))
    config = dataclasses.replace(config, executor=executor, queue=queue)
    service = open_service(config)
    where = f"store: {service.store.name}"
    if executor == "queue":
        where += f"; runs go to queue {queue!r}"
    click.echo(f"taskdecomp serving on http://{_where(host)}:{port}/ ({where})")

    class Server(uvicorn.Server):
        """uvicorn's server, telling the service the moment a stop signal arrives."""

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            service.request_shutdown()  # streams end, runs are cancelled (checkpointed)
            super().handle_exit(sig, frame)

    logging.getLogger("taskdecomp").setLevel(logging.INFO)
    server = Server(
        uvicorn.Config(
            create_app(service),
            host=host,
            port=port,
            log_level=log_level,
            timeout_graceful_shutdown=GRACE_SECONDS,
            lifespan="on",
        )
    )
    redact.install_log_filter()  # on uvicorn's handlers too, which its Config just made
    server.run()
    return 0


def _config(
    host: str,
    toolsets: tuple[str, ...],
    models: tuple[str, ...],
    decomp_model: str | None,
    chat_model: str | None,
    cors_origins: tuple[str, ...],
    db: str | None,
) -> Any:
    from taskdecomp.server.config import ServerConfig, check_bind, parse_toolsets

    settings, decomp = load_settings(), load_decomp_settings()
    token = settings.api_token.get_secret_value() if settings.api_token is not None else None
    check_bind(host, token)
    chosen = models or (
        choose_model(
            None, settings, load_openai_settings(), local_available=_app.local_model_available
        ),
    )
    origins = cors_origins or tuple(
        origin.strip() for origin in (settings.cors_origins or "").split(",") if origin.strip()
    )
    return ServerConfig(
        store_url=settings.store_url(db),
        toolsets=parse_toolsets(toolsets),
        models=tuple(chosen),
        decomp_model=decomp_model or decomp.model,
        chat_model=chat_model,
        token=token,
        cors_origins=origins,
        budget=settings.budget(),
        decomp=decomp.options(),
        lease_seconds=settings.lease_seconds,
        durability=settings.durability,
    )


def _where(host: str) -> str:
    return f"[{host}]" if ":" in host else host


__all__ = ["serve_command"]
