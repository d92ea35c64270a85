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
    OUTPUT_MODE_OPTION,
    TRACE_CONTENT_OPTION,
    app,
    load_settings,
    needs_extra,
)
from taskdecomp.cli.priceopts import price_options
from taskdecomp.errors import ConfigError
from taskdecomp.models.outputs import OutputMode
from taskdecomp.settings import (
    choose_model,
    load_decomp_settings,
    load_openai_settings,
    reveal,
)

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
@price_options
@OUTPUT_MODE_OPTION
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
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="A host name clients may reach the server by (NAME or NAME:PORT), beyond "
    "127.0.0.1, localhost, [::1] and the --host address; repeat for more. Any other "
    "Host is refused (421).",
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
@click.option(
    "--workflow",
    "workflows",
    multiple=True,
    metavar="NAME=FILE",
    help="A workflow clients may run by NAME (a workflow file, or a built-in: default, "
    "tasks); repeat for more.",
)
@click.option(
    "--workflow-template",
    "workflow_templates",
    multiple=True,
    metavar="NAME=DIR",
    help="The folder each run of workflow NAME starts from (copied into its own workspace); "
    "default: an empty folder.",
)
@click.option(
    "--max-streams",
    type=click.IntRange(min=1),
    default=4000,
    show_default=True,
    help="The most event streams open at once; more are answered 429 with Retry-After.",
)
@click.option(
    "--max-streams-per-client",
    type=click.IntRange(min=1),
    default=2000,
    show_default=True,
    help="The most event streams one client address holds at once.",
)
@click.option(
    "--max-running",
    type=click.IntRange(min=1),
    help="Runs that execute in the server at once; the rest wait in its queue.  [default: 32]",
)
@click.option(
    "--max-queued",
    type=click.IntRange(min=0),
    help="Runs that may wait for a slot; beyond them POST /runs answers 429 with "
    "Retry-After.  [default: 1000]",
)
@DB_OPTION
@TRACE_CONTENT_OPTION
def serve_command(
    host: str,
    port: int,
    toolsets: tuple[str, ...],
    models: tuple[str, ...],
    base_url: str | None,
    output_mode: OutputMode | None,
    decomp_model: str | None,
    chat_model: str | None,
    cors_origins: tuple[str, ...],
    allowed_hosts: tuple[str, ...],
    log_level: str,
    executor: str,
    queue: str,
    workflows: tuple[str, ...],
    workflow_templates: tuple[str, ...],
    max_streams: int,
    max_streams_per_client: int,
    max_running: int | None,
    max_queued: int | None,
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

        from taskdecomp.server import create_app, heap, open_service
    if executor == "queue":
        with needs_extra("serve --executor queue", "scale", "dbos"):
            import dbos  # noqa: F401  # the queue: say so before the server starts
    import dataclasses

    config = _config(host, toolsets, models, decomp_model, chat_model, cors_origins, db)
    if base_url or output_mode:
        from taskdecomp.models import connects

        specs = [*config.models, config.decomp_model, config.chat_model]
        if not any(connects(spec.partition(":")[0]) for spec in specs if spec):
            raise ConfigError(
                f"{'--base-url' if base_url else '--output-mode'} applies to models of a "
                "provider that connects to a server, and none of this server's models "
                "(--model, --decomp-model, --chat-model) does"
            )
    from taskdecomp.models import Connection

    mode = output_mode or _app.load_settings().output_mode
    connection = Connection(base_url=base_url, output_mode=mode)
    config = dataclasses.replace(config, connection=connection)
    config = dataclasses.replace(config, executor=executor, queue=queue)
    config = dataclasses.replace(config, host=host, port=port or None, allowed_hosts=allowed_hosts)
    config = _with_workflows(config, workflows, workflow_templates)
    config = dataclasses.replace(
        config, max_streams=max_streams, max_streams_per_client=max_streams_per_client
    )
    config = _within_descriptors(config)
    if max_running is not None:
        config = dataclasses.replace(config, max_running=max_running)
    if max_queued is not None:
        config = dataclasses.replace(config, max_queued=max_queued)
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
    heap.freeze()  # everything loaded so far lives as long as the server: stop walking it
    server.run()
    return 0


def _within_descriptors(config: Any) -> Any:
    """``config`` with its stream caps within what the process may open (see ``descriptors``)."""
    import dataclasses

    from taskdecomp.server.descriptors import make_room

    room = make_room()
    if config.max_streams <= room.streams:
        return config
    click.echo(
        f"warning: --max-streams {config.max_streams} is more than {room.limit} open files "
        f"allow; at most {room.streams} streams (raise the limit with ulimit -n)",
        err=True,
    )
    return dataclasses.replace(
        config,
        max_streams=room.streams,
        max_streams_per_client=min(config.max_streams_per_client, room.streams),
    )


def _config(
    host: str,
    toolsets: tuple[str, ...],
    models: tuple[str, ...],
    decomp_model: str | None,
    chat_model: str | None,
    cors_origins: tuple[str, ...],
    db: str | None,
) -> Any:
    from taskdecomp.listening import check_bind
    from taskdecomp.server.config import ServerConfig, parse_toolsets

    settings, decomp = load_settings(), load_decomp_settings()
    token = reveal(settings.api_token)
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


def _with_workflows(config: Any, workflows: tuple[str, ...], templates: tuple[str, ...]) -> Any:
    import dataclasses

    from taskdecomp.server.config import parse_pairs
    from taskdecomp.server.workflowruns import registered

    config = dataclasses.replace(
        config,
        workflows=parse_pairs("--workflow", workflows),
        workflow_templates=parse_pairs("--workflow-template", templates),
    )
    registered(config)  # a broken workflow file stops the server before it starts
    return config


def _where(host: str) -> str:
    return f"[{host}]" if ":" in host else host


__all__ = ["serve_command"]
