"""The operator's choices: loopback, NAME=PATH toolsets, the config's own checks, exports."""

from __future__ import annotations

import pytest

import taskdecomp.server
from taskdecomp.errors import ConfigError
from taskdecomp.server import ServerConfig, check_bind, is_loopback
from taskdecomp.server.config import parse_toolsets


@pytest.mark.parametrize("host", ["127.0.0.1", "127.3.2.1", "::1", "[::1]", "localhost"])
def test_loopback_addresses(host: str) -> None:
    assert is_loopback(host)
    check_bind(host, None)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "example.com", ""])
def test_anything_else_needs_a_token(host: str) -> None:
    assert not is_loopback(host)
    with pytest.raises(ConfigError, match="TASKDECOMP_API_TOKEN"):
        check_bind(host, None)
    check_bind(host, "secret")


def test_toolsets_are_name_equals_path() -> None:
    assert parse_toolsets(("a=x.py", " b = pkg.mod ")) == {"a": "x.py", "b": "pkg.mod"}
    for bad in ("x.py", "=x.py", "a=", "a=x.py a=y.py"):
        with pytest.raises(ConfigError, match=r"NAME=PATH|twice"):
            parse_toolsets(tuple(bad.split(" ")))


def test_the_config_refuses_what_cannot_serve() -> None:
    with pytest.raises(ConfigError, match="--tools"):
        ServerConfig(store_url="x.db", toolsets={}, models=("m",))
    with pytest.raises(ConfigError, match="--model"):
        ServerConfig(store_url="x.db", toolsets={"a": "x.py"}, models=())
    with pytest.raises(ConfigError, match="unknown chat action 'x/y'"):
        ServerConfig(store_url="x.db", toolsets={"a": "x.py"}, models=("m",), chat_actions=("x/y",))
    with pytest.raises(ConfigError, match="empty"):
        ServerConfig(store_url="x.db", toolsets={"a": "x.py"}, models=("m",), token=" ")
    config = ServerConfig(store_url="x.db", toolsets={"a": "x.py"}, models=("m",), token="s3cr3t")
    assert "s3cr3t" not in repr(config)
    with pytest.raises(ConfigError, match="TASKDECOMP_API_TOKEN"):  # any page could approve
        ServerConfig(store_url="x.db", toolsets={"a": "x.py"}, models=("m",), cors_origins=("*",))
    assert ServerConfig(
        store_url="x.db", toolsets={"a": "x.py"}, models=("m",), cors_origins=("*",), token="t"
    ).cors_origins == ("*",)


def test_the_server_exports_are_sorted_and_complete() -> None:
    names = taskdecomp.server.__all__
    assert names == sorted(names)
    assert all(hasattr(taskdecomp.server, name) for name in names)


def test_a_model_that_names_a_file_is_known_by_its_absolute_path(tmp_path, monkeypatch) -> None:
    from taskdecomp.server.runs import canonical_model

    monkeypatch.chdir(tmp_path)
    assert canonical_model("scripted:s.json") == f"scripted:{tmp_path / 's.json'}"
    assert canonical_model("local:m.gguf") == f"local:{tmp_path / 'm.gguf'}"
    assert canonical_model("openai:gpt-4.1-mini") == "openai:gpt-4.1-mini"
    assert canonical_model("nosuch:thing") == "nosuch:thing"


def test_serve_refuses_a_base_url_no_model_of_it_uses(tmp_path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", "from taskdecomp_entry import main; main()", "serve",
         "--tools", f"t={tmp_path / 'missing.py'}", "--model", f"scripted:{tmp_path / 's.json'}",
         "--base-url", "http://127.0.0.1:9/v1", "--db", str(tmp_path / "runs.db")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "none of this server's models" in done.stderr
