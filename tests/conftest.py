"""Fixtures every test gets: a clean environment and a private working directory."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SALES_TOOLS = EXAMPLES / "sales_report" / "tools.py"

_PREFIXES = ("TASKDECOMP_", "OPENAI_", "DECOMP_")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """No settings leak in from the machine; cwd (and so ``.env``) is a fresh directory.

    ``TASKDECOMP_HOME`` points the default data directory (the SQLite store) at the test's
    own temporary directory.
    """
    for name in list(os.environ):
        if name.startswith(_PREFIXES):
            monkeypatch.delenv(name)
    home = tmp_path / "taskdecomp-home"
    monkeypatch.setenv("TASKDECOMP_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    yield home
