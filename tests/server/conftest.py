from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from taskdecomp.decomposition import DecompOptions
from taskdecomp.server import ServerConfig
from tests.server.support import TOOLSET, Served, decomp_model, run_model


@pytest.fixture
def toolset(tmp_path: Path) -> Path:
    path = tmp_path / "tools.py"
    path.write_text(TOOLSET)
    return path


@pytest.fixture
def config(tmp_path: Path, toolset: Path) -> ServerConfig:
    return ServerConfig(
        store_url=str(tmp_path / "runs.db"),
        toolsets={"demo": str(toolset)},
        models=(run_model(tmp_path),),
        decomp_model=decomp_model(tmp_path),
        decomp=DecompOptions(max_depth=2, concurrency=1),
        poll_seconds=0.1,
    )


@pytest.fixture
def served(config: ServerConfig) -> Iterator[Served]:
    with Served(config) as server:
        yield server
