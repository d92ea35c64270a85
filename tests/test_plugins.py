"""A third-party package adds a strategy, a model provider and a toolset source.

``tests/plugin`` is installed into the test environment (``.ci/run``) and declares them
through entry points only: ``one_call``, ``echo`` and ``notes``. The Python API and the
command line use all three here, with no change to taskdecomp; the service and the queue
use them in ``tests/server/test_plugin_api.py`` and ``tests/scale/test_plugin_queue.py``.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import subprocess
import threading
import time
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import pytest

from taskdecomp import run
from taskdecomp.engine import resume
from taskdecomp.models import PROVIDERS
from taskdecomp.plugins import Registry
from taskdecomp.run import RunId
from taskdecomp.store import open_store
from taskdecomp.strategies.registry import STRATEGIES, goal_strategies
from taskdecomp.toolsets import SOURCES
from tests.clitools import ENTRY
from tests.conftest import ROOT


@pytest.fixture(autouse=True, scope="module")
def installed() -> None:
    try:
        version("taskdecomp-example-plugin")
    except PackageNotFoundError:
        pytest.fail("the example plugin is not installed: pip install ./tests/plugin")


def cli(*args: str) -> tuple[int, str, str]:
    done = subprocess.run([*ENTRY, *args], capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


def test_the_built_ins_are_declared_as_a_plugin_declares_them() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    for group, registry in [
        ("taskdecomp.strategies", STRATEGIES),
        ("taskdecomp.models", PROVIDERS),
        ("taskdecomp.toolsets", SOURCES),
    ]:
        assert declared[group] == registry.builtins
        assert set(declared[group]) <= set(registry.names())


def test_the_registries_list_the_plugins_names() -> None:
    assert "one_call" in goal_strategies() and "workflow" not in goal_strategies()
    assert "echo" in PROVIDERS.names() and "notes" in SOURCES.names()


def test_threads_asking_at_once_all_find_a_plugins_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker resolves the models of two runs on two threads at once: the one that comes
    second must not find the entry points half read."""
    real = importlib.metadata.entry_points

    def slow(**kw: Any) -> Any:
        time.sleep(0.2)  # the first thread is reading them while the others ask
        return real(**kw)

    monkeypatch.setattr(importlib.metadata, "entry_points", slow)
    fresh: Registry[object] = Registry(group="taskdecomp.models", kind="provider", builtins={})
    found: list[object] = []
    failed: list[BaseException] = []

    def ask() -> None:
        try:
            found.append(fresh.get("echo"))
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failed == []
    assert len(found) == 4 and all(p is PROVIDERS.get("echo") for p in found)


def test_python_runs_the_plugins_strategy_with_its_tools_and_keeps_its_options(
    tmp_path: Path,
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        result = asyncio.run(
            run(
                "one note",
                strategy="one_call",
                options={"tool": "note", "args": {"text": "first"}},
                tools=f"notes:{tmp_path / 'notes'}",
                model="echo:x",
                store=store,
            )
        )
        assert result.stop_reason == "success", result.message
        assert json.loads(result.answer or "") == {"last": "first", "notes": 1}
        stored = store.load_run(RunId(result.run_id))
        assert stored.config["strategy"] == "one_call"
        assert stored.config["one_call"] == {"tool": "note", "args": {"text": "first"}}
    finally:
        store.close()


def test_a_plugin_run_cut_by_its_deadline_resumes_from_the_store(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        first = asyncio.run(
            run(
                "wait, then answer",
                strategy="one_call",
                options={"tool": "wait", "args": {"label": "a"}},
                tools=f"notes:{notes}",
                model="echo:x",
                store=store,
                budget=_budget(max_seconds=0.5),
            )
        )
        assert first.stop_reason == "max_seconds"
        (notes / "go").touch()
        again = asyncio.run(resume(first.run_id, store=store))  # tools and options: stored
        assert again.stop_reason == "success", again.message
        assert json.loads(again.answer or "") == {"waited": "a"}
        assert store.load_run(RunId(first.run_id)).segments == 2
    finally:
        store.close()


def test_the_command_line_runs_a_plugin_provider_with_a_base_url(tmp_path: Path) -> None:
    code, out, err = cli(
        "run", "keep three notes", "--tools", f"notes:{tmp_path / 'notes'}",
        "--model", "echo:hi", "--base-url", "http://127.0.0.1:9/v1",
        "--db", str(tmp_path / "runs.db"), "--json",
    )  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert result["answer"] == "hi said three times, via http://127.0.0.1:9/v1"
    assert [h["observation"]["last"] for h in result["history"]] == ["hi 1", "hi 2", "hi 3"]


def test_the_command_line_runs_and_resumes_the_plugins_strategy(tmp_path: Path) -> None:
    notes, db = tmp_path / "notes", str(tmp_path / "runs.db")
    code, out, err = cli(
        "run", "wait for go", "--strategy", "one_call", "--option", "tool=wait",
        "--option", 'args={"label": "cli"}', "--tools", f"notes:{notes}",
        "--model", "echo:x", "--max-seconds", "0.5", "--db", db, "--json",
    )  # fmt: skip
    assert code == 1, err
    stopped = json.loads(out)
    assert stopped["stop_reason"] == "max_seconds"
    (notes / "go").touch()
    code, out, err = cli("resume", stopped["run_id"], "--db", db, "--json")
    assert code == 0, err
    assert json.loads(json.loads(out)["answer"]) == {"waited": "cli"}


def test_the_command_line_refuses_what_the_plugins_strategy_does_not_take(
    tmp_path: Path,
) -> None:
    code, _, err = cli(
        "run", "x", "--strategy", "one_call", "--option", "tool=note", "--option", "colour=red",
        "--tools", f"notes:{tmp_path}", "--model", "echo:x",
    )  # fmt: skip
    assert code == 2
    assert "unknown option 'colour' for strategy 'one_call'; known: args, tool" in err
    code, _, err = cli(
        "run", "x", "--strategy", "one_call", "--approve-plan",
        "--tools", f"notes:{tmp_path}", "--model", "echo:x",
    )  # fmt: skip
    assert code == 2 and "--approve-plan works with --strategy replan only" in err


def _budget(**limits: Any) -> Any:
    from taskdecomp import Budget

    return Budget(**limits)


def test_options_that_are_not_strict_json_are_refused(tmp_path: Path) -> None:
    code, _, err = cli(
        "run", "x", "--strategy", "one_call", "--option", "tool=note",
        "--option", 'args={"text": NaN}', "--tools", f"notes:{tmp_path}", "--model", "echo:x",
    )  # fmt: skip
    assert code == 2 and "options are not strict JSON" in err
