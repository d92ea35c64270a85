"""The installed command, in a real process: it exits on time whatever a tool does, and Ctrl-C
stops a run as ``cancelled``.

Each run's tool would take ten minutes (``tests/deadline_tools.py``), so a process that
waited for it would not exit before the test gives up on it; no test measures how long the
process lived, which depends on the machine's load.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from tests import deadline_tools
from tests.clitools import EXE
from tests.test_isolation import KINDS, finished, running

TOOLS = Path(deadline_tools.__file__)


@pytest.fixture
def marks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "marks"
    folder.mkdir()
    monkeypatch.setenv("DEADLINE_MARKS", str(folder))
    return folder


def script(tmp_path: Path, tool_name: str, **args: Any) -> str:
    steps = [
        {"id": "s1", "title": "the call", "tool": tool_name, "args": {"n": 1, **args}},
        {"id": "s2", "title": "then", "tool": "quick", "args": {"n": 2}},
        {"id": "s3", "title": "last", "tool": "quick", "args": {"n": 3}},
    ]
    plan = {"kind": "plan", "steps": steps}
    path = tmp_path / f"script-{tool_name}.json"
    path.write_text(json.dumps({"rules": [{"match": "available_tools", "response": plan}]}))
    return f"scripted:{path}"


def command(*argv: str) -> list[str]:
    return [str(EXE), *argv]


def start(tmp_path: Path, tool_name: str, *extra: str, **args: Any) -> list[str]:
    return command(
        "run", "goal", "--tools", str(TOOLS), "--model", script(tmp_path, tool_name, **args), *extra
    )


def finish(argv: list[str]) -> tuple[int, dict[str, Any], str]:
    """Run ``argv`` to its end: exit code, the JSON it printed, stderr.

    The output goes to files, not pipes: a process the command left behind would hold a
    pipe open, and the wait would end only with that process; :func:`left_behind` says so.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        code = subprocess.run(argv, stdout=out, stderr=err, timeout=120).returncode
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    assert "Traceback" not in stderr, stderr
    return code, json.loads(stdout), stderr


def left_behind(marks: Path, within: float = 60) -> list[int]:
    """The processes the command started that still run once it has exited: none, at once.

    Every process the command starts inherits ``DEADLINE_MARKS``, which names this test's
    own folder; the helpers multiprocessing starts end soon after the command. Whatever
    still runs after ``within`` seconds is killed (a tool would sleep ten minutes) and named.
    """
    needle = f"DEADLINE_MARKS={marks}".encode()

    def ours() -> list[int]:
        found = []
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and needle in (proc / "environ").read_bytes().split(b"\0"):
                    found.append(int(proc.name))
            except OSError:  # gone meanwhile, or not ours to read
                continue
        return [pid for pid in found if pid != os.getpid() and running(pid)]

    until = time.monotonic() + within
    while (left := ours()) and time.monotonic() < until:
        time.sleep(0.1)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


def show(run_id: str) -> dict[str, Any]:
    proc = subprocess.run(command("show", run_id, "--json"), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    shown: dict[str, Any] = json.loads(proc.stdout)
    return shown


@pytest.mark.parametrize(
    ("tool_name", "max_seconds", "reason"),
    [
        ("sleeps", "1", "max_seconds"),
        ("sleeps_past_timeout", "60", "tool_timeout:sleeps_past_timeout"),  # timeout=1
        ("ignores_cancellation", "1", "max_seconds"),
    ],
)
def test_the_process_exits_by_the_deadline_whatever_the_tool_does(
    tmp_path: Path, marks: Path, tool_name: str, max_seconds: str, reason: str
) -> None:
    argv = start(tmp_path, tool_name, "--max-seconds", max_seconds, "--json")
    code, result, _ = finish(argv)
    assert (marks / f"{tool_name}.pid").exists()
    assert (code, result["stop_reason"]) == (1, reason)
    assert not finished(marks, tool_name)  # the process exited without waiting for it
    assert show(result["run_id"])["status"] == "stopped"


# the shorter deadlines fall while the worker process starts, or before the tool is called
@pytest.mark.parametrize("seconds", ["4", "0.3", "0.12", "0.06"])
def test_an_isolated_tool_is_killed_with_the_run(tmp_path: Path, marks: Path, seconds: str) -> None:
    argv = start(tmp_path, "isolated_sleeps", "--max-seconds", seconds, "--json")
    code, result, _ = finish(argv)
    assert (code, result["stop_reason"]) == (1, "max_seconds")
    assert left_behind(marks) == []  # the tool's process was killed with the run
    assert not finished(marks, "isolated_sleeps")


@pytest.mark.parametrize(
    ("tool_name", "message"),
    [
        ("isolated_segfaults", "the tool's process exited with code -11 (SIGSEGV)"),
        ("isolated_exits", "the tool's process exited with code 3"),
    ],
)
def test_an_isolated_tool_that_dies_is_a_tool_error(
    tmp_path: Path, tool_name: str, message: str
) -> None:
    code, result, _ = finish(start(tmp_path, tool_name, "--json"))
    assert (code, result["stop_reason"]) == (1, f"tool_error:{tool_name}")
    assert result["trace"][0]["error"].startswith(message)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_tool_raising_base_exception_is_a_tool_error(tmp_path: Path, kind: str) -> None:
    code, result, _ = finish(start(tmp_path, "raises", "--json", kind=kind))
    assert (code, result["stop_reason"], result["message"]) == (1, "tool_error:raises", KINDS[kind])
    assert result["trace"][0]["error"] == KINDS[kind]
    stored = show(result["run_id"])
    assert (stored["status"], stored["stop_reason"]) == ("stopped", "tool_error:raises")


def test_an_unsafe_step_abandoned_at_the_deadline_stays_in_doubt(
    tmp_path: Path, marks: Path
) -> None:
    code, result, _ = finish(start(tmp_path, "charges_slowly", "--max-seconds", "1", "--json"))
    assert (code, result["stop_reason"]) == (1, "max_seconds")
    code, resumed, _ = finish(command("resume", result["run_id"], "--json"))
    assert (code, resumed["stop_reason"]) == (1, "interrupted_unknown_outcome:s1")
    assert (marks / "charges_slowly.pid").exists() and not finished(marks, "charges_slowly")


def wait_for(proc: subprocess.Popen[bytes], path: Path | None, needle: bytes = b"") -> bytes:
    """Wait (at most 120 s) until ``path`` exists or stderr shows ``needle``; stderr so far."""
    assert proc.stderr is not None
    seen = b""
    until = time.monotonic() + 120
    while time.monotonic() < until:
        if path is not None and path.exists():
            return seen
        if needle and needle in seen:
            return seen
        ready, _, _ = select.select([proc.stderr], [], [], 0.05)
        if ready:
            seen += os.read(proc.stderr.fileno(), 65536)
    pytest.fail(f"the run did not get there; stderr: {seen!r}")


def interrupt(argv: list[str], *, marker: Path | None, needle: bytes = b"", times: int = 1) -> Any:
    """Start ``argv``, type Ctrl-C ``times`` once it got there: exit code, stdout, stderr.

    The process must then exit on its own: its tool (or import) would take ten minutes.
    """
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen = wait_for(proc, marker, needle)
    for _ in range(times):
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out.decode(), seen + err


def test_ctrl_c_stops_the_run_as_cancelled_and_it_can_resume(tmp_path: Path, marks: Path) -> None:
    argv = start(tmp_path, "sleeps", "--json")
    code, out, err = interrupt(argv, marker=marks / "sleeps.pid")
    assert code == 130, err
    assert not finished(marks, "sleeps")
    assert b"Traceback" not in err
    result = json.loads(out)
    assert (result["status"], result["stop_reason"]) == ("stopped", "cancelled")
    assert [(e["step_id"], e["ok"]) for e in result["trace"]] == [("s1", False)]
    stored = show(result["run_id"])
    assert (stored["status"], stored["stop_reason"]) == ("stopped", "cancelled")

    code, resumed, _ = finish(command("resume", result["run_id"], "--max-seconds", "1", "--json"))
    assert (code, resumed["stop_reason"]) == (1, "max_seconds")  # it ran the step again
    assert show(result["run_id"])["segments"] == 2


def test_a_second_ctrl_c_exits_at_once_without_a_traceback(tmp_path: Path, marks: Path) -> None:
    argv = start(tmp_path, "ignores_cancellation")
    code, out, err = interrupt(argv, marker=None, needle=b"ignores_cancellation", times=2)
    assert code == 130, err
    assert not finished(marks, "ignores_cancellation")
    assert b"Traceback" not in err and "Traceback" not in out


def test_ctrl_c_while_the_toolset_imports_exits_quietly(tmp_path: Path, marks: Path) -> None:
    slow = tmp_path / "slow_tools.py"
    slow.write_text(
        "import os, time\n"
        "from pathlib import Path\n"
        "Path(os.environ['DEADLINE_MARKS'], 'importing').touch()\n"
        "time.sleep(600)\n"
        "Path(os.environ['DEADLINE_MARKS'], 'imported').touch()\n"
        "def look(n: int) -> int:\n"
        "    return n\n"
    )
    argv = command("run", "goal", "--tools", str(slow), "--model", script(tmp_path, "look"))
    code, out, err = interrupt(argv, marker=marks / "importing")
    assert (code, out) == (130, "")
    assert not (marks / "imported").exists()
    assert err.strip() == b"", err
