"""Tool retries: ``@tool(retries=N, backoff_s=...)`` and ``raise Retry(...)``, end to end."""

from __future__ import annotations

import asyncio
import dataclasses
import http.server
import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, ClassVar

import pytest

from taskdecomp import (
    Budget,
    Event,
    Retry,
    RunResult,
    ScriptedModel,
    StepFinished,
    StopRun,
    ToolsetError,
    ToolSpec,
    resume_sync,
    run,
    run_sync,
    tool,
)
from taskdecomp.gateway import MAX_BACKOFF_S, retry_delay
from taskdecomp.stops import with_detail
from taskdecomp.store import open_store
from taskdecomp.tools import Toolset
from tests.clitools import cli
from tests.support import plan_of, step

GOAL = "Look up the weather in three places."


class Flaky:
    """A weather service that fails transiently ``failures`` times, then answers."""

    def __init__(self, failures: int, *, after: float | None = None) -> None:
        self.failures = failures
        self.after = after
        self.keys: list[str | None] = []

    def lookup(self, city: str, idempotency_key: str | None = None) -> dict[str, Any]:
        self.keys.append(idempotency_key)
        if len(self.keys) <= self.failures:
            raise Retry(f"service busy (call {len(self.keys)})", after=self.after)
        return {"city": city, "sky": "clear"}


def other(city: str) -> dict[str, str]:
    """A tool that always answers."""
    return {"city": city, "sky": "rain"}


def three_steps(first: str = "weather") -> dict[str, Any]:
    return plan_of(
        step(1, first, {"city": "Oslo"}),
        step(2, "other", {"city": "Bergen"}),
        step(3, "other", {"city": "Tromso"}),
    )


def go(
    *tools: Any,
    plan: dict[str, Any] | None = None,
    events: list[Event] | None = None,
    **budget: Any,
) -> RunResult:
    model = ScriptedModel(responses=[plan or three_steps(), "It is clear in Oslo."])
    return run_sync(
        GOAL,
        tools=[*tools, other],
        model=model,
        budget=Budget(**budget),
        on_event=(events.append if events is not None else None),
    )


def weather(flaky: Flaky, **options: Any) -> Any:
    """``flaky``'s lookup as the tool ``weather`` with these ``@tool`` options."""

    def weather(city: str, idempotency_key: str | None = None) -> dict[str, Any]:
        return flaky.lookup(city, idempotency_key)

    return tool(**options)(weather)


def test_a_flaky_read_only_tool_succeeds_with_every_attempt_in_the_trace() -> None:
    flaky = Flaky(failures=2)
    events: list[Event] = []
    result = go(weather(flaky, retries=2, backoff_s=0.001), events=events)
    assert result.stop_reason == "success"
    first = [entry for entry in result.trace if entry.step_id == "step_1"]
    assert [(e.attempt, e.ok) for e in first] == [(1, False), (2, False), (3, True)]
    assert first[0].stop_reason == "tool_error:weather"
    assert first[0].error is not None and "service busy (call 1)" in first[0].error
    assert "retry in" in first[0].error
    assert result.usage.tool_calls == 5  # three attempts at step 1, one each at 2 and 3
    assert [h.observation["sky"] for h in result.history] == ["clear", "rain", "rain"]
    finished = [e.entry for e in events if isinstance(e, StepFinished)]
    assert [(e.step_no, e.ok) for e in finished] == [(1, True), (2, True), (3, True)]


def test_the_trace_json_keeps_the_seed_shape_for_a_call_made_once() -> None:
    result = go(weather(Flaky(failures=1), retries=1, backoff_s=0.001))
    entries = result.to_dict()["trace"]
    assert "attempt" not in entries[0] and entries[1]["attempt"] == 2
    assert all("attempt" not in entry for entry in entries[2:])


def test_when_retries_run_out_the_stop_is_the_last_attempts_error() -> None:
    flaky = Flaky(failures=10)
    result = go(weather(flaky, retries=2, backoff_s=0.001))
    assert result.stop_reason == "tool_error:weather"
    assert result.message == "Retry: service busy (call 3)"
    assert len(flaky.keys) == 3
    assert [e.attempt for e in result.trace] == [1, 2, 3]
    assert result.trace[-1].error == "Retry: service busy (call 3)"


def test_retry_without_retries_and_other_exceptions_stop_at_once() -> None:
    flaky = Flaky(failures=1)
    assert go(weather(flaky)).stop_reason == "tool_error:weather"
    assert len(flaky.keys) == 1

    calls: list[str] = []

    @tool(retries=3, backoff_s=0.001)
    def broken(city: str) -> str:
        calls.append(city)
        raise ValueError("no such city")

    result = go(broken, plan=three_steps("broken"))
    assert result.stop_reason == "tool_error:broken"
    assert result.message == "ValueError: no such city"
    assert calls == ["Oslo"]


def test_a_timeout_is_retried() -> None:
    calls: list[str] = []

    @tool(timeout=0.05, retries=1, backoff_s=0.001)
    async def slow(city: str) -> str:
        calls.append(city)
        if len(calls) == 1:
            await asyncio.sleep(30)  # far past the timeout: only the retry can answer
        return f"{city}: fog"

    result = go(slow, plan=three_steps("slow"))
    assert result.stop_reason == "success"
    assert [(e.attempt, e.stop_reason) for e in result.trace[:2]] == [
        (1, "tool_timeout:slow"),
        (2, None),
    ]
    assert result.history[0].observation == "Oslo: fog"


def test_a_timeout_that_lasts_ends_with_tool_timeout() -> None:
    @tool(timeout=0.02, retries=1, backoff_s=0.001)
    async def stuck(city: str) -> str:
        await asyncio.sleep(30)
        return city

    result = go(stuck, plan=three_steps("stuck"))
    assert result.stop_reason == "tool_timeout:stuck"
    assert [e.attempt for e in result.trace] == [1, 2]


def test_an_unsafe_tool_with_retries_is_refused_at_decoration() -> None:
    def charge(amount: int) -> str:
        return "charged"

    with pytest.raises(ValueError, match=r"tool 'charge' is unsafe .* retries=2"):
        tool(side_effects="unsafe", retries=2)(charge)
    tool(side_effects="unsafe", retries=0)(charge)  # no retries: fine
    spec = ToolSpec.from_function(charge)
    with pytest.raises(ToolsetError, match="tool 'charge' is unsafe"):
        dataclasses.replace(spec, side_effects="unsafe", retries=1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"retries": -1}, "retries must be a whole number >= 0, got -1"),
        ({"retries": 1.5}, "retries must be a whole number >= 0, got 1.5"),
        ({"retries": True}, "retries must be a whole number >= 0, got True"),
        ({"backoff_s": -0.1}, "backoff_s must be seconds >= 0, got -0.1"),
        ({"backoff_s": float("nan")}, "backoff_s must be seconds >= 0, got nan"),
    ],
)
def test_retry_options_are_checked(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tool(**options)


def test_retry_after_must_be_seconds() -> None:
    with pytest.raises(ValueError, match="Retry"):
        Retry("busy", after=-1)
    assert Retry("busy", after=2).after == 2


def test_max_tool_calls_reached_mid_retries_stops_with_the_budget() -> None:
    flaky = Flaky(failures=10)
    result = go(weather(flaky, retries=5, backoff_s=0.001), max_tool_calls=2)
    assert result.stop_reason == "max_tool_calls"
    assert len(flaky.keys) == 2  # the third attempt would cross the budget: never made
    assert result.message is not None
    assert "attempt 2 at tool 'weather' failed" in result.message
    assert "service busy (call 2)" in result.message and "max_tool_calls=2" in result.message
    assert [(e.attempt, e.stop_reason) for e in result.trace] == [
        (1, "tool_error:weather"),
        (2, "max_tool_calls"),
    ]


def test_the_deadline_cancels_a_backoff() -> None:
    flaky = Flaky(failures=1, after=600.0)  # the service asks for ten minutes
    result = go(weather(flaky, retries=1), max_seconds=0.5)
    assert result.stop_reason == "max_seconds"
    assert len(flaky.keys) == 1
    assert [(e.attempt, e.ok) for e in result.trace] == [(1, False), (2, False)]
    assert result.trace[0].error is not None and "retry in 600s" in result.trace[0].error
    assert result.trace[1].error == "cancelled before it finished"


def test_an_idempotent_tool_keeps_its_key_across_attempts() -> None:
    flaky = Flaky(failures=2)
    result = go(weather(flaky, retries=2, backoff_s=0.001, side_effects="idempotent"))
    assert result.stop_reason == "success"
    assert len(flaky.keys) == 3 and len(set(flaky.keys)) == 1
    assert flaky.keys[0] == f"{result.run_id}:step_1"


def test_retry_delay_backs_off_exponentially_with_jitter_and_honours_after() -> None:
    spec = ToolSpec.from_function(tool(retries=9, backoff_s=1.0)(other))

    def failed(cause: BaseException, family: str = "tool_error") -> StopRun:
        try:
            raise StopRun(with_detail(family, "other")) from cause
        except StopRun as stop:
            return stop

    transient = failed(Retry("busy"))
    for attempt, base in ((1, 1.0), (2, 2.0), (3, 4.0), (9, MAX_BACKOFF_S)):
        for _ in range(20):
            delay = retry_delay(spec, transient, attempt)
            assert delay is not None and base / 2 <= delay <= base
    assert retry_delay(spec, failed(Retry("busy", after=7.5)), 1) == 7.5
    assert retry_delay(spec, failed(TimeoutError(), "tool_timeout"), 1) is not None
    assert retry_delay(spec, transient, 10) is None  # nine retries spent
    assert retry_delay(spec, failed(ValueError("bad")), 1) is None
    assert retry_delay(spec, failed(Retry("busy"), "tool_bad_args"), 1) is None


def test_a_tool_in_a_worker_process_can_ask_for_a_retry(tmp_path: Path) -> None:
    counter = tmp_path / "count"
    source = tmp_path / "proc_tools.py"
    source.write_text(
        "from pathlib import Path\n"
        "from taskdecomp import Retry, tool\n"
        f"COUNT = Path({str(counter)!r})\n\n"
        "@tool(isolation='process', retries=1, backoff_s=0.001)\n"
        "def weather(city: str) -> str:\n"
        "    n = int(COUNT.read_text()) + 1 if COUNT.exists() else 1\n"
        "    COUNT.write_text(str(n))\n"
        "    if n == 1:\n"
        "        raise Retry('cold start', after=0.001)\n"
        "    return city + ': sun'\n\n"
        "def other(city: str) -> str:\n"
        "    return city\n"
    )
    model = ScriptedModel(responses=[three_steps(), "sunny"])
    result = run_sync(GOAL, tools=str(source), model=model)
    assert result.stop_reason == "success"
    assert result.trace[0].error == "Retry: cold start; retry in 0.001s"
    assert result.history[0].observation == "Oslo: sun"


TOOLSET = '''\
from taskdecomp import Retry, tool

CALLS = []


@tool(retries=2, backoff_s=0.001)
def weather(city: str) -> dict:
    """Today's weather."""
    CALLS.append(city)
    if len(CALLS) < 3:
        raise Retry("service busy")
    return {"city": city, "sky": "clear"}


def other(city: str) -> dict:
    """Always answers."""
    return {"city": city, "sky": "rain"}
'''


def test_the_cli_runs_a_toolset_with_retries(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    tools = tmp_path / "weather_tools.py"
    tools.write_text(TOOLSET)
    script = tmp_path / "script.json"
    script.write_text(json.dumps([three_steps(), "Clear in Oslo."]))
    code, out, _ = cli(
        capsys, "run", GOAL, "--tools", str(tools), "--model", f"scripted:{script}", "--json"
    )
    assert code == 0
    data = json.loads(out)
    assert data["stop_reason"] == "success"
    assert [entry.get("attempt", 1) for entry in data["trace"]] == [1, 2, 3, 1, 1]
    assert data["usage"]["tool_calls"] == 5
    code, out, _ = cli(capsys, "show", data["run_id"])
    assert code == 0
    assert out.count("tool_error:weather") == 2  # the two retried attempts are trace rows


def test_the_cli_refuses_an_unsafe_tool_with_retries_with_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    tools = tmp_path / "pay_tools.py"
    tools.write_text(
        "from taskdecomp import tool\n\n"
        "@tool(side_effects='unsafe', retries=1)\n"
        "def pay(amount: int) -> str:\n"
        "    return 'paid'\n"
    )
    script = tmp_path / "script.json"
    script.write_text("[]")
    code, out, err = cli(
        capsys, "run", GOAL, "--tools", str(tools), "--model", f"scripted:{script}"
    )
    assert code == 2
    assert out == ""
    assert "tool 'pay' is unsafe" in err and len(err.strip().splitlines()) == 1


def test_a_stored_run_keeps_every_attempt_and_resume_does_not_redo_finished_steps(
    tmp_path: Path,
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        flaky = Flaky(failures=1, after=600.0)
        calls: list[str] = []

        def first(city: str) -> str:
            calls.append(city)
            return city

        tools = [first, weather(flaky, retries=1, side_effects="idempotent"), other]
        plan = plan_of(
            step(1, "first", {"city": "Oslo"}),
            step(2, "weather", {"city": "Bergen"}),
            step(3, "other", {"city": "Tromso"}),
        )
        model = ScriptedModel(responses=[plan, "done"])
        stopped = asyncio.run(
            run(GOAL, tools=tools, model=model, store=store, budget=Budget(max_seconds=0.5))
        )
        assert stopped.stop_reason == "max_seconds"
        stored = store.load_run(stopped.run_id)
        assert [(e.step_id, e.attempt, e.ok) for e in stored.trace] == [
            ("step_1", 1, True),
            ("step_2", 1, False),
            ("step_2", 2, False),
        ]
        assert stored.trace[1].stop_reason == "tool_error:weather"

        flaky.after = None  # the service is back
        again = resume_sync(
            stopped.run_id, store=store, tools=tools, model=ScriptedModel(responses=[plan, "done"])
        )
        assert again.stop_reason == "success"
        assert calls == ["Oslo"]  # the finished step is not run again
        assert len(set(flaky.keys)) == 1  # the same idempotency key in both segments
        final = store.load_run(stopped.run_id)
        assert [(e.step_id, e.attempt, e.ok) for e in final.trace][-2:] == [
            ("step_2", 1, True),
            ("step_3", 1, True),
        ]
    finally:
        store.close()


def test_a_toolset_built_from_specs_keeps_their_retries() -> None:
    spec = ToolSpec.from_function(tool(retries=3, backoff_s=0.25)(other))
    toolset = Toolset.from_functions([spec])
    assert (toolset["other"].retries, toolset["other"].backoff_s) == (3, 0.25)


class _Busy(http.server.BaseHTTPRequestHandler):
    """Answers 503 with ``Retry-After: 0`` to the first request, then a JSON document."""

    served: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.served.append(self.path)
        first = len(self.served) == 1
        body = b"busy" if first else json.dumps({"rate": 1.08}).encode()
        self.send_response(503 if first else 200)
        if first:
            self.send_header("Retry-After", "0")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@tool(retries=3, backoff_s=0.5, timeout=10)
def fetch_json(url: str) -> dict[str, Any]:
    """The docs' example: a 429/502/503 is a Retry, honouring ``Retry-After``."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)  # type: ignore[no-any-return]
    except urllib.error.HTTPError as exc:
        exc.close()  # the error holds the connection open
        if exc.code in (429, 502, 503):
            after = exc.headers.get("Retry-After", "")
            wait = float(after) if after.isdigit() else None
            raise Retry(f"{url} answered {exc.code}", after=wait) from exc
        raise


def test_the_documented_http_tool_honours_retry_after() -> None:
    _Busy.served.clear()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Busy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/rates/EUR"
        plan = plan_of(
            step(1, "fetch_json", {"url": url}),
            step(2, "other", {"city": "Bergen"}),
            step(3, "other", {"city": "Tromso"}),
        )
        result = go(fetch_json, plan=plan)
    finally:
        server.shutdown()
        server.server_close()
    assert result.stop_reason == "success"
    assert _Busy.served == ["/rates/EUR", "/rates/EUR"]
    assert result.trace[0].error == f"Retry: {url} answered 503; retry in 0s"
    assert result.history[0].observation == {"rate": 1.08}
