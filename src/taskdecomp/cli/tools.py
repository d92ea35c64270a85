"""``taskdecomp tools``: what a toolset offers the planner, checked before any run."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.text import Text

from taskdecomp.cli._app import DEBUG_OPTION, app, echo_json
from taskdecomp.cli.display import Column, console, fitted_table, literal
from taskdecomp.tools import ToolSpec


@app.command("tools")
@click.argument("sources", metavar="TOOLSET...", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print the tools as JSON.")
@DEBUG_OPTION
def tools_command(sources: tuple[str, ...], as_json: bool) -> int:
    """List the tools of each TOOLSET as the planner will see them.

    A toolset is a .py file or module, an MCP server launched over stdio ('mcp:COMMAND
    ARGS', quoted as one argument) or reached by URL (mcp+http://HOST/PATH). For each tool:
    its side-effect class, timeout, isolation, whether each call needs approval, how often a
    failed call is tried again (and the first wait), and the argument schema (from its type
    hints, or the server's); then the public functions that are not tools, and why.
    Exit code: 0, or 2 when a toolset does not load or two offer one tool name.
    """
    from taskdecomp.toolsets import load_toolsets

    toolset = load_toolsets(sources)
    if as_json:
        echo_json(
            {
                "source": toolset.source,
                "tools": [tool_dict(spec) for spec in toolset.values()],
                "skipped": dict(toolset.skipped),
            }
        )
        return 0
    out = console()
    columns = [
        Column(header="tool"),
        Column(header="side effects"),
        Column(header="timeout", justify="right"),
        Column(header="isolation", drop=2),
        Column(header="approval", drop=1),
        Column(header="retries", drop=1),
        Column(header="arguments", kind="wrap", min_width=16),
        Column(header="description", kind="flex", min_width=12),
    ]
    rows = [
        [
            literal(spec.name),
            literal(spec.side_effects),
            literal("-" if spec.timeout is None else f"{spec.timeout:g}s"),
            literal(spec.isolation),
            literal("yes" if spec.needs_approval else "-"),
            literal(f"{spec.retries} ({spec.backoff_s:g}s)" if spec.retries else "-"),
            literal(signature(spec.args_schema())),
            literal(" ".join(spec.description.split()), limit=200),
        ]
        for spec in toolset.values()
    ]
    where = toolset.source if len(sources) == 1 else ", ".join(sources)
    out.print(literal(f"{len(toolset)} tools in {where}", "bold"), overflow="fold")
    out.print(fitted_table(columns, rows, width=out.width))
    for name, why in toolset.skipped.items():
        out.print(literal(f"skipped {name!r}: {why}", "yellow"))
    out.print(Text("taskdecomp tools --json prints each argument schema in full", style="dim"))
    return 0


def tool_dict(spec: ToolSpec) -> dict[str, Any]:
    """A tool as JSON: the planner's catalog entry plus how the gateway calls it."""
    return {
        **spec.catalog_entry(),
        "side_effects": spec.side_effects,
        "timeout": spec.timeout,
        "isolation": spec.isolation,
        "needs_approval": spec.needs_approval,
        "retries": spec.retries,
        "backoff_s": spec.backoff_s,
    }


def signature(schema: dict[str, Any]) -> str:
    """Arguments in short: ``month: string, limit?: integer = 10``; ``**`` when open."""
    required = set(schema.get("required", ()))
    parts = []
    for name, prop in schema.get("properties", {}).items():
        mark = "" if name in required else "?"
        default = f" = {json.dumps(prop['default'])}" if "default" in prop else ""
        parts.append(f"{name}{mark}: {_type(prop)}{default}")
    if schema.get("additionalProperties") not in (None, False):
        parts.append("**")
    return ", ".join(parts) or "(none)"


def _type(prop: dict[str, Any]) -> str:
    if "type" in prop:
        kind = prop["type"]
        if kind == "array" and isinstance(prop.get("items"), dict) and prop["items"]:
            return f"array of {_type(prop['items'])}"
        return "|".join(kind) if isinstance(kind, list) else str(kind)
    for key in ("anyOf", "oneOf"):
        if key in prop:
            return "|".join(_type(option) for option in prop[key])
    if "$ref" in prop:
        return str(prop["$ref"]).rsplit("/", 1)[-1]
    if "enum" in prop:
        return "|".join(json.dumps(value) for value in prop["enum"])
    return "any"


__all__ = ["signature", "tool_dict", "tools_command"]
