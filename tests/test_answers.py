"""Typed answers (``output_type=``) and streamed answers (``AnswerDelta``) through the engine."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from taskdecomp import (
    AnswerDelta,
    Budget,
    ReplanOptions,
    ScriptedModel,
    resume_sync,
    run,
    run_sync,
    tool,
)
from taskdecomp.answertype import answer_type
from taskdecomp.errors import ConfigError
from taskdecomp.events import Event
from taskdecomp.run import RunResult
from taskdecomp.store import SqlStore, open_store
from tests.support import plan_of, step


class Report(BaseModel):
    """The typed answer the tests ask for."""

    total: int
    note: str


REPORT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"total": {"type": "integer"}, "note": {"type": "string"}},
    "required": ["total", "note"],
    "additionalProperties": False,
}


@tool(side_effects="read_only")
def count(n: int) -> dict[str, int]:
    """Count to n."""
    return {"n": n}


PLAN = plan_of(*(step(n, "count", {"n": n}) for n in (1, 2, 3)))


def scripted(*answers: Any, stream_ms: float = 0) -> ScriptedModel:
    """The plan first, then ``answers`` to the combine calls, in order."""
    return ScriptedModel(responses=[PLAN, *answers], stream_ms=stream_ms)


@pytest.mark.parametrize("output_type", [Report, REPORT_SCHEMA], ids=["pydantic", "json_schema"])
def test_a_typed_answer_is_the_runs_output(output_type: Any) -> None:
    model = scripted({"total": 6, "note": "three counts"})
    result = run_sync("count", tools=[count], model=model, output_type=output_type)
    assert result.stop_reason == "success"
    if output_type is Report:
        assert result.output == Report(total=6, note="three counts")
    else:
        assert result.output == {"total": 6, "note": "three counts"}
    assert json.loads(result.answer or "") == {"total": 6, "note": "three counts"}
    assert result.to_dict()["output"] == {"total": 6, "note": "three counts"}
    finalize = model.calls[-1]
    assert finalize.phase == "finalize" and finalize.schema_name == "answer"
    assert finalize.json_schema == answer_type(output_type).schema


def test_the_typed_answer_may_follow_prose_in_a_code_fence() -> None:
    fenced = 'Here it is:\n```json\n{"total": 6, "note": "ok"}\n```\nDone.'
    result = run_sync("count", tools=[count], model=scripted(fenced), output_type=Report)
    assert result.stop_reason == "success"
    assert result.output == Report(total=6, note="ok")
    assert result.answer == '{"total": 6, "note": "ok"}'


@pytest.mark.parametrize(
    ("answer", "rule", "where"),
    [
        ({"total": "many", "note": "x"}, "invalid_answer:schema", "total"),
        ({"note": "x"}, "invalid_answer:schema", "total"),
        ("six, with a note", "invalid_answer:non_json", "not strict JSON"),
    ],
)
def test_an_answer_that_breaks_the_type_stops_with_the_rule(
    answer: Any, rule: str, where: str
) -> None:
    # Every repair gets the same wrong answer: whatever the repairs budget, the run ends
    # with the rule the last answer broke.
    wrong = [answer] * 5
    result = run_sync("count", tools=[count], model=scripted(*wrong), output_type=Report)
    assert result.stop_reason == rule
    assert result.llm_phase == "finalize"
    assert where in (result.message or "")
    assert result.output is None and result.answer is None


def test_a_json_schema_answer_is_checked_by_every_keyword() -> None:
    schema = {**REPORT_SCHEMA, "properties": {**REPORT_SCHEMA["properties"]}}
    schema["properties"]["total"] = {"type": "integer", "minimum": 10}
    wrong = [{"total": 6, "note": "x"}] * 5
    result = run_sync("count", tools=[count], model=scripted(*wrong), output_type=schema)
    assert result.stop_reason == "invalid_answer:schema"
    assert "6 is less than the minimum of 10" in (result.message or "")


def test_an_answer_repaired_after_one_wrong_try_is_typed() -> None:
    """With repairs (the default, 1), the second answer is checked; without, the first stops."""
    model = scripted({"total": "many", "note": "x"}, {"total": 6, "note": "fixed"})
    result = run_sync("count", tools=[count], model=model, output_type=Report)
    finalize_calls = [c for c in model.calls if c.phase == "finalize"]
    if len(finalize_calls) == 1:  # no repair was made: the first answer's rule stops the run
        assert result.stop_reason == "invalid_answer:schema"
    else:
        assert result.stop_reason == "success"
        assert result.output == Report(total=6, note="fixed")


@pytest.mark.parametrize("output_type", [42, "Report", {"type": "no-such-type"}])
def test_a_type_an_answer_cannot_have_is_refused_before_the_run(output_type: Any) -> None:
    model = scripted()
    with pytest.raises(ConfigError, match=r"answer|output_type"):
        run_sync("count", tools=[count], model=model, output_type=output_type)
    assert model.calls == []


def test_replan_restates_its_answer_under_the_type() -> None:
    model = ScriptedModel(
        rules=[
            ("remaining_steps", {"kind": "respond", "response": "six in all"}),
            ("draft_answer", {"total": 6, "note": "six in all"}),
            ("max_plan_steps", PLAN),
        ]
    )
    result = run_sync(
        "count",
        tools=[count],
        model=model,
        strategy="replan",
        options=ReplanOptions(),
        output_type=Report,
    )
    assert result.stop_reason == "success"
    assert result.output == Report(total=6, note="six in all")
    last = model.calls[-1]
    assert last.phase == "finalize" and '"draft_answer": "six in all"' in last.text()


def cut_in_its_combine_call(store: SqlStore) -> RunResult:
    """A typed run stored and stopped by its deadline while its combine call is slow."""
    slow = ScriptedModel(responses=[{"total": 6, "note": "late"}], latency_ms=5000)
    return run_sync(
        "count",
        tools=[count],
        model=ScriptedModel(responses=[PLAN]),
        combiner_model=slow,
        store=store,
        budget=Budget(max_seconds=1),
        output_type=Report,
    )


def test_a_resumed_run_keeps_its_answer_type(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        first = cut_in_its_combine_call(store)
        assert first.stop_reason == "max_seconds"
        stored = store.load_run(first.run_id)
        assert stored.config["answer_schema"] == Report.model_json_schema()
        again = resume_sync(
            first.run_id,
            store=store,
            tools=[count],
            model=ScriptedModel(responses=[]),
            combiner_model=ScriptedModel(responses=[{"total": 6, "note": "resumed"}]),
        )
        assert again.stop_reason == "success"
        assert again.output == {"total": 6, "note": "resumed"}  # the stored schema's JSON
        assert store.load_run(first.run_id).result().output == {"total": 6, "note": "resumed"}
    finally:
        store.close()


def test_a_resume_given_the_model_class_types_the_output(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        first = cut_in_its_combine_call(store)
        again = resume_sync(
            first.run_id,
            store=store,
            tools=[count],
            model=ScriptedModel(responses=[]),
            combiner_model=ScriptedModel(responses=[{"total": 6, "note": "resumed"}]),
            output_type=Report,
        )
        assert again.output == Report(total=6, note="resumed")
    finally:
        store.close()


def test_a_streamed_answer_arrives_as_deltas_that_make_the_answer() -> None:
    events: list[Event] = []
    answer = "Six counts were made, one for each number from one to three, twice."
    result = asyncio.run(
        run(
            "count",
            tools=[count],
            model=scripted(answer, stream_ms=30),
            on_event=events.append,
        )
    )
    assert result.answer == answer
    deltas = [e for e in events if isinstance(e, AnswerDelta)]
    assert len(deltas) > 1
    assert "".join(d.text for d in deltas) == answer
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("AnswerDelta") < kinds.index("RunStopped")


def test_a_repaired_streamed_answer_starts_a_new_attempt() -> None:
    events: list[Event] = []
    model = scripted({"total": "many", "note": "x"}, {"total": 6, "note": "y"}, stream_ms=5)
    result = run_sync(
        "count", tools=[count], model=model, output_type=Report, on_event=events.append
    )
    deltas = [e for e in events if isinstance(e, AnswerDelta)]
    assert deltas and deltas[0].attempt == 1
    first = "".join(d.text for d in deltas if d.attempt == 1)
    assert json.loads(first) == {"total": "many", "note": "x"}
    if result.stop_reason == "success":  # repaired: attempt 2's pieces make the answer
        assert "".join(d.text for d in deltas if d.attempt == 2) == result.answer
    else:
        assert result.stop_reason == "invalid_answer:schema"
        assert {d.attempt for d in deltas} == {1}
