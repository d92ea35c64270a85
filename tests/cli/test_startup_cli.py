"""Start-up: what ``import taskdecomp`` and the command line's quick answers import.

``--help``, ``--version`` and usage errors must not load the engine, the store, YAML, the
model SDKs or the service; each case runs in a fresh interpreter under ``-X importtime``.
How fast that is lives in ``bench/startup.py``, not here. Commands whose extra is missing
say which one, in one line.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

import taskdecomp
from taskdecomp.cli._app import COMMANDS, app

CLI = "from taskdecomp_entry import main; main()"
"""What the console script runs."""

HEAVY = (
    "sqlalchemy",
    "yaml",
    "openai",
    "llama_cpp",
    "fastapi",
    "uvicorn",
    "dbos",
    "taskdecomp.decomposition",
    "taskdecomp.strategies.decompose",
    "taskdecomp.durable",
)
SETTINGS = ("pydantic", "pydantic_settings", "taskdecomp.settings")


def python(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, env=env
    )


def imports(code: str, *argv: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    done = python("-X", "importtime", "-c", code, *argv)
    modules = {
        line.rpartition("|")[2].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    return done, modules


def loaded(modules: set[str], *names: str) -> list[str]:
    return sorted(m for m in modules for n in names if m == n or m.startswith(f"{n}."))


def test_import_taskdecomp_loads_nothing_heavy() -> None:
    done, modules = imports("import taskdecomp")
    assert done.returncode == 0, done.stderr
    assert loaded(modules, *HEAVY, *SETTINGS) == []


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (("--help",), 0),
        (("--version",), 0),
        (("--bogus",), 2),
        (("nosuch",), 2),
    ],
)
def test_help_version_and_usage_errors_stay_light(argv: tuple[str, ...], code: int) -> None:
    done, modules = imports(CLI, *argv)
    assert done.returncode == code, done.stderr
    assert loaded(modules, *HEAVY, *SETTINGS) == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("run",), "Missing option '--tools'"),
        (("run", "--tools", "tools.py"), "Missing argument 'GOAL'"),
        (("run", "goal", "--tools", "tools.py", "--strategy", "nope"), "'nope' is not a strategy"),
    ],
)
def test_a_usage_error_of_run_loads_no_engine(argv: tuple[str, ...], message: str) -> None:
    done, modules = imports(CLI, *argv)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert loaded(modules, *HEAVY) == []


@pytest.mark.parametrize("module", ["taskdecomp.models", "taskdecomp.settings"])
def test_models_and_settings_load_no_journal_and_no_store(module: str) -> None:
    done, modules = imports(f"import {module}")
    assert done.returncode == 0, done.stderr
    assert loaded(modules, "taskdecomp.durable", "taskdecomp.store", "sqlalchemy") == []
    assert loaded(modules, "taskdecomp.decomposition", "openai", "llama_cpp") == []


def test_every_public_name_resolves() -> None:
    for name in taskdecomp.__all__:
        assert getattr(taskdecomp, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = taskdecomp.nothing_here


def test_star_import_and_dir_in_a_fresh_interpreter() -> None:
    code = (
        "import taskdecomp\n"
        "listed = set(dir(taskdecomp))\n"
        "from taskdecomp import *\n"
        "from taskdecomp import engine\n"
        "print(sorted(set(taskdecomp.__all__) - listed))\n"
        "print(sorted(n for n in taskdecomp.__all__ if n not in globals()))\n"
        "print(run is engine.run is taskdecomp.run)\n"
    )
    done = python("-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["[]", "[]", "True"]


def test_run_stays_the_engine_entry_once_the_submodule_is_imported() -> None:
    code = (
        "import taskdecomp.cli.runs, taskdecomp.store, taskdecomp.run\n"
        "import taskdecomp\n"
        "from taskdecomp.engine import run\n"
        "print(taskdecomp.run is run)\n"
    )
    done = python("-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


def _load_every_command() -> None:
    for name in COMMANDS:
        app.get_command(click.Context(app), name)


def test_commands_table_agrees_with_the_commands() -> None:
    _load_every_command()
    assert set(app.commands) == set(COMMANDS)
    for name, (module, summary) in COMMANDS.items():
        command = app.commands[name]
        assert command.callback is not None
        assert command.callback.__module__ == f"taskdecomp.cli.{module}", name
        first = inspect.cleandoc(command.help or "").partition("\n\n")[0]
        assert " ".join(first.split()) == summary, name


def test_help_lists_the_commands_as_when_all_are_loaded() -> None:
    lazy = python("-c", CLI, "--help")
    eager = python(
        "-c",
        "from taskdecomp.cli._app import COMMANDS, app\n"
        "import click\n"
        "for name in COMMANDS: app.get_command(click.Context(app), name)\n"
        "from taskdecomp.cli import main; main(['--help'])\n",
    )
    assert lazy.returncode == eager.returncode == 0, lazy.stderr + eager.stderr
    assert "Commands:" in lazy.stdout and "workflow" in lazy.stdout
    assert lazy.stdout == eager.stdout


def test_run_offers_every_strategy_of_the_registry() -> None:
    from taskdecomp.strategies.registry import goal_strategies

    _load_every_command()
    run = app.commands["run"]
    (strategy,) = [p for p in run.params if p.name == "strategy"]
    names = goal_strategies()
    assert {"plan_execute", "replan"} <= set(names) and "workflow" not in names
    for name in names:
        assert strategy.type.convert(name, strategy, None) == name
    with pytest.raises(click.BadParameter, match="'nope' is not a strategy; choose one of: "):
        strategy.type.convert("nope", strategy, None)


# -- a missing extra -------------------------------------------------------------------------


def without(tmp_path: Path, *packages: str, missing: str | None = None) -> dict[str, str]:
    """An environment in which importing ``packages`` fails as if they were not installed.

    ``missing``: the name the error gives instead (a package missing inside one).
    """
    for package in packages:
        folder = tmp_path / "blocked" / package
        folder.mkdir(parents=True)
        name = missing or package
        (folder / "__init__.py").write_text(
            f"raise ModuleNotFoundError({f'No module named {name!r}'!r}, name={name!r})\n"
        )
    paths = [str(tmp_path / "blocked"), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


@pytest.mark.parametrize(
    ("argv", "blocked", "command", "extra"),
    [
        (("serve", "--tools", "a=t.py"), "fastapi", "serve", "server"),
        (("serve", "--tools", "a=t.py"), "uvicorn", "serve", "server"),
        (
            ("serve", "--tools", "a=t.py", "--executor", "queue"),
            "dbos",
            "serve --executor queue",
            "scale",
        ),
        (("worker",), "dbos", "worker", "scale"),
        (("submit", "g", "--tools", "t", "--model", "m"), "dbos", "submit", "scale"),
    ],
)
def test_a_missing_extra_is_named_in_one_line(
    tmp_path: Path, argv: tuple[str, ...], blocked: str, command: str, extra: str
) -> None:
    done = python("-c", CLI, *argv, env=without(tmp_path, blocked))
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"taskdecomp: error: 'taskdecomp {command}' needs the {extra} extra: "
        f"pip install 'taskdecomp[{extra}]'"
    ]


def test_a_package_missing_inside_an_extra_is_not_hidden(tmp_path: Path) -> None:
    env = without(tmp_path, "fastapi", missing="starlette")
    done = python("-c", CLI, "serve", "--tools", "a=t.py", env=env)
    assert done.returncode != 0
    assert "Traceback" in done.stderr and "No module named 'starlette'" in done.stderr
