"""``mcp``: serve taskdecomp to MCP clients, over stdio or streamable HTTP."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from taskdecomp.cli import _app
from taskdecomp.cli._app import (
    BASE_URL_OPTION,
    DB_OPTION,
    DEBUG_OPTION,
    DURABILITY_OPTION,
    LOCAL_THREADS_OPTION,
    OUTPUT_MODE_OPTION,
    app,
    build_models,
    load_settings,
    load_tools,
    open_run_store,
)
from taskdecomp.cli.priceopts import price_options

if TYPE_CHECKING:
    from taskdecomp.durability import Durability
    from taskdecomp.mcpserver import MCPConfig
    from taskdecomp.models.outputs import OutputMode


@app.command("mcp")
@click.option(
    "--tools",
    "toolsets",
    multiple=True,
    metavar="SOURCE",
    help="A toolset runs may use (a .py file, a module, or a registered source such as "
    "mcp:...); repeat for more. Default: none (decompose and get_tree still work).",
)
@click.option(
    "--model",
    help="The model of every run: openai:MODEL, local, scripted:PATH, ...  "
    "[env: TASKDECOMP_MODEL; else openai:$OPENAI_MODEL when OPENAI_API_KEY is set; else local]",
)
@click.option("--decomp-model", help="The decomposer's model.  [env: DECOMP_MODEL; else --model]")
@BASE_URL_OPTION
@price_options
@OUTPUT_MODE_OPTION
@click.option(
    "--http",
    "port",
    type=click.IntRange(1, 65535),
    help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio.",
)
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="With --http: the address to listen on."
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="With --http: a host name clients may reach the server by (NAME or NAME:PORT), "
    "beyond 127.0.0.1, localhost, [::1] and --host; repeat for more.",
)
@DB_OPTION
@DURABILITY_OPTION
@DEBUG_OPTION
@LOCAL_THREADS_OPTION
def mcp_command(
    toolsets: tuple[str, ...],
    model: str | None,
    decomp_model: str | None,
    base_url: str | None,
    output_mode: OutputMode | None,
    port: int | None,
    host: str,
    allowed_hosts: tuple[str, ...],
    db: str | None,
    durability: Durability | None,
) -> int:
    """Serve MCP tools that run goals as controlled agents (stdio, or --http PORT).

    An MCP client (a desktop assistant, an agent framework) calls run_goal, get_run,
    approve, reject, decompose and get_tree; runs are kept in the same store as the other
    commands use (taskdecomp show reads them). Over HTTP it listens on 127.0.0.1 unless
    told otherwise; any other address needs TASKDECOMP_API_TOKEN, which every request must
    then send as 'Authorization: Bearer TOKEN'. Budgets default to TASKDECOMP_MAX_* and
    DECOMP_* as for run and decompose; a client may set its own per run.
    """
    with _app.needs_extra("mcp", "mcp", "mcp"):
        import mcp.server.mcpserver  # noqa: F401  # say so before anything is opened
    from taskdecomp.mcpserver import Operations, create_server, http_app
    from taskdecomp.settings import reveal

    settings = load_settings()
    token = reveal(settings.api_token)
    if port is not None:
        from taskdecomp.listening import check_bind

        check_bind(host, token)
    elif allowed_hosts or host != "127.0.0.1":
        raise click.UsageError("--host and --allowed-host go with --http PORT")
    config = _config(toolsets, model, decomp_model, base_url, output_mode, durability)
    with open_run_store(settings, db, create=True, quiet=True) as store:
        server = create_server(Operations(config, store))
        if port is None:
            server.run("stdio")
            return 0
        asgi = http_app(server, host=host, port=port, allowed_hosts=allowed_hosts, token=token)
        _serve_http(asgi, host, port, store.name)
    return 0


def _config(
    toolsets: tuple[str, ...],
    model: str | None,
    decomp_model: str | None,
    base_url: str | None,
    output_mode: OutputMode | None,
    durability: Durability | None,
) -> MCPConfig:
    """The operator's choices; every model string resolved once here, so a bad one is exit 2.

    Raises:
        ConfigError: a model string, a toolset or a setting is refused.
    """
    from taskdecomp.mcpserver import MCPConfig
    from taskdecomp.models import Connection
    from taskdecomp.settings import choose_model, load_decomp_settings, load_openai_settings
    from taskdecomp.tools import Toolset

    settings, decomp = load_settings(), load_decomp_settings()
    spec = choose_model(
        model, settings, load_openai_settings(), local_available=_app.local_model_available
    )
    decomp_spec = decomp_model or decomp.model
    planner, _ = build_models(spec, None, base_url=base_url, output_mode=output_mode)
    if decomp_spec:
        build_models(decomp_spec, None, base_url=base_url, output_mode=output_mode)
    return MCPConfig(
        toolset=load_tools(toolsets) if toolsets else Toolset(),  # decompose needs none
        model=spec,
        decomp_model=decomp_spec,
        connection=Connection(base_url=base_url, output_mode=output_mode or settings.output_mode),
        budget=settings.budget(model=planner),
        decomp=decomp.options(),
        lease_seconds=settings.lease_seconds,
        durability=durability or settings.durability,
    )


def _serve_http(asgi: object, host: str, port: int, store_name: str) -> None:
    import uvicorn

    where = f"[{host}]" if ":" in host else host
    click.echo(
        f"taskdecomp MCP server on http://{where}:{port}/mcp (store: {store_name})", err=True
    )
    uvicorn.run(asgi, host=host, port=port, log_level="warning", lifespan="on")  # type: ignore[arg-type]


__all__ = ["mcp_command"]
