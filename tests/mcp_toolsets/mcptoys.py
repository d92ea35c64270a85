"""The test MCP server (``servers/toy.py``) as the tests name it, and what it saw."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from taskdecomp import MCPServer
from taskdecomp.toolsets.mcp_client import HOST

TOY = Path(__file__).resolve().parent / "servers" / "toy.py"


class Toy:
    """One role of the toy server, counting its starts and calls in files of the test."""

    def __init__(self, folder: Path, role: str = "alpha") -> None:
        self.role = role
        self.starts_file = folder / f"{role}.starts"
        self.calls_file = folder / f"{role}.calls"

    @property
    def env(self) -> dict[str, str]:
        return {"TOY_STARTS": str(self.starts_file), "TOY_CALLS": str(self.calls_file)}

    def server(self, **options: object) -> MCPServer:
        """The server for ``tools=[...]``."""
        return MCPServer(
            command=sys.executable, args=[str(TOY), self.role], env=self.env, **options
        )  # type: ignore[arg-type]

    def spec(self, *options: str) -> str:
        """The ``--tools`` text of the server, with taskdecomp's ``--NAME=VALUE`` options."""
        env = [f"--env={name}={value}" for name, value in self.env.items()]
        return "mcp:" + shlex.join([*options, *env, sys.executable, str(TOY), self.role])

    def starts(self) -> int:
        return len(_lines(self.starts_file))

    def calls(self) -> list[str]:
        return [line.split(":", 1)[1] for line in _lines(self.calls_file)]


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


@pytest.fixture(autouse=True)
def closed_sessions() -> Iterator[None]:
    """Each test's servers are ended when it ends."""
    yield
    HOST.close()
