"""Which status fields a phase run clears when it starts.

A phase's own earlier verdicts are cleared, so a stale one never picks its next phase; a
field another phase set in this round stays for the phase whose transitions read it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from taskdecomp.models import ScriptedModel
from taskdecomp.run import RunResult
from taskdecomp.strategies.workflow.api import run_workflow
from tests.workflow.scenario import call, finish, first

WORKFLOW = """
workflow:
  name: routed
  version: 1
  start: review
phases:
  review:
    prompt: review.md
    type: evaluate
    transitions:
      - to: evaluate
        auto: true
  evaluate:
    prompt: evaluate.md
    type: evaluate
    transitions:
      - to: review
        when: "status.again == true"
      - to: approved
        when: "status.designApproved == true"
      - to: rejected
        when: "status.designApproved == false"
  approved:
    type: terminal
  rejected:
    type: terminal
"""


def phase(name: str) -> str:
    return f'"phase": "{name}"'


def run(tmp_path: Path, script: list[tuple[str, Any]]) -> RunResult:
    folder = tmp_path / "wf"
    folder.mkdir()
    (folder / "routed.yaml").write_text(WORKFLOW)
    (folder / "review.md").write_text("Review the design; set designApproved.")
    (folder / "evaluate.md").write_text("Decide from the review's verdict; set again to redo.")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    model = ScriptedModel(rules=[*script, (".*", finish("done"))])
    return asyncio.run(run_workflow(folder / "routed.yaml", workspace=workspace, model=model))


def test_a_phase_routes_on_the_verdict_another_phase_gave(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        [(f"{phase('review')}.*{first()}", call("set_status", fields={"designApproved": True}))],
    )
    assert result.stop_reason == "success", result.message
    assert [h.observation["phase"] for h in result.history] == ["review", "evaluate"]
    assert result.history[-1].observation["phase"] == "evaluate"


def having(*parts: str) -> str:
    """Matches a request that holds every part, in any order."""
    return "".join(f"(?=.*{part})" for part in parts)


def test_a_phase_run_again_does_not_keep_its_earlier_verdict(tmp_path: Path) -> None:
    # evaluate asks for another review once; the second review gives no verdict, so the
    # first review's approval must not carry over: evaluate is stuck.
    again = call("set_status", fields={"again": True})
    approve = call("set_status", fields={"designApproved": True})
    result = run(
        tmp_path,
        [
            (having(phase("review"), '"status": \\{\\}', first()), approve),
            (having(phase("review"), first()), finish("no verdict this time")),
            (having(phase("evaluate"), '"designApproved": true', first()), again),
        ],
    )
    assert result.stop_reason == "workflow_stuck:evaluate", result.message
    phases = [h.observation["phase"] for h in result.history]
    assert phases == ["review", "evaluate", "review", "evaluate"]
