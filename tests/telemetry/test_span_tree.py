"""The span tree of a run of each strategy, caught by the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.trace import StatusCode

from taskdecomp import Budget, ReplanOptions, ScriptedModel, resume_sync, run_sync, tool
from taskdecomp.store import open_store
from taskdecomp.strategies.workflow.api import run_workflow
from taskdecomp.strategies.workflow.options import WorkflowOptions
from taskdecomp.telemetry import trace_content
from tests.strategies.tree_support import finish, kids, node, rolling, target, wants_split
from tests.support import plan_of, step
from tests.telemetry.conftest import Catching
from tests.telemetry.spantree import ancestors, drawn, named, one, parent_of, text_of
from tests.workflow.scenario import make_workspace, rules

GOAL = "Count the letters of three fruit names and say which is longest"
SECRET = "sk-test-0123456789abcdef"


def tools(log: list[str] | None = None) -> list[Any]:
    @tool(side_effects="read_only")
    def count(word: str) -> dict[str, int]:
        """Count the letters of a word."""
        if log is not None:
            log.append(word)
        return {"letters": len(word)}

    @tool(side_effects="unsafe")
    def explode(word: str) -> str:
        """Fail."""
        raise RuntimeError(f"cannot explode {word}")

    return [count, explode]


def counting_plan(*words: str) -> dict[str, Any]:
    return plan_of(*(step(n, "count", {"word": w}) for n, w in enumerate(words, start=1)))


def test_a_plan_execute_run_is_one_tree_of_model_and_tool_spans(spans: Catching) -> None:
    model = ScriptedModel(responses=[counting_plan("apple", "fig", "kiwi"), "apple is longest"])
    result = run_sync(GOAL, tools=tools(), model=model)
    assert result.status == "ok"

    caught = spans.get_finished_spans()
    assert drawn(caught) == "\n".join(
        [
            "invoke_agent plan_execute",
            "  chat scripted",
            "  execute_tool count",
            "  execute_tool count",
            "  execute_tool count",
            "  chat scripted",
        ]
    )
    top = one(caught, "invoke_agent")
    assert top.parent is None
    attributes = dict(top.attributes or {})
    assert attributes["taskdecomp.stop_reason"] == "success"
    assert attributes["taskdecomp.status"] == "ok"
    assert attributes["taskdecomp.run.id"] == result.run_id
    assert attributes["gen_ai.operation.name"] == "invoke_agent"
    assert top.name == f"invoke_agent {attributes['gen_ai.agent.name']}"  # as the conventions say
    assert attributes["taskdecomp.strategy"] == "plan_execute"
    assert top.status.status_code == StatusCode.UNSET

    plan_call, combine_call = named(caught, "chat")
    attributes = dict(plan_call.attributes or {})
    assert attributes.pop("gen_ai.usage.input_tokens") > 0
    assert attributes.pop("gen_ai.usage.output_tokens") > 0
    assert attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "scripted",
        "taskdecomp.phase": "plan",
        "gen_ai.response.finish_reasons": ("stop",),
    }
    assert combine_call.attributes["taskdecomp.phase"] == "finalize"

    first = named(caught, "execute_tool")[0]
    assert first.attributes["gen_ai.tool.name"] == "count"
    assert first.attributes["gen_ai.operation.name"] == "execute_tool"
    assert first.attributes["gen_ai.tool.call.id"] == f"{result.run_id}:step_1"
    assert first.attributes["taskdecomp.step.id"] == "step_1"
    assert first.attributes["taskdecomp.tool.side_effects"] == "read_only"
    # no content by default: neither the goal, nor prompts, arguments or observations
    everything = text_of(caught)
    assert "apple" not in everything and "Count the letters" not in everything
    assert all("gen_ai.tool.call.arguments" not in (s.attributes or {}) for s in caught)


def test_content_is_traced_with_the_flag_and_secrets_never_are(
    spans: Catching, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    trace_content(True)
    model = ScriptedModel(responses=[counting_plan(SECRET, "fig", "kiwi"), f"done, {SECRET}"])
    result = run_sync(f"{GOAL} (key {SECRET})", tools=tools(), model=model)
    assert result.status == "ok"

    caught = spans.get_finished_spans()
    tool_span = named(caught, "execute_tool")[1]
    assert json.loads(tool_span.attributes["gen_ai.tool.call.arguments"]) == {"word": "fig"}
    assert json.loads(tool_span.attributes["gen_ai.tool.call.result"]) == {"letters": 3}
    plan_call, answer_call = named(caught, "chat")
    sent = json.loads(plan_call.attributes["gen_ai.input.messages"])
    assert [m["role"] for m in sent] == ["system", "user"]
    assert [[part["type"] for part in m["parts"]] for m in sent] == [["text"], ["text"]]
    assert "max_plan_steps" in sent[1]["parts"][0]["content"]
    assert json.loads(answer_call.attributes["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "done, [redacted]"}],
            "finish_reason": "stop",
        }
    ]
    assert "Count the letters" in one(caught, "invoke_agent").attributes["taskdecomp.goal"]
    everything = text_of(caught)
    assert "[redacted]" in everything
    assert SECRET not in everything


def test_a_failed_tool_call_is_an_error_on_its_span_and_on_the_run(spans: Catching) -> None:
    plan = plan_of(
        step(1, "count", {"word": "fig"}),
        step(2, "explode", {"word": "fig"}),
        step(3, "count", {"word": "kiwi"}),
    )
    result = run_sync(GOAL, tools=tools(), model=ScriptedModel(responses=[plan, "never"]))
    assert result.stop_reason == "tool_error:explode"

    caught = spans.get_finished_spans()
    failed = one(caught, "execute_tool explode")
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.attributes["error.type"] == "tool_error:explode"
    assert "cannot explode" not in (failed.status.description or "")  # a message is content
    top = one(caught, "invoke_agent")
    assert top.status.status_code == StatusCode.ERROR
    assert top.attributes["error.type"] == "tool_error:explode"
    assert top.attributes["taskdecomp.status"] == "stopped"
    assert one(caught, "execute_tool count").status.status_code == StatusCode.UNSET


def test_a_model_timeout_is_an_error_on_the_model_call(spans: Catching) -> None:
    result = run_sync(GOAL, tools=tools(), model=ScriptedModel(responses=[{"error": "timeout"}]))
    assert result.stop_reason == "llm_timeout"
    call = one(spans.get_finished_spans(), "chat")
    assert call.status.status_code == StatusCode.ERROR
    assert call.attributes["error.type"] == "llm_timeout"


def test_a_replan_instruction_step_holds_its_agents_calls(spans: Catching) -> None:
    plan = {"kind": "plan", "steps": [{"id": "s1", "title": "Count", "instruction": "Count fig"}]}
    model = ScriptedModel(
        responses=[
            plan,
            {"kind": "call", "tool": "count", "args": {"word": "fig"}},
            {"kind": "finish", "result": "fig has 3"},
            {"kind": "respond", "response": "fig has 3 letters"},
        ]
    )
    result = run_sync(GOAL, tools=tools(), model=model, strategy="replan", replan=ReplanOptions())
    assert result.status == "ok", result.message

    caught = spans.get_finished_spans()
    assert drawn(caught) == "\n".join(
        [
            "invoke_agent replan",
            "  chat scripted",
            "  step s1",
            "    chat scripted",
            "    execute_tool count",
            "    chat scripted",
            "  chat scripted",
        ]
    )
    assert one(caught, "invoke_agent").attributes["taskdecomp.strategy"] == "replan"
    phases = [s.attributes["taskdecomp.phase"] for s in named(caught, "chat")]
    assert sorted(phases) == ["execute", "execute", "plan", "replan"]


def test_a_tree_run_nests_nodes_their_split_and_their_calls(spans: Catching) -> None:
    goal = "Plan a meetup"
    scripted = ScriptedModel(
        rules=[
            (node(goal), wants_split(), "execute"),
            (node("Venue"), finish("Kosmos"), "execute"),
            (node("Speakers"), finish("12"), "execute"),
            (target(goal), kids("Venue", "Speakers"), "decompose"),
            (rolling(goal), "Kosmos, 12 speakers", "rollup"),
        ]
    )
    result = run_sync(goal, tools=tools(), model=scripted, strategy="tree")
    assert result.status == "ok", result.message

    caught = spans.get_finished_spans()
    root = one(caught, "node 1")
    assert parent_of(caught, root) is one(caught, "invoke_agent tree")
    assert root.attributes["taskdecomp.node.status"] == "ok"
    split = one(caught, "decompose single_node")
    assert ancestors(caught, split) == ["node 1", "invoke_agent tree"]
    assert split.attributes["taskdecomp.node.id"] == 1
    assert split.attributes["taskdecomp.decompose.created"] == 2
    assert [s.attributes["taskdecomp.phase"] for s in caught if parent_of(caught, s) is split] == [
        "decompose"
    ]
    for child in ("node 2", "node 3"):
        leaf = one(caught, child)
        assert ancestors(caught, leaf) == ["node 1", "invoke_agent tree"]
        assert leaf.attributes["taskdecomp.node.leaf"] is True
        assert [s.name for s in caught if parent_of(caught, s) is leaf] == ["chat scripted"]
    rollup = [s for s in named(caught, "chat") if s.attributes["taskdecomp.phase"] == "rollup"]
    assert [parent_of(caught, s) for s in rollup] == [root]
    assert "Venue" not in text_of(caught)  # node names are content


def test_a_workflow_run_has_a_span_per_phase_run(spans: Catching, tmp_path: Path) -> None:
    ws, design = make_workspace(tmp_path)
    scripted = ScriptedModel(rules=[(rule["match"], rule["response"]) for rule in rules()])
    result = asyncio.run(
        run_workflow(
            "default",
            workspace=ws,
            input=design,
            model=scripted,
            options=WorkflowOptions(min_tasks=3),
        )
    )
    assert result.stop_reason == "success", result.message

    caught = spans.get_finished_spans()
    top = one(caught, "invoke_agent workflow")
    steps = named(caught, "step ")
    assert len(steps) == len(result.history) > 5
    assert all(parent_of(caught, s) is top for s in steps)
    for call in named(caught, "chat") + named(caught, "execute_tool"):
        assert parent_of(caught, call) in steps
    assert top.attributes["taskdecomp.stop_reason"] == "success"


def test_a_resumed_run_links_to_its_first_trace(spans: Catching, tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    log: list[str] = []

    def with_wait(seconds: float) -> list[Any]:
        @tool(side_effects="read_only")
        async def wait(word: str) -> str:
            """Wait a while."""
            await asyncio.sleep(seconds)
            return word

        return [*tools(log), wait]

    plan = plan_of(
        step(1, "count", {"word": "apple"}),
        step(2, "count", {"word": "fig"}),
        step(3, "wait", {"word": "kiwi"}),
    )
    first = run_sync(
        GOAL,
        tools=with_wait(60),
        model=ScriptedModel(rules=[("max_plan_steps", plan)], default="apple"),
        store=store,
        budget=Budget(max_seconds=1.5),
    )
    assert first.stop_reason == "max_seconds"
    started = one(spans.get_finished_spans(), "invoke_agent")
    spans.clear()

    model = ScriptedModel(rules=[(".*", "apple")])
    again = resume_sync(first.run_id, store=store, tools=with_wait(0), model=model)
    assert again.status == "ok", again.message
    assert log == ["apple", "fig"]  # nothing ran twice

    caught = spans.get_finished_spans()
    resumed = one(caught, "invoke_agent")
    assert resumed.context.trace_id != started.context.trace_id
    assert resumed.parent is None
    assert [link.context.trace_id for link in resumed.links] == [started.context.trace_id]
    assert [link.context.span_id for link in resumed.links] == [started.context.span_id]
    assert resumed.attributes["taskdecomp.segment"] == 2
    assert drawn(caught) == "\n".join(
        ["invoke_agent plan_execute", "  execute_tool wait", "  chat scripted"]
    )
    store.close()


def test_a_pause_for_approval_and_the_approval_are_spans(spans: Catching, tmp_path: Path) -> None:
    from taskdecomp import approve_sync

    @tool(side_effects="unsafe", needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        return f"paid {amount}"

    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    plan = plan_of(
        step(1, "pay", {"amount": 5}), step(2, "pay", {"amount": 6}), step(3, "pay", {"amount": 7})
    )
    paused = run_sync(GOAL, tools=[pay], model=ScriptedModel(responses=[plan, "paid"]), store=store)
    assert paused.status == "paused"
    caught = spans.get_finished_spans()
    pause = one(caught, "await_approval")
    assert parent_of(caught, pause) is one(caught, "invoke_agent")
    assert pause.attributes["taskdecomp.approval.kind"] == "tool"
    assert pause.attributes["gen_ai.tool.name"] == "pay"
    assert one(caught, "invoke_agent").status.status_code == StatusCode.UNSET
    spans.clear()

    approve_sync(paused.run_id, store=store, tools=[pay], model=ScriptedModel(responses=["paid"]))
    caught = spans.get_finished_spans()
    approval = one(caught, "approval")
    assert approval.attributes["taskdecomp.approval.approved"] is True
    assert parent_of(caught, approval) is one(caught, "invoke_agent")
    store.close()


def test_steps_started_while_the_plan_streams_are_children_of_the_run(spans: Catching) -> None:
    words = ("apple", "fig", "kiwi", "plum", "pear")
    plan = plan_of(*(step(n, "count", {"word": w}, depends_on=[]) for n, w in enumerate(words, 1)))
    model = ScriptedModel(rules=[("available_tools", plan)], default="apple", stream_ms=400)
    result = run_sync(GOAL, tools=tools(), model=model, stream_plan=True)
    assert result.status == "ok", result.message

    caught = spans.get_finished_spans()
    top, planner = one(caught, "invoke_agent"), named(caught, "chat")[0]
    calls = named(caught, "execute_tool")
    assert len(calls) == 5
    assert any(call.start_time < planner.end_time for call in calls)  # some started early
    assert [parent_of(caught, call) for call in calls] == [top] * 5, drawn(caught)


def echo_tools() -> list[Any]:
    @tool(side_effects="read_only")
    def echo(word: str) -> dict[str, str]:
        """Say a word back."""
        return {"said": word}

    return [echo]


def forms(secret: str) -> list[str]:
    """A secret as it is, and as JSON writes it inside a string (escaped, or ASCII-escaped)."""
    return [secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]]


@pytest.mark.parametrize("secret", ["pässwörd-0123456789", 'pass"word-0123', "pass\\word-0123"])
def test_a_secret_json_would_escape_is_redacted_in_traced_content(
    spans: Catching, monkeypatch: pytest.MonkeyPatch, secret: str
) -> None:
    monkeypatch.setenv("BILLING_API_KEY", secret)
    trace_content(True)
    words = (secret, "fig", "kiwi")
    plan = plan_of(*(step(n, "echo", {"word": w}) for n, w in enumerate(words, start=1)))
    model = ScriptedModel(responses=[plan, f"the key is {secret}"])
    result = run_sync(f"{GOAL} with {secret}", tools=echo_tools(), model=model)
    assert result.status == "ok", result.message

    caught = spans.get_finished_spans()
    first = named(caught, "execute_tool")[0]
    assert json.loads(first.attributes["gen_ai.tool.call.arguments"]) == {"word": "[redacted]"}
    assert json.loads(first.attributes["gen_ai.tool.call.result"]) == {"said": "[redacted]"}
    everything = text_of(caught)
    assert [form for form in forms(secret) if form in everything] == []


def test_without_content_a_secret_in_arguments_and_observations_is_in_no_span(
    spans: Catching, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    words = (SECRET, f"say {SECRET}", "kiwi")
    plan = plan_of(*(step(n, "echo", {"word": w}) for n, w in enumerate(words, start=1)))
    model = ScriptedModel(responses=[plan, f"the key is {SECRET}"])
    result = run_sync(f"{GOAL} with {SECRET}", tools=echo_tools(), model=model)
    assert result.status == "ok", result.message

    caught = spans.get_finished_spans()
    assert len(named(caught, "execute_tool echo")) == 3
    assert SECRET not in text_of(caught)
    assert SECRET not in "".join(str(s.to_json()) for s in caught)  # names and events too


def test_an_approval_inside_a_callers_span_is_its_child_and_links_to_the_first_trace(
    spans: Catching, tmp_path: Path
) -> None:
    from opentelemetry import trace

    from taskdecomp import approve_sync

    @tool(side_effects="unsafe", needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        return f"paid {amount}"

    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    plan = plan_of(*(step(n, "pay", {"amount": n}) for n in (1, 2, 3)))
    paused = run_sync(GOAL, tools=[pay], model=ScriptedModel(responses=[plan, "paid"]), store=store)
    assert paused.status == "paused"
    first = one(spans.get_finished_spans(), "invoke_agent")
    spans.clear()

    with trace.get_tracer("a caller").start_as_current_span("handle request") as mine:
        approve_sync(paused.run_id, store=store, tools=[pay], model=ScriptedModel(responses=["ok"]))
    caught = spans.get_finished_spans()
    segment = one(caught, "invoke_agent")
    assert parent_of(caught, segment) is one(caught, "handle request")
    assert segment.context.trace_id == mine.get_span_context().trace_id
    assert [link.context.span_id for link in segment.links] == [first.context.span_id]
    store.close()
