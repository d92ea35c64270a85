"""``taskdecomp workflow``: workflow files (seed 003), checked before anything runs."""

from __future__ import annotations

import click

from taskdecomp.cli._app import DEBUG_OPTION, EXIT_USAGE, app, echo_json
from taskdecomp.cli.display import console, literal
from taskdecomp.strategies.workflow import check_workflow


@app.group("workflow")
def workflow() -> None:
    """Workflows: YAML phases with guarded transitions over a task list."""


@workflow.command("validate")
@click.argument("source", metavar="FILE_OR_NAME")
@click.option("--json", "as_json", is_flag=True, help="Print the problems as JSON.")
@DEBUG_OPTION
def validate_command(source: str, as_json: bool) -> int:
    """Check a workflow file (or a built-in: default, tasks) and list every problem.

    Each problem names its phase and field: YAML that does not parse, unknown keys, a start
    or transition target that is no phase, guards that do not parse, phases that cannot be
    reached, no terminal phase, missing prompt files. Exit code: 0 when valid, 2 when not.
    """
    problems = check_workflow(source)
    if as_json:
        echo_json(
            {
                "workflow": source,
                "valid": not problems,
                "problems": [
                    {"phase": p.phase, "field": p.field, "message": p.message} for p in problems
                ],
            }
        )
    else:
        out = console()
        if not problems:
            out.print(literal(f"{source}: valid"))
        for problem in problems:
            out.print(literal(f"{source}: {problem}", limit=2000), soft_wrap=True)
    return EXIT_USAGE if problems else 0


__all__ = ["validate_command", "workflow"]
