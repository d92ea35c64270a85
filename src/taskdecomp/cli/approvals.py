"""``approve`` and ``reject``: decide a run that waits for a human."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from taskdecomp.cli._app import (
    DB_OPTION,
    DEBUG_OPTION,
    LOCAL_THREADS_OPTION,
    app,
    environment,
    load_settings,
    open_run_store,
)
from taskdecomp.cli.runs import report, result_view, until_done
from taskdecomp.engine import approve, reject
from taskdecomp.errors import ConfigError
from taskdecomp.jsonsafe import loads


@app.command("approve")
@click.argument("run_id")
@click.option(
    "--plan",
    "plan_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help='An edited plan (JSON: {"kind": "plan", "steps": [...]} or the steps) to run '
    "instead of the pending one; it must pass the policy boundary.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@DB_OPTION
@DEBUG_OPTION
@LOCAL_THREADS_OPTION
def approve_command(run_id: str, plan_file: Path | None, as_json: bool, db: str | None) -> int:
    """Approve what RUN_ID waits for (a plan or a tool call) and continue the run.

    Exit code: 0 on success, 1 when the run stopped, 2 on usage errors (the run does not wait
    for approval, the edited plan is refused), 3 when it waits for approval again, 130 on
    Ctrl-C.
    """
    plan = _read_plan(plan_file) if plan_file is not None else None
    settings = load_settings()
    with open_run_store(settings, db) as store:
        return until_done(
            lambda on_event: approve(
                run_id, plan=plan, on_event=on_event, env=environment(settings, store)
            ),
            as_json=as_json,
            db=db,
            show=result_view(store),
        )


@app.command("reject")
@click.argument("run_id")
@click.option("--reason", required=True, help="Why; kept as the run's message.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@DB_OPTION
def reject_command(run_id: str, reason: str, as_json: bool, db: str | None) -> int:
    """End RUN_ID, which waits for approval, with stop reason approval_rejected."""
    settings = load_settings()
    with open_run_store(settings, db) as store:
        result = reject(run_id, reason=reason, env=environment(settings, store))
        return report(result, as_json=as_json, show=result_view(store))


def _read_plan(path: Path) -> Any:
    try:
        return loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"plan file {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"plan file {str(path)!r} is not JSON: {exc}") from None


__all__ = ["approve_command", "reject_command"]
