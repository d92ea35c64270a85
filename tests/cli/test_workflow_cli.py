"""``taskdecomp workflow validate``: every problem named, exit 2 when invalid."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.clitools import cli

BROKEN = """
workflow: {name: mine, start: work}
phases:
  work:
    prompt: work.md
    type: execute
    transitions:
      - {to: check, when: "status.ready = true"}
      - {to: elsewhere, auto: true}
  check:
    prompt: nowhere.md
    type: evaluate
    colour: red
    transitions:
      - {to: work, auto: true}
"""


@pytest.mark.parametrize("name", ["default", "tasks"])
def test_the_built_in_workflows_are_valid(capsys: pytest.CaptureFixture[str], name: str) -> None:
    code, out, err = cli(capsys, "workflow", "validate", name)
    assert (code, out.strip(), err) == (0, f"{name}: valid", "")


def test_an_invalid_workflow_lists_every_problem_and_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    flow = tmp_path / "flow.yaml"
    flow.write_text(BROKEN)
    (tmp_path / "work.md").write_text("Work.")
    code, out, _ = cli(capsys, "workflow", "validate", str(flow), "--json")
    assert code == 2
    report = json.loads(out)
    assert report["valid"] is False
    where = {(p["phase"], p["field"]) for p in report["problems"]}
    assert where == {("check", "colour")}  # unknown keys stop the check before the graph
    flow.write_text(BROKEN.replace("    colour: red\n", ""))
    code, out, _ = cli(capsys, "workflow", "validate", str(flow))
    lines = out.strip().splitlines()
    assert code == 2
    assert f"{flow}: phase 'work', transitions[0].when: guard 'status.ready = true'" in out
    assert any("transitions[1].to: no phase 'elsewhere'" in line for line in lines)
    assert any("phase 'check', prompt: no prompt file 'nowhere.md'" in line for line in lines)
    assert any("phases: no terminal phase" in line for line in lines)
    assert len(lines) == 4


def test_a_missing_file_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "workflow", "validate", "no-such-flow.yaml")
    assert code == 2 and out == ""
    assert err.startswith("taskdecomp: error: no workflow file at 'no-such-flow.yaml'")
    assert err.count("\n") == 1


def scenario_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, *extra: str
) -> tuple[int, str, str, Path]:
    from tests.workflow.scenario import make_workspace, write_script

    ws, design = make_workspace(tmp_path)
    model = write_script(tmp_path / "script.json")
    db = str(tmp_path / "runs.db")
    code, out, err = cli(
        capsys,
        "workflow", "run", "--workspace", str(ws), "--input", str(design), "--model", model,
        "--min-tasks", "3", "--db", db, *extra,
    )  # fmt: skip
    return code, out, err, ws


def test_workflow_run_prints_phases_and_tasks_and_show_repeats_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err, _ = scenario_run(capsys, tmp_path)
    assert code == 0, err
    assert "step 1 p1: design_draft" in err  # progress names the phase
    assert "stop_reason=success" in out
    assert "sub(3, 1) gives 4" in out  # T2's feedback in the task table
    run_id = re.findall(r"workflow run ([0-9a-f]{32})", out)[0]
    db = str(tmp_path / "runs.db")
    code, shown, _ = cli(capsys, "workflow", "show", run_id, "--db", db, "--json")
    view = json.loads(shown)
    assert code == 0 and view["run_id"] == run_id and view["phase"] == "complete"
    assert [t["status"] for t in view["tasks"]] == ["passed"] * 5
    code, listed, _ = cli(capsys, "runs", "--db", db, "--json")
    assert code == 0 and run_id in {r["run_id"] for r in json.loads(listed)}
    code, text, _ = cli(capsys, "workflow", "show", run_id, "--db", db)
    assert code == 0 and "code_review" in text and "T5" in text


def test_workflow_run_json_and_no_commit(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from tests.workflow.scenario import git

    code, out, err, ws = scenario_run(capsys, tmp_path, "--json", "--no-commit")
    assert code == 0, err
    result = json.loads(out)
    assert result["stop_reason"] == "success" and result["status"] == "ok"
    assert git(ws, "log", "--format=%s").split() == ["start"]


def test_workflow_show_refuses_a_run_that_is_not_a_workflow(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from tests.conftest import SALES_TOOLS

    script = tmp_path / "plan.json"
    script.write_text(
        json.dumps(
            [
                {
                    "steps": [
                        {
                            "id": "s1",
                            "title": "t",
                            "tool": "get_manager_profile",
                            "args": {"manager_id": 42},
                        }
                    ]
                },
                "done",
            ]
        )
    )
    db = str(tmp_path / "runs.db")
    code, out, _ = cli(
        capsys, "run", "goal", "--tools", str(SALES_TOOLS), "--model", f"scripted:{script}",
        "--db", db, "--json", "--max-plan-steps", "3",
    )  # fmt: skip
    run_id = json.loads(out)["run_id"]
    code, _, err = cli(capsys, "workflow", "show", run_id, "--db", db)
    assert code == 2 and "is not a workflow run" in err


def test_workflow_run_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "x.json").write_text("[]")  # the cwd is tmp_path
    code, _, err = cli(
        capsys, "workflow", "run", "tasks", "--workspace", str(ws), "--model", "scripted:x.json"
    )
    assert code == 2 and "--tasks FILE" in err
    nowhere = str(tmp_path / "nowhere")
    code, _, err = cli(
        capsys, "workflow", "run", "--workspace", nowhere, "--model", "scripted:x.json"
    )
    assert code == 2 and "is not a folder" in err
    bad = tmp_path / "tasks.json"
    bad.write_text(
        json.dumps(
            {
                "tasks": [
                    {
                        "id": "A",
                        "title": "a",
                        "acceptanceCriteria": ["x"],
                        "filesAllowed": ["../out"],
                    }
                ]
            }
        )
    )
    code, _, err = cli(
        capsys, "workflow", "run", "tasks", "--workspace", str(ws), "--tasks", str(bad),
        "--model", "scripted:x.json",
    )  # fmt: skip
    assert code == 2 and "bad_glob:A" in err and "climbs out" in err


def test_workflow_run_refuses_a_cost_budget_over_an_unknown_price(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    db = str(tmp_path / "runs.db")
    code, _, err = cli(
        capsys, "workflow", "run", "--workspace", str(ws), "--model", "openai:my-tune",
        "--base-url", "http://127.0.0.1:9/v1", "--max-cost-usd", "1", "--db", db,
    )  # fmt: skip
    assert code == 2 and "'openai:my-tune' has none known" in err
    assert err.count("\n") == 1
    code, out, _ = cli(capsys, "runs", "--db", db, "--json")
    assert code != 0 or json.loads(out) in ([], {"runs": []})  # nothing was started
