"""What a stored event keeps: one entry per event type, the same fields as before."""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

import pytest

from taskdecomp import eventrecords
from taskdecomp.eventrecords import MAX_STORED_ERROR_CHARS, event_data
from taskdecomp.events import Event, ModelCalled, NodeFinished, RunStarted
from taskdecomp.run import RunId


def test_every_event_type_has_a_record() -> None:
    assert set(eventrecords._DATA) == set(get_args(Event))


def test_a_record_keeps_its_fields() -> None:
    run = RunId("r")
    assert event_data(RunStarted(run_id=run, goal="g")) == {}
    called = ModelCalled(
        run_id=run, phase="plan", ok=True, tokens_in=3, tokens_out=4, seconds=0.1234567
    )
    assert event_data(called) == {
        "phase": "plan",
        "ok": True,
        "tokens_in": 3,
        "tokens_out": 4,
        "seconds": 0.123457,
    }
    estimated = ModelCalled(
        run_id=run, phase="plan", ok=True, tokens_in=3, tokens_out=4, seconds=1, estimated=True
    )
    assert event_data(estimated)["estimated"] is True


def test_a_subclass_of_an_event_keeps_what_its_type_keeps() -> None:
    @dataclass(frozen=True, kw_only=True, slots=True)
    class Started(RunStarted):
        note: str = ""

    assert event_data(Started(run_id=RunId("r"), goal="g", note="n")) == {}
    with pytest.raises(TypeError, match="not an event: object"):
        event_data(object())  # type: ignore[arg-type]


def test_a_long_error_is_cut() -> None:
    long = "x" * (MAX_STORED_ERROR_CHARS + 5)
    finished = NodeFinished(run_id=RunId("r"), node_id=1, status="failed", result=long, reason=long)
    data = event_data(finished)
    assert data["result"] == data["error"] == "x" * MAX_STORED_ERROR_CHARS + " [cut]"
