"""The tool gateway, on its own: the seed's checks in the seed's order."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from pydantic import BaseModel

from taskdecomp import Budget, StopRun, ToolGateway, Toolset, args_hash, tool
from taskdecomp.budget import Meter


def make(*functions: Any, allow: list[str] | None = None, max_tool_calls: int = 8) -> ToolGateway:
    toolset = Toolset.from_functions(functions)
    return ToolGateway(
        allow=toolset.keys() if allow is None else allow,
        toolset=toolset,
        meter=Meter(budget=Budget(max_tool_calls=max_tool_calls)),
    )


def echo(x: int) -> dict[str, int]:
    return {"x": x}


def reason(gateway: ToolGateway, name: str, args: dict[str, Any]) -> str:
    with pytest.raises(StopRun) as caught:
        asyncio.run(gateway.call(name, args))
    return caught.value.reason


def test_args_hash_is_the_seeds_stable_hash() -> None:
    assert args_hash({"b": 1, "a": [1, 2]}) == args_hash({"a": [1, 2], "b": 1})
    assert args_hash({}) == args_hash(None)  # type: ignore[arg-type]
    assert len(args_hash({"a": 1})) == 12
    assert args_hash({"a": 1}) != args_hash({"a": 2})


def test_deny_by_default() -> None:
    gateway = make(echo, allow=[])
    assert reason(gateway, "echo", {"x": 1}) == "tool_denied:echo"


def test_kill_switch_denies_a_tool_for_the_rest_of_the_run() -> None:
    gateway = make(echo)
    assert asyncio.run(gateway.call("echo", {"x": 1})) == {"x": 1}
    gateway.deny("echo")
    assert reason(gateway, "echo", {"x": 2}) == "tool_denied:echo"


def test_budget_is_counted_before_the_allowlist() -> None:
    gateway = make(echo, allow=[], max_tool_calls=1)
    assert reason(gateway, "echo", {"x": 1}) == "tool_denied:echo"
    assert reason(gateway, "echo", {"x": 1}) == "max_tool_calls"


def test_missing_tool_names_the_registered_ones() -> None:
    gateway = make(echo, allow=["echo", "ghost"])
    with pytest.raises(StopRun) as caught:
        asyncio.run(gateway.call("ghost", {}))
    assert caught.value.reason == "tool_missing:ghost"
    assert "registered: echo" in caught.value.message


def test_loop_detection_is_per_tool_and_args() -> None:
    def other(x: int) -> int:
        return x

    gateway = make(echo, other)
    asyncio.run(gateway.call("echo", {"x": 1}))
    asyncio.run(gateway.call("other", {"x": 1}))
    assert reason(gateway, "echo", {"x": 1}) == "loop_detected"


def test_arguments_are_validated_and_coerced_by_the_schema() -> None:
    seen: list[Any] = []

    def typed(n: int, tags: list[str] | None = None) -> int:
        seen.append((n, tags))
        return n

    gateway = make(typed)
    assert asyncio.run(gateway.call("typed", {"n": "3"})) == 3
    assert seen == [(3, None)]
    assert reason(gateway, "typed", {"n": "three"}) == "tool_bad_args:typed"
    assert reason(gateway, "typed", {}) == "tool_bad_args:typed"
    assert reason(gateway, "typed", {"n": 1, "bogus": 2}) == "tool_bad_args:typed"
    assert len(seen) == 1


def test_idempotency_key_is_passed_when_declared() -> None:
    keys: list[str | None] = []

    @tool(side_effects="idempotent")
    def charge(amount: int, idempotency_key: str | None = None) -> int:
        keys.append(idempotency_key)
        return amount

    gateway = make(charge)
    asyncio.run(gateway.call("charge", {"amount": 5}, idempotency_key="run1:step_1"))
    assert keys == ["run1:step_1"]


def test_the_planner_cannot_supply_the_idempotency_key() -> None:
    @tool(side_effects="idempotent")
    def charge(amount: int, idempotency_key: str | None = None) -> int:
        return amount

    gateway = make(charge)
    assert reason(gateway, "charge", {"amount": 5, "idempotency_key": "forged"}) == (
        "tool_bad_args:charge"
    )


def test_a_tool_raising_timeout_error_is_an_error_not_a_timeout() -> None:
    def flaky() -> None:
        raise TimeoutError("upstream timed out")

    gateway = make(flaky)
    with pytest.raises(StopRun) as caught:
        asyncio.run(gateway.call("flaky", {}))
    assert caught.value.reason == "tool_error:flaky"
    assert "upstream timed out" in caught.value.message


def test_sync_tools_run_in_a_worker_thread() -> None:
    import threading

    def where() -> str:
        return threading.current_thread().name

    gateway = make(where)
    assert asyncio.run(gateway.call("where", {})).startswith("taskdecomp-tool")
    gateway.close()


def test_non_json_observation_is_a_tool_error() -> None:
    def weird() -> object:
        return object()

    assert reason(make(weird), "weird", {}) == "tool_error:weird"


class Reading(BaseModel):
    value: float
    extra: list[Any] = []


@dataclasses.dataclass
class Series:
    readings: list[Reading]


@pytest.mark.parametrize(
    ("result", "where"),
    [
        (float("nan"), "value is nan"),
        (float("inf"), "value is inf"),
        ({"rows": [1, {"total": float("-inf")}]}, "value at '/rows/1/total' is -inf"),
        (Reading(value=float("inf")), "value at '/value' is inf"),
        (Reading(value=1, extra=[float("nan")]), "value at '/extra/0' is nan"),  # json: null
        (Series(readings=[Reading(value=float("-inf"))]), "value at '/readings/0/value'"),
    ],
)
def test_a_non_finite_number_in_a_result_is_a_tool_error(result: Any, where: str) -> None:
    def measure() -> Any:
        return result

    with pytest.raises(StopRun) as caught:
        asyncio.run(make(measure).call("measure", {}))
    assert caught.value.reason == "tool_error:measure"
    assert f"not strict JSON: {where}" in caught.value.message
    assert "JSON has no NaN or infinity" in caught.value.message


def test_only_the_non_finite_reading_is_refused() -> None:
    def read(n: int) -> Any:
        values = [1.5, 10**40, float("nan")][: n + 1]
        return {"r": Series(readings=[Reading(value=1.5, extra=values)])}

    gateway = make(read)
    observation = asyncio.run(gateway.call("read", {"n": 1}))
    assert observation == {"r": {"readings": [{"value": 1.5, "extra": [1.5, 10**40]}]}}
    assert reason(gateway, "read", {"n": 2}) == "tool_error:read"  # pydantic alone gives null
