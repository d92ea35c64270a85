"""A queued run continues its submitter's trace on the worker that runs it."""

from __future__ import annotations

import uuid

import pytest
from opentelemetry.trace import StatusCode

from taskdecomp.errors import StoreError
from taskdecomp.scale.submit import submit
from taskdecomp.store import open_store
from tests.scale.conftest import Cluster, step
from tests.telemetry.conftest import Catching, spans  # noqa: F401  # the fixture, by name
from tests.telemetry.receiver import receiving
from tests.telemetry.spantree import named, one

PLAN = (step("s1", "look", 1), step("s2", "put", 2), step("s3", "look", 3))


def test_a_queued_run_is_a_child_of_its_submit_span_across_the_worker(
    cluster: Cluster,
    spans: Catching,  # noqa: F811  # the fixture imported above
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = cluster.model("plan", *PLAN)
    with receiving() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # the worker is killed, not ended
        cluster.start()
        run_id = cluster.submit("report 1", model)
        ended = cluster.ended([run_id], timeout=120)
        assert (ended[run_id].status, ended[run_id].stop_reason) == ("ok", "success")
        exported = receiver.wait(
            lambda got: any(s.name == "invoke_agent plan_execute" for s in got), timeout=60
        )

    submitted = one(spans.get_finished_spans(), "submit plan_execute")
    assert submitted.attributes["taskdecomp.run.id"] == run_id
    run_span = next(s for s in exported if s.name == "invoke_agent plan_execute")
    assert run_span.attributes["taskdecomp.run.id"] == run_id
    assert run_span.trace_id == format(submitted.context.trace_id, "032x")
    assert run_span.parent_id == format(submitted.context.span_id, "016x")
    tools = [s for s in exported if s.name.startswith("execute_tool")]
    assert sorted(s.name for s in tools) == [
        "execute_tool look",
        "execute_tool look",
        "execute_tool put",
    ]
    assert {s.parent_id for s in tools} == {run_span.span_id}


def test_a_submit_span_names_the_run_the_store_returned_and_records_a_failure(
    cluster: Cluster,
    spans: Catching,  # noqa: F811  # the fixture imported above
) -> None:
    model = cluster.model("plan", *PLAN)
    key = f"k-{uuid.uuid4().hex[:8]}"
    first = cluster.submit("report 1", model, idempotency_key=key)
    again = cluster.submit("report 1, again", model, idempotency_key=key)
    assert again == first
    submits = named(spans.get_finished_spans(), "submit plan_execute")
    assert [s.attributes["taskdecomp.run.id"] for s in submits] == [first, first]
    assert all(s.status.status_code == StatusCode.UNSET for s in submits)
    spans.clear()

    read_only = open_store(f"{cluster.db}?options=-c%20default_transaction_read_only%3Don")
    try:
        with pytest.raises(StoreError, match="read-only"):
            submit("report 2", store=read_only, db=cluster.db, tools="scale", model=model)
    finally:
        read_only.close()
    failed = one(spans.get_finished_spans(), "submit plan_execute")
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.attributes["error.type"] == "StoreError"
    assert "taskdecomp.run.id" not in failed.attributes
