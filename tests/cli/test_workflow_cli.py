"""``taskdecomp workflow validate``: every problem named, exit 2 when invalid."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from taskdecomp.cli import main


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


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
