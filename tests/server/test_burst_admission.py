"""A burst of new runs: stored together in one commit, by a server whose collector skips
what it loaded at start-up."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from taskdecomp.run import RunId
from taskdecomp.server import queued
from taskdecomp.server.admission import Waiting
from taskdecomp.store import SqlStore, open_store
from taskdecomp.store.base import NewRun
from taskdecomp.tools import Toolset
from tests.clitools import cli


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    opened = open_store(str(tmp_path / "runs.db"))
    yield opened
    opened.close()


def new(n: int) -> tuple[NewRun, Waiting]:
    run_id = RunId(f"run-{n:02d}")
    run = NewRun(run_id=run_id, goal=f"goal {n}", model="m", tools=None, config={})
    return run, Waiting(run_id=run_id, toolset=Toolset({}), model="m")


def test_runs_posted_over_successive_turns_of_the_loop_share_one_commit(
    store: SqlStore,
) -> None:
    settled: list[tuple[str, bool]] = []
    submitter = queued.Submitter(store, lambda waiting, ok: settled.append((waiting.run_id, ok)))

    async def post(n: int) -> float:
        for _turn in range(n):  # its request was read n turns of the loop after the first
            await asyncio.sleep(0)
        return await submitter.submit(*new(n))

    async def burst() -> list[float]:
        return list(await asyncio.gather(*(post(n) for n in range(20))))

    before = store.durable_commits
    times = asyncio.run(burst())
    assert store.durable_commits - before == 1  # the first run did not go to disk alone
    assert settled == [(f"run-{n:02d}", True) for n in range(20)]  # in the order posted
    assert times == sorted(times) and len(set(times)) == 20
    stale = store.stale_runs(queued.LOCAL_QUEUE, grace=0.0)
    assert [found.run_id for found in stale] == [f"run-{n:02d}" for n in range(20)]


def test_serve_exempts_what_it_loaded_from_the_collector_before_it_serves(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    toolset: Path,
) -> None:
    frozen: list[int] = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda _self: frozen.append(gc.get_freeze_count()))
    model = tmp_path / "model.json"
    model.write_text('{"rules": [], "default": "unused"}')
    try:
        code, _out, err = cli(
            capsys, "serve", "--tools", f"demo={toolset}", "--model", f"scripted:{model}",
            "--db", str(tmp_path / "runs.db"), "--port", "9",
        )  # fmt: skip
    finally:
        gc.unfreeze()
    assert code == 0, err
    assert frozen and frozen[0] > 10_000  # FastAPI, pydantic, SQLAlchemy, the routes
