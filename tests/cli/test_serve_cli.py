"""``taskdecomp serve`` refuses a bad start-up with one line and exit code 2."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.clitools import CHILD


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--tools", "nothing-here"), "is not NAME=PATH"),
        (("--tools", "a=missing_tools.py", "--model", "scripted:x.json"), "toolset 'a'"),
        (("--tools", "a=t.py", "--model", "scripted:missing.json"), "missing.json"),
        (("--tools", "a=t.py", "--model", "nosuch:model"), "unknown model provider 'nosuch'"),
        (("--tools", "a=t.py", "--tools", "a=t.py", "--model", "scripted:s.json"), "twice"),
    ],
)
def test_a_bad_start_is_one_line(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    (tmp_path / "t.py").write_text("def work(name: str) -> str:\n    return name\n")
    (tmp_path / "s.json").write_text("[]")
    done = subprocess.run(
        [*CHILD, "serve", "--port", "0", "--db", str(tmp_path / "r.db"),
         *args],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_serve_help_names_the_token() -> None:
    done = subprocess.run([*CHILD, "serve", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "TASKDECOMP_API_TOKEN" in done.stdout
