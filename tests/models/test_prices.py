"""Prices: the maintained table, prices set in Python and by file, and unknown kept unknown."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from taskdecomp import Budget, ConfigError, ModelRequest, ModelResponse, run_sync
from taskdecomp.budget import Meter
from taskdecomp.models import prices
from taskdecomp.stops import StopRun
from tests.conftest import SALES_TOOLS
from tests.support import SEED_GOAL, seed_plan

PLAN = json.dumps(seed_plan())
ANSWER = "April 2026: net 26,825 USD."


@pytest.fixture(autouse=True)
def no_prices_set() -> Iterator[None]:
    prices.clear_prices()
    yield
    prices.clear_prices()


class Answers:
    """A model of our own that answers in turn and may say what its calls cost."""

    def __init__(self, *costs: float | None, estimate: float | None = 0.0) -> None:
        self.costs = list(costs)
        self.estimate = estimate
        self.replies = [PLAN, ANSWER]

    @property
    def name(self) -> str:
        return "answers:test"

    def estimate_cost(self, tokens_in: int) -> float | None:
        return self.estimate

    async def complete(self, request: ModelRequest) -> ModelResponse:
        text = self.replies.pop(0)
        return ModelResponse(text=text, tokens_in=10, tokens_out=5, cost_usd=self.costs.pop(0))


def test_the_table_prices_models_of_every_provider_it_knows() -> None:
    assert prices.table_installed()
    assert prices.cost_usd("openai", "gpt-4.1-mini", 1_000_000, 0) == pytest.approx(0.40)
    assert prices.cost_usd("openai", "gpt-4.1-mini", 0, 1_000_000) == pytest.approx(1.60)
    dated = prices.cost_usd("openai", "gpt-4.1-mini-2025-04-14", 1_000_000, 0)
    assert dated == pytest.approx(0.40)  # a dated snapshot is priced as its model
    for provider, model in [
        ("anthropic", "claude-3-5-haiku-latest"),
        ("google", "gemini-2.5-flash"),
        ("azure", "gpt-4.1-mini"),
        ("openrouter", "openai/gpt-4.1-mini"),
        ("groq", "llama-3.3-70b-versatile"),
        ("together", "meta-llama/Llama-3.3-70B-Instruct-Turbo"),
    ]:
        cost = prices.cost_usd(provider, model, 1000, 1000)
        assert cost is not None and cost > 0, (provider, model)


@pytest.mark.parametrize(
    ("provider", "model"),
    [("openai", "smollm2"), ("acme", "gpt-4.1-mini"), ("ollama", "llama3.2")],
)
def test_a_price_not_in_the_table_is_unknown_not_zero(provider: str, model: str) -> None:
    assert prices.cost_usd(provider, model, 1000, 1000) is None
    assert prices.price_usd(provider, model, 1000, 1000) == 0.0  # the old form says 0


def test_a_price_set_wins_over_the_table_most_specific_first() -> None:
    prices.set_price("*", "*", 1.0, 1.0)
    prices.set_price("groq", "*", 2.0, 2.0)
    prices.set_price("openai", "gpt-4.1-mini", 3.0, 30.0)

    assert prices.cost_usd("openai", "gpt-4.1-mini", 1_000_000, 1_000_000) == 33.0
    assert prices.cost_usd("openai", "GPT-4.1-mini-2025-04-14", 1_000_000, 0) == 3.0
    assert prices.cost_usd("groq", "anything", 1_000_000, 0) == 2.0
    assert prices.cost_usd("acme", "unknown", 0, 1_000_000) == 1.0

    prices.clear_prices()
    assert prices.cost_usd("openai", "gpt-4.1-mini", 1_000_000, 0) == pytest.approx(0.40)
    assert prices.cost_usd("acme", "unknown", 0, 1_000_000) is None


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), True])
def test_a_bad_price_is_refused(bad: float) -> None:
    with pytest.raises(ConfigError, match="input_per_mtok"):
        prices.set_price("openai", "gpt-4.1-mini", bad, 1.0)
    with pytest.raises(ConfigError, match="'provider:model'"):
        prices.set_price("", "gpt-4.1-mini", 1.0, 1.0)


def test_a_prices_file_in_json_or_toml_sets_its_prices(tmp_path: Path) -> None:
    given = tmp_path / "prices.json"
    given.write_text(json.dumps({"openai:my-tune": {"input": 5, "output": 7}, "groq:*": [1, 2]}))
    assert prices.load_prices(given) == 2
    assert prices.cost_usd("openai", "my-tune", 1_000_000, 1_000_000) == 12.0
    assert prices.cost_usd("groq", "whatever", 1_000_000, 1_000_000) == 3.0

    toml = tmp_path / "prices.toml"
    toml.write_text('"ollama:llama3.2" = { input = 0, output = 0.5 }\n')
    assert prices.load_prices(toml) == 1
    assert prices.cost_usd("ollama", "llama3.2", 1_000_000, 1_000_000) == 0.5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "cannot read the prices file"),
        ("[1, 2]", "must map 'provider:model'"),
        ('{"gpt-4.1-mini": [1, 2]}', "name a 'provider:model'"),
        ('{"openai:x": {"in": 1}}', '{"input": USD, "output": USD}'),
        ('{"openai:x": [1, -2]}', "output_per_mtok must be finite USD >= 0"),
    ],
)
def test_a_malformed_prices_file_is_one_clear_error(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "prices.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match="prices") as raised:
        prices.load_prices(path)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_without_the_package_a_few_openai_prices_remain_and_the_rest_is_unknown() -> None:
    code = (
        "import sys; sys.modules['genai_prices'] = None\n"
        "from taskdecomp.models import prices\n"
        "print(prices.table_installed(), prices.cost_usd('openai', 'gpt-4.1-mini', 10**6, 0),"
        " prices.cost_usd('groq', 'llama-3.3-70b-versatile', 10**6, 0))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["False", "0.4", "None"], done.stderr


def test_a_call_of_unknown_cost_makes_the_usage_unknown() -> None:
    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=Answers(0.01, None))  # type: ignore[arg-type]

    assert result.stop_reason == "success"
    assert result.usage.cost_usd is None
    assert result.to_dict()["usage"]["cost_usd"] is None


def test_calls_of_known_cost_add_up() -> None:
    result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=Answers(0.01, 0.02))  # type: ignore[arg-type]

    assert result.usage.cost_usd == pytest.approx(0.03)


def test_a_cost_budget_over_a_model_of_unknown_price_is_refused_before_the_run() -> None:
    model = Answers(0.0, 0.0, estimate=None)

    with pytest.raises(ConfigError, match=r"'answers:test' has none known.*--price-in"):
        run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model, budget=Budget(max_cost_usd=1))  # type: ignore[arg-type]

    assert model.replies == [PLAN, ANSWER]  # never asked


def test_the_meter_never_counts_an_unknown_cost_as_zero() -> None:
    meter = Meter(budget=Budget(max_cost_usd=1.0))
    meter.before_model_call("plan", estimated_tokens=10, estimated_cost_usd=0.1)
    with pytest.raises(StopRun) as after:
        meter.after_model_call("plan", tokens_in=10, tokens_out=5, cost_usd=None)
    assert after.value.reason == "max_cost" and "cost is unknown" in after.value.message
    assert meter.snapshot(seconds=0).cost_usd is None

    fresh = Meter(budget=Budget(max_cost_usd=1.0))
    with pytest.raises(StopRun) as before:
        fresh.before_model_call("plan", estimated_tokens=10, estimated_cost_usd=None)
    assert before.value.reason == "max_cost" and "cost is unknown" in before.value.message
    assert fresh.llm_calls == 0

    free = Meter(budget=Budget())  # no cost budget: unknown is recorded, nothing stops
    free.after_model_call("plan", tokens_in=1, tokens_out=1, cost_usd=None)
    free.after_model_call("plan", tokens_in=1, tokens_out=1, cost_usd=0.5)
    assert free.snapshot(seconds=0).cost_usd is None
