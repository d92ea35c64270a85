"""Tools that will not stop, raise BaseException, or crash: the run still ends, on time.

Through the API (``run_sync`` and the gateway); ``tests/cli/test_deadline_cli.py`` does the
same through the command line, where the process itself must exit.

No test measures how long a run took: each slow tool takes ten minutes, so a run that waited
for one would hit the test's timeout, and each run must end with the stop reason of the
deadline (or the tool's timeout) while the tool has not finished.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskdecomp import Budget, ScriptedModel, StopRun, ToolGateway, Toolset, load_toolset, tool
from taskdecomp.budget import Meter
from taskdecomp.engine import run_sync
from taskdecomp.errors import ToolsetError
from taskdecomp.run import RunResult
from taskdecomp.store import SqlStore, open_store
from tests import deadline_tools

TOOLS = Path(deadline_tools.__file__)
KINDS = {
    "KeyboardInterrupt": "KeyboardInterrupt",
    "SystemExit0": "SystemExit: 0",
    "SystemExit3": "SystemExit: 3",
    "CancelledError": "CancelledError: raised by the tool",
    "BaseException": "BaseException: bare",
}


@pytest.fixture
def marks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the slow tools say they started, and in which process."""
    folder = tmp_path / "marks"
    folder.mkdir()
    monkeypatch.setenv("DEADLINE_MARKS", str(folder))
    return folder


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    opened = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    yield opened
    opened.close()


def model(tool_name: str, **args: Any) -> ScriptedModel:
    steps = [
        {"id": "s1", "title": "the call", "tool": tool_name, "args": {"n": 1, **args}},
        {"id": "s2", "title": "then", "tool": "quick", "args": {"n": 2}},
        {"id": "s3", "title": "last", "tool": "quick", "args": {"n": 3}},
    ]
    return ScriptedModel(
        rules=[("available_tools", {"kind": "plan", "steps": steps})], default="ok"
    )


def finish(
    tool_name: str, *, max_seconds: float = 60, store: SqlStore | None = None, **args: Any
) -> RunResult:
    return run_sync(
        "goal",
        tools=TOOLS,
        model=model(tool_name, **args),
        budget=Budget(max_seconds=max_seconds),
        store=store,
    )


def finished(marks: Path, tool_name: str) -> bool:
    """Whether a call of the slow tool ``tool_name`` got to its end."""
    return (marks / f"{tool_name}.finished").exists()


def running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def gone(pid: int, within: float = 60.0) -> bool:
    """Whether process ``pid`` has ended within ``within`` s.

    It returns as soon as the process is gone; the bound is only how long to wait for a
    process that was never killed (it sleeps ten minutes), so it is generous for a busy
    machine.
    """
    until = time.monotonic() + within
    while running(pid):
        if time.monotonic() >= until:
            return False
        time.sleep(0.05)
    return True


def test_an_async_tool_that_ignores_cancellation_cannot_hold_the_run_past_its_deadline(
    marks: Path,
) -> None:
    result = finish("ignores_cancellation", max_seconds=1)
    assert (marks / "ignores_cancellation.pid").exists()
    assert result.stop_reason == "max_seconds"
    assert not finished(marks, "ignores_cancellation")  # the run did not wait for it
    assert [(e.step_id, e.ok, e.error) for e in result.trace] == [
        ("s1", False, "cancelled before it finished")
    ]


@pytest.mark.parametrize(
    ("tool_name", "max_seconds", "reason"),
    [
        ("sleeps", 1, "max_seconds"),
        ("sleeps_past_timeout", 60, "tool_timeout:sleeps_past_timeout"),
    ],
)
def test_a_sync_tool_that_runs_on_is_left_on_a_daemon_thread(
    marks: Path, tool_name: str, max_seconds: float, reason: str
) -> None:
    result = finish(tool_name, max_seconds=max_seconds)
    assert result.stop_reason == reason
    assert (marks / f"{tool_name}.pid").exists() and not finished(marks, tool_name)
    workers = [t for t in threading.enumerate() if t.name.startswith("taskdecomp-tool")]
    assert workers, "the abandoned call's thread should still be running"
    assert all(t.daemon for t in workers)  # so it cannot keep the process from exiting


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("tool_name", ["raises", "raises_async", "isolated_raises"])
def test_whatever_a_tool_raises_is_a_tool_error(store: SqlStore, tool_name: str, kind: str) -> None:
    result = finish(tool_name, store=store, kind=kind)
    assert (result.status, result.stop_reason) == ("stopped", f"tool_error:{tool_name}")
    assert result.message == KINDS[kind]
    assert [(e.step_id, e.stop_reason, e.error) for e in result.trace] == [
        ("s1", f"tool_error:{tool_name}", KINDS[kind])
    ]
    stored = store.load_run(result.run_id)
    assert (stored.summary.status, stored.summary.stop_reason) == ("stopped", result.stop_reason)


def gateway(*names: str) -> ToolGateway:
    toolset = load_toolset(TOOLS)
    return ToolGateway(allow=names, toolset=toolset, meter=Meter(budget=Budget()))


def call(name: str, **args: Any) -> Any:
    return asyncio.run(gateway(name).call(name, args, idempotency_key="run:s1"))


def failure(name: str, **args: Any) -> StopRun:
    with pytest.raises(StopRun) as caught:
        call(name, **args)
    return caught.value


def test_an_isolated_tool_runs_in_another_process_with_typed_arguments_and_its_key() -> None:
    answer = call("isolated_echo", n="7", day="2026-04-01")
    assert answer["pid"] != os.getpid()
    assert answer == {
        "n": 7,
        "day": "2026-04-01",
        "day_is_a_date": True,
        "key": "run:s1",
        "pid": answer["pid"],
    }
    assert call("isolated_async", n=1) == 2


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "isolated_segfaults",
            "the tool's process exited with code -11 (SIGSEGV) before returning",
        ),
        ("isolated_exits", "the tool's process exited with code 3 before returning"),
        ("isolated_fails", "ValueError: no 1"),
        ("isolated_returns_an_object", "returned a value that is not JSON-serializable"),
    ],
)
def test_an_isolated_tool_that_crashes_or_fails_is_a_tool_error(name: str, message: str) -> None:
    stop = failure(name, n=1)
    assert stop.reason == f"tool_error:{name}"
    assert stop.message.startswith(message), stop.message


def test_an_isolated_tool_past_the_deadline_is_killed(marks: Path) -> None:
    call("isolated_async", n=1)  # worker processes start at once now, well before the deadline
    result = finish("isolated_sleeps", max_seconds=4)
    assert result.stop_reason == "max_seconds"
    pid = int((marks / "isolated_sleeps.pid").read_text())
    assert pid != os.getpid()
    assert gone(pid), f"the tool's process {pid} is still running"
    assert not finished(marks, "isolated_sleeps")  # killed, not left to end


def test_an_isolated_tool_past_its_timeout_is_killed(marks: Path) -> None:
    call("isolated_async", n=1)  # worker processes start at once now, well within the timeout
    stop = failure("isolated_sleeps_past_timeout", n=1)
    assert stop.reason == "tool_timeout:isolated_sleeps_past_timeout"
    assert gone(int((marks / "isolated_sleeps_past_timeout.pid").read_text()))
    assert not finished(marks, "isolated_sleeps_past_timeout")


def test_a_toolset_can_isolate_all_its_tools(tmp_path: Path) -> None:
    path = tmp_path / "isolated.py"
    path.write_text(
        "import os\n"
        "from taskdecomp import tool\n"
        'ISOLATION = "process"\n'
        "def where(n: int) -> int:\n"
        "    return os.getpid()\n"
        '@tool(isolation="none")\n'
        "def here(n: int) -> int:\n"
        "    return os.getpid()\n"
    )
    toolset = load_toolset(path)
    assert (toolset["where"].isolation, toolset["here"].isolation) == ("process", "none")
    gate = ToolGateway(allow=toolset, toolset=toolset, meter=Meter(budget=Budget()))
    assert asyncio.run(gate.call("where", {"n": 1})) != os.getpid()
    assert asyncio.run(gate.call("here", {"n": 1})) == os.getpid()


def test_isolation_is_checked_where_it_is_declared(tmp_path: Path) -> None:
    path = tmp_path / "bad.py"
    path.write_text('ISOLATION = "thread"\ndef f(n: int) -> int:\n    return n\n')
    with pytest.raises(ToolsetError, match=r"ISOLATION must be 'none' or 'process', got 'thread'"):
        load_toolset(path)
    with pytest.raises(ValueError, match=r"isolation must be 'none' or 'process', got 'x'"):
        tool(isolation="x")  # type: ignore[call-overload]

    @tool(isolation="process")
    def nested(n: int) -> int:
        return n

    with pytest.raises(ToolsetError, match=r"tool 'nested' has isolation='process'.*top level"):
        Toolset.from_functions([nested])
