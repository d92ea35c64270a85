"""docs/mcp-server.md's Python client snippet runs as written and prints what it says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.clitools import CHILD
from tests.conftest import EXAMPLES, ROOT
from tests.mcpserver.support import SALES_ANSWER

DOC = ROOT / "docs" / "mcp-server.md"


def test_the_python_client_snippet_runs_the_seed_example(tmp_path: Path) -> None:
    snippet = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)[-1]
    (tmp_path / "client.py").write_text(snippet)
    (tmp_path / "examples").symlink_to(EXAMPLES)
    bin_dir = tmp_path / "bin"  # `taskdecomp` as installed, running this checkout's sources
    bin_dir.mkdir()
    shim = bin_dir / "taskdecomp"
    path = os.environ.get("PYTHONPATH", "")
    command = " ".join(f"'{part}'" for part in CHILD)
    shim.write_text(f"#!/bin/sh\nPYTHONPATH='{path}' exec {command} \"$@\"\n")
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [sys.executable, "client.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == ".. plan ready: 5 steps"
    assert lines[-2:] == ["ok success", SALES_ANSWER]
    assert (tmp_path / "runs.db").exists()
