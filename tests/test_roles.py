"""A model per role: each call goes to its role's model, in every strategy, and resumes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from taskdecomp import (
    Budget,
    ConfigError,
    Roles,
    ScriptedModel,
    resume_sync,
    run_sync,
    runconfig,
)
from taskdecomp.run import RunId
from taskdecomp.store import NewRun, SqlStore, open_store
from taskdecomp.strategies.replan import ReplanOptions
from tests.conftest import SALES_TOOLS
from tests.strategies.tree_support import Log, finish, kids, node, rolling, target, wants_split
from tests.support import SEED_GOAL, seed_plan

GOAL = "Launch a developer conference in Berlin"


def unused() -> ScriptedModel:
    """The run's model when every role has its own: any call to it fails the run."""
    return ScriptedModel(responses=[], name="scripted:unused")


def phases(model: ScriptedModel) -> list[str]:
    return [request.phase for request in model.calls]


def instruction_plan() -> dict[str, Any]:
    return {
        "kind": "plan",
        "steps": [{"id": "s1", "title": "Look up a key", "instruction": "Look up the key a"}],
    }


def lookup(key: str) -> dict[str, Any]:
    """Look ``key`` up."""
    return {"key": key, "value": len(key)}


# -- each role's calls reach its model ------------------------------------------------------


def test_plan_execute_sends_the_plan_to_the_planner_and_the_answer_to_the_combiner() -> None:
    planner = ScriptedModel(responses=[seed_plan()])
    combiner = ScriptedModel(responses=["from the combiner"])
    result = run_sync(
        SEED_GOAL,
        tools=SALES_TOOLS,
        model=unused(),
        roles={"planner": planner, "combiner": combiner},
    )
    assert result.stop_reason == "success", result.message
    assert result.answer == "from the combiner"
    assert (phases(planner), phases(combiner)) == (["plan"], ["finalize"])


def test_replan_sends_each_role_to_its_own_model() -> None:
    planner = ScriptedModel(responses=[instruction_plan()])
    executor = ScriptedModel(
        responses=[
            {"kind": "call", "tool": "lookup", "args": {"key": "a"}},
            {"kind": "finish", "result": "a is 1"},
        ]
    )
    replanner = ScriptedModel(responses=[{"kind": "respond", "response": "The value is 1."}])
    default = unused()
    result = run_sync(
        SEED_GOAL,
        tools=[lookup],
        model=default,
        roles=Roles(planner=planner, executor=executor, replanner=replanner),
        strategy="replan",
        replan=ReplanOptions(),
    )
    assert result.stop_reason == "success", result.message
    assert result.answer == "The value is 1."
    assert phases(planner) == ["plan"]
    assert phases(executor) == ["execute", "execute"]
    assert phases(replanner) == ["replan"]
    assert default.calls == []


def test_a_role_left_out_uses_the_run_model() -> None:
    default = ScriptedModel(responses=[instruction_plan(), {"kind": "respond", "response": "done"}])
    executor = ScriptedModel(responses=[{"kind": "finish", "result": "a is 1"}])
    result = run_sync(
        SEED_GOAL,
        tools=[lookup],
        model=default,
        roles={"executor": executor},
        strategy="replan",
    )
    assert result.stop_reason == "success", result.message
    assert (phases(default), phases(executor)) == (["plan", "replan"], ["execute"])


def test_tree_sends_splits_to_the_planner_leaves_to_the_executor_and_rollups_apart() -> None:
    executor = ScriptedModel(
        rules=[
            (node(GOAL), wants_split(), "execute"),
            (node("Venue"), finish("Kosmos"), "execute"),
            (node("Speakers"), finish("12"), "execute"),
        ]
    )
    planner = ScriptedModel(rules=[(target(GOAL), kids("Venue", "Speakers"), "decompose")])
    rollup = ScriptedModel(rules=[(rolling(GOAL), "Kosmos, 12 speakers", "rollup")])
    default = unused()
    result = run_sync(
        GOAL,
        tools=Log().tools(),
        model=default,
        roles={"planner": planner, "executor": executor, "rollup": rollup},
        strategy="tree",
    )
    assert result.status == "ok", result.message
    assert result.answer == "Kosmos, 12 speakers"
    assert phases(executor) == ["execute", "execute", "execute"]
    assert (phases(planner), phases(rollup), default.calls) == (["decompose"], ["rollup"], [])


def test_combiner_model_is_the_combiner_role() -> None:
    planner = ScriptedModel(responses=[seed_plan()])
    combiner = ScriptedModel(responses=["from the combiner"])
    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=planner, combiner_model=combiner)
    assert result.answer == "from the combiner" and phases(combiner) == ["finalize"]


def test_two_combiners_and_an_unknown_role_are_refused() -> None:
    planner = ScriptedModel(responses=[seed_plan()])
    with pytest.raises(ConfigError, match="both name the combine call's model"):
        run_sync(
            SEED_GOAL,
            tools=SALES_TOOLS,
            model=planner,
            combiner_model="scripted:a.json",
            roles={"combiner": "scripted:b.json"},
        )
    with pytest.raises(ConfigError, match="'critic' is not a role; give models for: planner"):
        run_sync(SEED_GOAL, tools=SALES_TOOLS, model=planner, roles={"critic": planner})
    assert planner.calls == []


# -- stored with the run, rebuilt on resume --------------------------------------------------


def script(path: Path, answers: list[Any]) -> str:
    path.write_text(json.dumps(answers))
    return f"scripted:{path}"


class SlowOnce:
    """A tool whose first call outlasts any deadline; later calls answer at once."""

    def __init__(self) -> None:
        self.calls = 0

    def tools(self) -> list[Any]:
        async def fetch(key: str) -> str:
            """Fetch ``key``."""
            self.calls += 1
            if self.calls == 1:
                await asyncio.sleep(60)
            return f"{key} fetched"

        return [fetch]


@pytest.fixture
def sqlite(tmp_path: Path) -> Any:
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    yield store
    store.close()


def test_role_models_are_stored_and_rebuilt_on_resume(tmp_path: Path, sqlite: SqlStore) -> None:
    fetch = {"id": "s1", "title": "Fetch", "tool": "fetch", "args": {"key": "k"}}
    report = {"id": "s2", "title": "Report", "instruction": "Report k"}
    planner = script(tmp_path / "planner.json", [{"kind": "plan", "steps": [fetch]}])
    executor = script(tmp_path / "executor.json", [{"kind": "finish", "result": "k reported"}])
    replanner = tmp_path / "replanner.json"
    replanner.write_text(
        json.dumps(
            {
                "rules": [{"match": "k reported", "response": {"kind": "respond",
                                                                "response": "k: done"}}],
                "default": {"kind": "plan", "steps": [report]},
            }
        )
    )  # fmt: skip
    tools = SlowOnce()
    roles = {"executor": executor, "replanner": f"scripted:{replanner}"}
    first = run_sync(
        SEED_GOAL,
        tools=tools.tools(),
        model=planner,
        roles=roles,
        strategy="replan",
        store=sqlite,
        budget=Budget(max_seconds=0.5),
    )
    assert first.stop_reason == "max_seconds"
    stored = sqlite.load_run(first.run_id)
    assert stored.model == planner
    assert runconfig.stored_config(stored).roles == roles

    resumed = resume_sync(
        first.run_id, store=sqlite, tools=tools.tools(), budget=Budget(max_seconds=30)
    )
    assert resumed.stop_reason == "success", resumed.message
    assert resumed.answer == "k: done"  # the replanner's script, rebuilt from its string
    assert [entry.observation for entry in resumed.history] == ["k fetched", "k reported"]


def test_a_resume_may_give_a_role_another_model(tmp_path: Path, sqlite: SqlStore) -> None:
    plan = {"kind": "plan", "steps": [{"id": "s1", "title": "Fetch", "tool": "fetch",
                                       "args": {"key": "k"}}]}  # fmt: skip
    tools = SlowOnce()
    first = run_sync(
        SEED_GOAL,
        tools=tools.tools(),
        model=script(tmp_path / "planner.json", [plan]),
        combiner_model=script(tmp_path / "old.json", ["from the old combiner"]),
        store=sqlite,
        budget=Budget(max_seconds=0.5, min_plan_steps=1),
    )
    assert first.stop_reason == "max_seconds"
    combiner = ScriptedModel(responses=["from the new combiner"])
    resumed = resume_sync(
        first.run_id,
        store=sqlite,
        tools=tools.tools(),
        roles={"combiner": combiner},
        budget=Budget(min_plan_steps=1),
    )
    assert resumed.answer == "from the new combiner" and phases(combiner) == ["finalize"]


def test_an_older_run_s_combiner_model_reads_as_the_combiner_role(sqlite: SqlStore) -> None:
    config = {"budget": {}, "allow": ["fetch"], "combiner_model": "scripted:c.json"}
    sqlite.create_run(
        NewRun(run_id=RunId("old"), goal="g", model="scripted:p.json", tools=None, config=config),
        owner="test",
        ttl=30,
    )
    stored = runconfig.stored_config(sqlite.load_run(RunId("old")))
    assert stored.roles == {"combiner": "scripted:c.json"}
