"""The named OpenAI-compatible hosts, against an OpenAI-compatible server of our own."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from stub_servers.openai_server import FakeOpenAI, Reply, completion, error_body

from taskdecomp import Budget, ConfigError, run_sync
from taskdecomp.models import Connection, prices, resolve_model
from taskdecomp.models.hosts import HOSTS, HostedModel
from tests.clitools import cli
from tests.conftest import SALES_TOOLS
from tests.support import SEED_GOAL, seed_plan

PLAN = json.dumps(seed_plan())
ANSWER = "April 2026: net 26,825 USD."
KEY = "sk-host-secret-0123456789"
KEYED = [name for name, host in HOSTS.items() if host.key_env is not None]


@pytest.fixture(autouse=True)
def host_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for variable in ("OLLAMA_HOST", "AZURE_OPENAI_ENDPOINT"):
        monkeypatch.delenv(variable, raising=False)
    for host in HOSTS.values():
        if host.key_env is not None:
            monkeypatch.delenv(host.key_env, raising=False)
    prices.clear_prices()
    yield
    prices.clear_prices()


def ok(content: str, tokens: tuple[int, int] = (120, 40)) -> Reply:
    return Reply(body=completion(content, tokens=tokens))


def hosted(spec: str, url: str) -> HostedModel:
    model = resolve_model(spec, connection=Connection(base_url=url, timeout=5))
    assert isinstance(model, HostedModel)
    return model


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_each_host_runs_against_a_server_at_its_base_url_with_its_own_key(
    host: str, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_env = HOSTS[host].key_env
    if key_env is not None:
        monkeypatch.setenv(key_env, KEY)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-never-sent")
    fake_openai.queue(ok(PLAN), ok(ANSWER))

    model = hosted(f"{host}:some-model", fake_openai.url)
    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model)

    assert result.stop_reason == "success" and result.answer == ANSWER
    assert model.name == f"{host}:some-model"
    assert [request["model"] for request in fake_openai.requests] == ["some-model"] * 2
    sent = {headers.get("authorization") for headers in fake_openai.headers}
    assert sent == ({f"Bearer {KEY}"} if key_env else {"Bearer unused"})  # never OpenAI's


def test_the_default_urls_and_the_variables_that_move_them() -> None:
    spec = "together:m"
    with pytest.raises(ConfigError, match="'TOGETHER_API_KEY' holds no key"):
        resolve_model(spec)
    assert hosted("ollama:llama3.2", "").base_url == "http://127.0.0.1:11434/v1"


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("openrouter", "https://openrouter.ai/api/v1"),
        ("groq", "https://api.groq.com/openai/v1"),
        ("together", "https://api.together.xyz/v1"),
    ],
)
def test_a_host_calls_its_own_url_by_default(
    host: str, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(str(HOSTS[host].key_env), KEY)
    model = resolve_model(f"{host}:m")
    assert isinstance(model, HostedModel) and model.base_url == url
    assert KEY not in repr(model)


@pytest.mark.parametrize(
    ("ollama_host", "url"),
    [
        ("", "http://127.0.0.1:11434/v1"),
        ("0.0.0.0", "http://0.0.0.0:11434/v1"),
        ("gpu-box:9000", "http://gpu-box:9000/v1"),
        ("https://ollama.example.com", "https://ollama.example.com:11434/v1"),
    ],
)
def test_ollama_follows_ollama_host(
    ollama_host: str, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OLLAMA_HOST", ollama_host)
    model = resolve_model("ollama:llama3.2")
    assert isinstance(model, HostedModel) and model.base_url == url


def test_azure_takes_its_resource_endpoint_and_its_v1_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
    with pytest.raises(ConfigError, match="export AZURE_OPENAI_ENDPOINT="):
        resolve_model("azure:gpt-4.1-mini")
    for endpoint in ("https://res.openai.azure.com/", "https://res.openai.azure.com/openai/v1"):
        monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", endpoint)
        model = resolve_model("azure:gpt-4.1-mini")
        assert isinstance(model, HostedModel)
        assert model.base_url == "https://res.openai.azure.com/openai/v1"


@pytest.mark.parametrize("host", KEYED)
def test_a_missing_key_or_model_is_one_line_naming_what_to_set(host: str) -> None:
    with pytest.raises(ConfigError) as missing:
        resolve_model(f"{host}:m", connection=Connection(base_url="http://127.0.0.1:9/v1"))
    assert repr(HOSTS[host].key_env) in str(missing.value) and "\n" not in str(missing.value)
    with pytest.raises(ConfigError, match=f"'{host}:{HOSTS[host].example}'"):
        resolve_model(f"{host}:")


def test_the_key_never_reaches_a_message_and_errors_name_the_host(
    fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GROQ_API_KEY", KEY)
    fake_openai.fallback = Reply(status=401, body=error_body(f"Incorrect API key {KEY}"))

    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=hosted("groq:m", fake_openai.url))

    assert result.stop_reason == "llm_error:auth"
    message = result.message or ""
    assert KEY not in message and KEY not in json.dumps(result.to_dict())
    assert "groq:m" in message and "GROQ_API_KEY" in message and "OPENAI_API_KEY" not in message


def test_the_same_model_costs_the_same_through_two_base_urls(
    fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = FakeOpenAI()
    other.start()
    try:
        monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
        monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", other.url.removesuffix("/v1"))
        costs = []
        for server, model in [
            (fake_openai, hosted("azure:gpt-4.1-mini", fake_openai.url)),
            (other, resolve_model("azure:gpt-4.1-mini")),
        ]:
            server.queue(ok(PLAN, tokens=(1000, 100)), ok(ANSWER, tokens=(2000, 50)))
            costs.append(run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model).usage.cost_usd)
    finally:
        other.stop()
    expected = prices.cost_usd("azure", "gpt-4.1-mini", 3000, 150)
    assert expected is not None and expected > 0
    assert costs == [pytest.approx(expected)] * 2


def test_ollama_on_this_machine_is_free_and_elsewhere_unknown(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(ok(PLAN), ok(ANSWER))
    local = hosted("ollama:llama3.2", fake_openai.url)
    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=local, budget=Budget(max_cost_usd=0.01))
    assert (result.stop_reason, result.usage.cost_usd) == ("success", 0.0)

    remote = hosted("ollama:llama3.2", "http://ollama.example.com:11434/v1")
    assert remote.estimate_cost(1000) is None
    with pytest.raises(ConfigError, match=r"'ollama:llama3\.2' has none known"):
        run_sync(SEED_GOAL, tools=SALES_TOOLS, model=remote, budget=Budget(max_cost_usd=1))


def run_cli(
    capsys: pytest.CaptureFixture[str], fake: FakeOpenAI, model: str, *flags: str
) -> tuple[int, str, str]:
    return cli(
        capsys, "run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", model,
        "--base-url", fake.url, "--json", *flags,
    )  # fmt: skip


def test_the_cli_prices_a_run_with_price_flags(
    capsys: pytest.CaptureFixture[str], fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GROQ_API_KEY", KEY)
    fake_openai.queue(ok(PLAN, tokens=(1000, 100)), ok(ANSWER, tokens=(2000, 50)))

    code, out, err = run_cli(
        capsys, fake_openai, "groq:my-tune", "--price-in", "2", "--price-out", "10",
        "--max-cost-usd", "1",
    )  # fmt: skip

    assert code == 0, err
    result = json.loads(out)
    assert result["usage"]["cost_usd"] == pytest.approx((3000 * 2 + 150 * 10) / 1e6)
    assert KEY not in out + err


def test_the_cli_refuses_a_cost_budget_over_an_unknown_price_before_any_call(
    capsys: pytest.CaptureFixture[str], fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(ok(PLAN), ok(ANSWER))
    code, out, err = run_cli(capsys, fake_openai, "ollama:llama3.2", "--max-cost-usd", "1")
    assert code == 0, err  # ollama on this machine is free
    assert json.loads(out)["usage"]["cost_usd"] == 0

    far = "http://ollama.example.com:11434/v1"
    code, _, err = cli(
        capsys, "run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", "ollama:llama3.2",
        "--base-url", far, "--max-cost-usd", "1",
    )  # fmt: skip
    assert code == 2
    assert "'ollama:llama3.2' has none known" in err and "--price-in" in err
    assert err.count("\n") == 1


def test_the_cli_shows_an_unknown_cost_as_unknown_and_null(
    capsys: pytest.CaptureFixture[str], fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GROQ_API_KEY", KEY)
    fake_openai.queue(ok(PLAN), ok(ANSWER), ok(PLAN), ok(ANSWER))

    code, out, _ = run_cli(capsys, fake_openai, "groq:not-in-any-table")
    assert code == 0 and json.loads(out)["usage"]["cost_usd"] is None

    code, out, _ = cli(
        capsys, "run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", "groq:not-in-any-table",
        "--base-url", fake_openai.url,
    )  # fmt: skip
    assert code == 0 and "cost unknown" in out and "$0.0000" not in out


def test_a_prices_file_prices_the_run_and_bad_price_flags_are_usage_errors(
    capsys: pytest.CaptureFixture[str],
    fake_openai: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("TOGETHER_API_KEY", KEY)
    given = tmp_path / "prices.toml"
    given.write_text('"together:my-tune" = { input = 1, output = 4 }\n')
    fake_openai.queue(ok(PLAN, tokens=(1000, 100)), ok(ANSWER, tokens=(1000, 100)))

    code, out, err = run_cli(capsys, fake_openai, "together:my-tune", "--prices", str(given))

    assert code == 0, err
    assert json.loads(out)["usage"]["cost_usd"] == pytest.approx((2000 * 1 + 200 * 4) / 1e6)

    code, _, err = run_cli(capsys, fake_openai, "together:my-tune", "--price-in", "1")
    assert code == 2 and "--price-in and --price-out go together" in err
    given.write_text('"together" = [1, 2]\n')
    code, _, err = run_cli(capsys, fake_openai, "together:my-tune", "--prices", str(given))
    assert code == 2 and "name a 'provider:model'" in err
    assert len(fake_openai.requests) == 2  # the refused runs asked nothing


def test_a_host_retries_a_rate_limit_like_the_openai_provider(
    fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENROUTER_API_KEY", KEY)
    limited = Reply(status=429, body=error_body("slow down"), headers={"retry-after": "0"})
    fake_openai.queue(limited, ok(PLAN), ok(ANSWER))
    model = hosted("openrouter:openai/gpt-4.1-mini", fake_openai.url)

    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model)

    assert result.stop_reason == "success" and len(fake_openai.requests) == 3
    assert result.usage.cost_usd == pytest.approx(
        prices.cost_usd("openrouter", "openai/gpt-4.1-mini", 240, 80)
    )
