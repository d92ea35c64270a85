"""The agent's workspace tools through a real gateway: refusals are answers, not crashes."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from taskdecomp.budget import Budget, Meter
from taskdecomp.gateway import ToolGateway
from taskdecomp.strategies.workflow.files import workspace_tools
from taskdecomp.strategies.workflow.workspace import Workspace, WriteScope

TASK = WriteScope(files_allowed=("src/pkg/**",), allowed_writes=())


class Agent:
    """Calls the workspace tools as an agent's turns would."""

    def __init__(self, root: Path) -> None:
        self.scope = TASK
        tools = workspace_tools(Workspace(root), lambda: self.scope)
        budget = Budget(max_tool_calls=100)
        self.gateway = ToolGateway(allow=tools.keys(), toolset=tools, meter=Meter(budget=budget))
        self.calls = 0

    def __call__(self, name: str, **args: Any) -> Any:
        self.calls += 1
        key = f"r:{self.calls}"
        return asyncio.run(self.gateway.call(name, args, idempotency_key=key))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "pkg" / "mod.py").write_text("def f():\n    return 1\n")
    (ws / "README.md").write_text("hello\nworld\n")
    (ws / "blob.bin").write_bytes(b"\x00\x01\x02")
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("[core]\n")
    (tmp_path / "secret.txt").write_text("secret\n")
    return ws


def test_the_agent_can_read_search_and_list(root: Path) -> None:
    agent = Agent(root)
    listed = agent("list_files")
    assert listed == {
        "ok": True,
        "files": ["README.md", "blob.bin", "src/pkg/mod.py"],
        "truncated": False,
    }
    read = agent("read_file", path="README.md", start_line=2)
    assert (read["lines"], read["total_lines"]) == (["world"], 2)
    found = agent("search_files", text="return")
    assert found["matches"] == [{"path": "src/pkg/mod.py", "line": 2, "text": "    return 1"}]


def test_writes_in_scope_land_and_repeating_them_changes_nothing(root: Path) -> None:
    agent = Agent(root)
    assert agent("write_file", path="src/pkg/new.py", content="x = 1\n")["ok"]
    assert (root / "src" / "pkg" / "new.py").read_text() == "x = 1\n"
    changed = agent("replace_in_file", path="src/pkg/mod.py", old="return 1", new="return 2")
    assert changed == {"ok": True, "path": "src/pkg/mod.py"}
    resumed = Agent(root)  # a resume calls it again, in a new process
    again = resumed("replace_in_file", path="src/pkg/mod.py", old="return 1", new="return 2")
    assert again == {"ok": True, "path": "src/pkg/mod.py", "already": True}
    assert agent("delete_file", path="src/pkg/new.py") == {"ok": True, "path": "src/pkg/new.py"}
    assert resumed("delete_file", path="src/pkg/new.py")["already"] is True


@pytest.mark.parametrize(
    ("tool", "args", "word"),
    [
        ("write_file", {"path": "README.md", "content": "x"}, "outside what may be written"),
        ("write_file", {"path": "../secret.txt", "content": "x"}, "'..'"),
        ("write_file", {"path": ".git/config", "content": "x"}, ".git"),
        ("delete_file", {"path": "README.md"}, "outside what may be written"),
        ("replace_in_file", {"path": "README.md", "old": "hello", "new": "bye"}, "outside"),
        ("read_file", {"path": "../secret.txt"}, "'..'"),
        ("read_file", {"path": "blob.bin"}, "binary"),
        ("read_file", {"path": "missing.txt"}, "not a file"),
        ("list_files", {"folder": "/etc"}, "absolute"),
    ],
)
def test_refusals_are_answers_the_agent_sees_and_nothing_changes(
    root: Path, tool: str, args: dict[str, Any], word: str
) -> None:
    before = {p: p.read_bytes() for p in root.parent.rglob("*") if p.is_file()}
    answer = Agent(root)(tool, **args)
    assert answer["ok"] is False and word in (answer.get("refused") or answer.get("error", ""))
    assert {p: p.read_bytes() for p in root.parent.rglob("*") if p.is_file()} == before


def test_a_read_only_phase_may_write_nothing(root: Path) -> None:
    agent = Agent(root)
    agent.scope = WriteScope()
    answer = agent("write_file", path="src/pkg/mod.py", content="x")
    assert answer == {
        "ok": False,
        "refused": "'src/pkg/mod.py' is outside what may be written now: nothing (this phase "
        "is read-only)",
    }


def test_replace_needs_exactly_one_occurrence(root: Path) -> None:
    (root / "src" / "pkg" / "twice.py").write_text("a\na\n")
    answer = Agent(root)("replace_in_file", path="src/pkg/twice.py", old="a", new="b")
    assert answer["ok"] is False and "occurs 2 times" in answer["error"]
