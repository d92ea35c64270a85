"""``taskdecomp tools`` shows how often each tool's failed calls are tried again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.clitools import cli

TOOLS = '''
from taskdecomp import tool


@tool(retries=2, backoff_s=0.5)
def fetch(month: str) -> dict:
    """Fetch a month's sales."""
    return {"month": month}


def total(month: str) -> dict:
    """Sum a month's sales."""
    return {"month": month}
'''


def test_a_tools_retries_and_first_wait_are_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    toolset = tmp_path / "tools.py"
    toolset.write_text(TOOLS)
    monkeypatch.setenv("COLUMNS", "160")
    code, out, _ = cli(capsys, "tools", str(toolset))
    assert code == 0
    header = next(row for row in out.splitlines() if row.startswith("tool "))
    assert header.split()[:6] == ["tool", "side", "effects", "timeout", "isolation", "approval"]
    assert header.split()[6] == "retries"
    [fetch] = [row for row in out.splitlines() if row.startswith("fetch ")]
    [total] = [row for row in out.splitlines() if row.startswith("total ")]
    assert fetch.split()[4:7] == ["-", "2", "(0.5s)"]
    assert total.split()[4:6] == ["-", "-"]

    code, out, _ = cli(capsys, "tools", str(toolset), "--json")
    assert code == 0
    listed = {entry["name"]: entry for entry in json.loads(out)["tools"]}
    assert (listed["fetch"]["retries"], listed["fetch"]["backoff_s"]) == (2, 0.5)
    assert listed["total"]["retries"] == 0
