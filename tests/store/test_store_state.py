"""Strategy state, approvals and instruction steps in the store, on every backend."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from taskdecomp import stops
from taskdecomp.budget import Usage
from taskdecomp.plan import Plan, Step, TaskId
from taskdecomp.run import HistoryEntry, RunId, RunResult
from taskdecomp.store import EventRecord, NewRun, SqlStore, open_store, schema

RUN = RunId("r1")


def new_run() -> NewRun:
    return NewRun(
        run_id=RUN,
        goal="g",
        model="scripted:x.json",
        tools="tools.py",
        config={"budget": {}, "allow": ["t"], "strategy": "replan"},
    )


def mixed_plan(*extra: Step) -> Plan:
    return Plan(
        steps=(
            Step(id=TaskId("s1"), title="look", tool="t", args={"k": {"$ref": "s0/x"}}),
            Step(id=TaskId("s2"), title="think", instruction="Summarize s1", depends_on=()),
            *extra,
        )
    )


def test_state_and_plan_are_replaced_together(store: SqlStore) -> None:
    store.create_run(new_run())
    store.save_state(
        RUN, mixed_plan(), {"replan": {"iteration": 1}}, approvals={}, usage=Usage(), events=[]
    )
    third = Step(id=TaskId("s3"), title="more", tool="t", args={})
    approvals = {"approved": ["abc"], "pending": None}
    event = EventRecord(kind="PlanRevised", at=1.0, data={"iteration": 2})
    store.save_state(
        RUN,
        mixed_plan(third),
        {"replan": {"iteration": 2}},
        approvals=approvals,
        usage=Usage(llm_calls=4),
        events=[event],
    )
    stored = store.load_run(RUN)
    assert stored.plan == mixed_plan(third)
    assert stored.plan is not None and stored.plan.steps[1].instruction == "Summarize s1"
    assert stored.state == {"replan": {"iteration": 2}}
    assert stored.approvals == approvals
    assert stored.usage.llm_calls == 4  # a decision's model call is stored with it
    assert [e.kind for e in store.load_events(RUN)] == ["PlanRevised"]


def test_an_instruction_step_result_is_a_history_entry(store: SqlStore) -> None:
    store.create_run(new_run())
    plan = mixed_plan()
    store.save_state(RUN, plan, {}, approvals={}, usage=Usage(), events=[])
    entry = HistoryEntry(step_no=2, plan_step=plan.steps[1], observation="s1 said 3")
    store.save_step(RUN, entry, usage=Usage(llm_calls=3, tool_calls=1), events=[])
    stored = store.load_run(RUN)
    assert stored.history == (entry,)
    assert stored.usage.llm_calls == 3
    assert stored.finished_steps() == {"s2"}


def test_a_paused_run_keeps_its_pending_approval(store: SqlStore) -> None:
    store.create_run(new_run())
    pending = {"kind": "plan", "digest": "d1", "subject": {"plan": []}}
    result = RunResult(run_id=RUN, status="paused", stop_reason=stops.AWAITING_APPROVAL)
    store.finish_run(RUN, result, events=[], approvals={"approved": [], "pending": pending})
    stored = store.load_run(RUN)
    assert stored.summary.status == "paused"
    assert stored.pending_approval() == pending
    assert stored.result().status == "paused" and stored.result().approval == pending
    assert not stored.resumable
    rejected = stored.ended(stops.APPROVAL_REJECTED, "rejected: no")
    assert rejected.status == "stopped" and rejected.approval is None


def test_a_store_from_before_the_state_columns_is_upgraded(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        schema.migrations.create(conn)
        for migration in schema.MIGRATIONS:
            if migration.version <= 2:
                migration.apply(conn)
                conn.execute(
                    sa.insert(schema.migrations).values(
                        version=migration.version, name=migration.name, applied_at=0
                    )
                )
        columns = {c["name"] for c in sa.inspect(conn).get_columns("runs")}
    engine.dispose()
    assert "state" not in columns and "approvals" not in columns
    store = open_store(url)
    try:
        store.create_run(new_run())
        store.save_state(
            RUN, mixed_plan(), {"replan": {}}, approvals={"approved": []}, usage=Usage(), events=[]
        )
        assert store.load_run(RUN).approvals == {"approved": []}
    finally:
        store.close()
