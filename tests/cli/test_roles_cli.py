"""A model per role on the command line: the flags, their variables, resume, --base-url."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stub_servers.openai_server import FakeOpenAI, Reply, completion

from taskdecomp import runconfig
from taskdecomp.run import RunId
from taskdecomp.store import open_store
from tests.clitools import cli
from tests.models.conftest import fake_openai as fake_openai  # the fixture, used by name

GOAL = "Report the key k"

SLOW_ONCE = '''
import asyncio
import pathlib

MARK = pathlib.Path(__file__).with_name("slept")


async def fetch(key: str) -> str:
    """Fetch key; the first call ever outlasts any deadline."""
    if not MARK.exists():
        MARK.write_text("slept")
        await asyncio.sleep(60)
    return f"{key} fetched"
'''


def script(path: Path, answers: Any) -> str:
    path.write_text(json.dumps(answers))
    return f"scripted:{path}"


@pytest.fixture
def scripts(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Scripts of a replan run: a fetch step, an instruction step, then the answer."""
    fetch = {"id": "s1", "title": "Fetch", "tool": "fetch", "args": {"key": "k"}}
    report = {"id": "s2", "title": "Report", "instruction": "Report k"}
    respond = {"kind": "respond", "response": "k: done"}
    yield {
        "planner": script(tmp_path / "planner.json", [{"kind": "plan", "steps": [fetch]}]),
        "executor": script(
            tmp_path / "executor.json", [{"kind": "finish", "result": "k reported"}]
        ),
        "replanner": script(
            tmp_path / "replanner.json",
            {
                "rules": [{"match": "k reported", "response": respond}],
                "default": {"kind": "plan", "steps": [report]},
            },
        ),
    }


@pytest.fixture
def tools(tmp_path: Path) -> str:
    path = tmp_path / "slow_tools.py"
    path.write_text(SLOW_ONCE)
    return str(path)


def run_args(tools: str, db: Path, *more: str) -> list[str]:
    return ["run", GOAL, "--tools", tools, "--strategy", "replan", "--db", str(db), *more]


def test_each_role_flag_reaches_its_model_and_a_resume_rebuilds_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, scripts: dict[str, str], tools: str
) -> None:
    db = tmp_path / "runs.db"
    code, out, err = cli(
        capsys,
        *run_args(tools, db, "--max-seconds", "0.5", "--json"),
        "--planner-model", scripts["planner"],
        "--executor-model", scripts["executor"],
        "--replanner-model", scripts["replanner"],
    )  # fmt: skip
    first = json.loads(out)
    assert (code, first["stop_reason"]) == (1, "max_seconds"), err
    store = open_store(f"sqlite:///{db}")
    try:
        stored = store.load_run(RunId(first["run_id"]))
        assert stored.model == scripts["planner"]
        roles = runconfig.stored_config(stored).roles
        assert roles == {"executor": scripts["executor"], "replanner": scripts["replanner"]}
    finally:
        store.close()

    code, out, err = cli(
        capsys, "resume", first["run_id"], "--db", str(db), "--max-seconds", "30", "--json"
    )
    resumed = json.loads(out)
    assert code == 0, err
    assert resumed["answer"] == "k: done"
    assert [entry["observation"] for entry in resumed["history"]] == ["k fetched", "k reported"]


def test_role_models_come_from_their_variables(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    scripts: dict[str, str],
    tools: str,
) -> None:
    (tmp_path / "slept").write_text("slept")  # no slow first call here
    monkeypatch.setenv("TASKDECOMP_EXECUTOR_MODEL", scripts["executor"])
    monkeypatch.setenv("TASKDECOMP_REPLANNER_MODEL", scripts["replanner"])
    code, out, err = cli(
        capsys, *run_args(tools, tmp_path / "runs.db", "--model", scripts["planner"], "--json")
    )
    assert code == 0, err
    assert json.loads(out)["answer"] == "k: done"


def test_a_resume_flag_gives_a_role_another_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, scripts: dict[str, str], tools: str
) -> None:
    db = tmp_path / "runs.db"
    code, out, _ = cli(
        capsys,
        *run_args(tools, db, "--max-seconds", "0.5", "--json"),
        "--model", scripts["planner"],
        "--executor-model", scripts["executor"],
        "--replanner-model", scripts["replanner"],
    )  # fmt: skip
    run_id = json.loads(out)["run_id"]
    respond = {"kind": "respond", "response": "from the new replanner"}
    other = script(
        tmp_path / "other.json",
        {"rules": [{"match": "k reported", "response": respond}],
         "default": {"kind": "plan", "steps": [{"id": "s2", "title": "Report",
                                                 "instruction": "Report k"}]}},
    )  # fmt: skip
    code, out, err = cli(
        capsys, "resume", run_id, "--db", str(db), "--max-seconds", "30",
        "--replanner-model", other, "--json",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["answer"] == "from the new replanner"


def test_base_url_reaches_a_role_model_that_connects(
    capsys: pytest.CaptureFixture[str],
    fake_openai: FakeOpenAI,
    tmp_path: Path,
    scripts: dict[str, str],
    tools: str,
) -> None:
    (tmp_path / "slept").write_text("slept")
    finish = {"kind": "finish", "result": "k reported"}
    fake_openai.queue(Reply(body=completion(json.dumps(finish))))
    code, out, err = cli(
        capsys,
        *run_args(tools, tmp_path / "runs.db", "--json"),
        "--planner-model", scripts["planner"],
        "--executor-model", "openai:executor-model",
        "--replanner-model", scripts["replanner"],
        "--base-url", fake_openai.url,
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["answer"] == "k: done"
    assert [request["model"] for request in fake_openai.requests] == ["executor-model"]


def test_the_role_flags_are_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("run", "resume"):
        code, out, _ = cli(capsys, command, "--help")
        assert code == 0
        for flag in ("--planner-model", "--executor-model", "--replanner-model", "--rollup-model"):
            assert flag in out
