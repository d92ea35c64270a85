"""``taskdecomp decompose`` and ``taskdecomp tree`` against a real SQLite file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from taskdecomp.store import open_store
from tests.clitools import cli
from tests.conftest import EXAMPLES

SCRIPT = EXAMPLES / "decomposer" / "script.json"
LOGISTICS = EXAMPLES / "decomposer" / "logistics.json"
GOAL = "Launch a developer conference in Berlin"


def test_decompose_a_goal_draws_the_tree_and_says_what_failed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = cli(
        capsys, "decompose", GOAL, "--model", f"scripted:{SCRIPT}", "--max-depth", "2"
    )
    assert code == 1  # the Logistics node timed out
    assert "plan #1" in out and "Shortlist venues" in out and "(leaf)" in out
    assert out.strip().splitlines()[-1] == (
        "Plan #1 got 15 subtasks; node 6 was not processed because the model did not answer."
    )
    assert "node 6 'Logistics': failed (llm_timeout)" in err


def test_single_node_then_tree_json(capsys: pytest.CaptureFixture[str]) -> None:
    cli(capsys, "decompose", GOAL, "--model", f"scripted:{SCRIPT}", "--max-depth", "2")
    code, out, _ = cli(
        capsys,
        "decompose",
        "--plan",
        "1",
        "--node",
        "6",
        "--model",
        f"scripted:{LOGISTICS}",
        "--json",
    )
    assert code == 0
    result = json.loads(out)
    assert result["mode"] == "single_node" and result["root_node_id"] == 6
    assert [t["name"] for t in result["created_tasks"]] == ["Catering", "Badges", "Volunteers"]
    assert all(t["parent_id"] == 6 for t in result["created_tasks"])
    code, out, _ = cli(capsys, "tree", "1", "--json")
    tree = json.loads(out)
    assert code == 0 and len(tree["nodes"]) == 19
    assert {n["name"]: n["depth"] for n in tree["nodes"]}["Catering"] == 2


def test_tree_lists_plans(capsys: pytest.CaptureFixture[str]) -> None:
    cli(capsys, "decompose", "first plan", "--no-auto", "--model", f"scripted:{SCRIPT}")
    cli(capsys, "decompose", "second plan", "--no-auto", "--model", f"scripted:{SCRIPT}")
    code, out, _ = cli(capsys, "tree", "--json")
    assert code == 0
    assert json.loads(out) == [
        {"id": 2, "title": "second plan", "nodes": 1},
        {"id": 1, "title": "first plan", "nodes": 1},
    ]


def test_environment_budgets_and_decomp_model(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    script = tmp_path / "wide.json"
    script.write_text(
        json.dumps(
            {
                "rules": [
                    {"match": ".", "response": {"children": [{"name": f"c{i}"} for i in range(4)]}}
                ]
            }
        )
    )
    monkeypatch.setenv("DECOMP_MODEL", f"scripted:{script}")
    monkeypatch.setenv("DECOMP_TOTAL_NODE_BUDGET", "6")
    code, out, _ = cli(capsys, "decompose", "goal", "--json")
    result: dict[str, Any] = json.loads(out)
    assert code == 0
    assert result["stats"]["nodes_created"] == 6 and result["stopped_reason"] == "max_nodes"
    code, out, _ = cli(capsys, "decompose", "goal", "--json", "--node-budget", "2")
    assert json.loads(out)["stats"]["nodes_created"] == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["decompose"], "give either GOAL"),
        (["decompose", "g", "--plan", "1"], "give either GOAL"),
        (["decompose", "--node", "3"], "give either GOAL"),
        (["decompose", "g", "--overwrite"], "go with --node"),
        (["decompose", "--plan", "41", "--model", f"scripted:{SCRIPT}"], "no plan tree has id 41"),
        (["tree", "99"], "no plan tree has id 99"),
        (["decompose", "g", "--model", "scripted:/nope.json"], "does not exist"),
        (["decompose", "g", "--max-depth", "0"], "--max-depth"),
    ],
)
def test_usage_errors(
    capsys: pytest.CaptureFixture[str], clean_env: Path, argv: list[str], message: str
) -> None:
    open_store(str(clean_env / "runs.db")).close()  # a store, so ids are looked up in it
    code, _, err = cli(capsys, *argv)
    assert code == 2
    assert message in err and err.count("\n") == 1


def test_bad_decomp_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DECOMP_MAX_DEPTH", "deep")
    code, _, err = cli(capsys, "decompose", "g", "--model", f"scripted:{SCRIPT}")
    assert code == 2 and "DECOMP_MAX_DEPTH" in err
