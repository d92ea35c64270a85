"""``taskdecomp mcp``'s usage errors: one line, exit 2, before anything is served."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.clitools import CHILD, cli
from tests.conftest import SALES_TOOLS
from tests.mcpserver.support import SALES_SCRIPT

MODEL = ("--model", f"scripted:{SALES_SCRIPT}")


def test_without_the_mcp_extra_it_names_the_extra(tmp_path: Path) -> None:
    blocked = tmp_path / "blocked" / "mcp"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'mcp'\", name='mcp')\n"
    )
    paths = [str(tmp_path / "blocked"), *filter(None, [os.environ.get("PYTHONPATH")])]
    done = subprocess.run(
        [*CHILD, "mcp", *MODEL],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "taskdecomp: error: 'taskdecomp mcp' needs the mcp extra: pip install 'taskdecomp[mcp]'"
    )


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("--host", "0.0.0.0"), "--host and --allowed-host go with --http PORT"),
        (("--http", "9", "--host", "0.0.0.0"), "refusing to listen on '0.0.0.0' without a token"),
        (("--tools", "no_such_module_here"), "no_such_module_here"),
        (("--model", "nosuch:model"), "nosuch"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], says: str
) -> None:
    code, out, err = cli(capsys, "mcp", "--tools", str(SALES_TOOLS), *MODEL, *argv)
    assert code == 2 and out == ""
    assert err.startswith("taskdecomp: error: ") and says in err
    assert err.count("\n") == 1
