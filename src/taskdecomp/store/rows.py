"""Domain objects to table rows (the write side of the store).

Every function here is pure and encodes through :mod:`taskdecomp.store.codec`, so a value
the store refuses raises before a transaction starts.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from taskdecomp.budget import Usage
from taskdecomp.plan import Plan
from taskdecomp.run import HistoryEntry, RunId, RunResult, json_output
from taskdecomp.store.base import AttemptStart, Checkpoint, EventRecord, NewRun
from taskdecomp.store.codec import encode_json, encode_optional_text, encode_text

Row = dict[str, Any]


@functools.lru_cache(maxsize=256)
def key(run_id: RunId) -> str:
    """The stored form of a run id (kept for the runs in use: every row of a step has it)."""
    return encode_text(run_id, what="run id")


def usage(value: Usage) -> str:
    """The stored form of a usage snapshot."""
    return encode_json(value.to_dict(), what="usage")


def new_run(run: NewRun, *, now: float, owner: str | None = None, ttl: float = 0.0) -> Row:
    """The ``runs`` row of a run that starts; leased to ``owner`` (epoch 1) when given."""
    if owner is None:
        lease = {"lease_owner": None, "lease_epoch": 0, **released()}
    else:
        lease = claim(owner, epoch=1, ttl=ttl, now=now)
    return {
        "id": key(run.run_id),
        "goal": encode_text(run.goal, what="the goal"),
        "status": "running",
        "stop_reason": None,
        "model": encode_optional_text(run.model, what="the model string"),
        "tools": encode_optional_text(run.tools, what="the toolset"),
        "config": encode_json(dict(run.config), what="the run's settings"),
        "usage": _NO_USAGE,
        "result": None,
        "segments": 1,
        "started_at": now,
        "updated_at": now,
        "finished_at": None,
        **lease,
    }


_NO_USAGE = usage(Usage())


def claim(owner: str, *, epoch: int, ttl: float, now: float) -> Row:
    """The lease columns of a run ``owner`` takes at ``epoch``."""
    return {
        "lease_owner": encode_text(owner, what="the lease owner"),
        "lease_epoch": epoch,
        "lease_heartbeat_at": now,
        "lease_expires_at": now + ttl,
    }


def released() -> Row:
    """The lease columns of a run nobody holds; its epoch and last owner are kept."""
    return {"lease_heartbeat_at": None, "lease_expires_at": None}


def plan(run_id: RunId, value: Plan, *, now: float) -> Row:
    """The ``plans`` row."""
    return {
        "run_id": key(run_id),
        "plan": encode_json(value.to_list(), what="the plan"),
        "created_at": now,
    }


def attempt_start(run_id: RunId, attempt: AttemptStart, *, now: float) -> Row:
    """An ``attempts`` row for a committed intent (no outcome yet)."""
    return {
        "run_id": key(run_id),
        "step_id": encode_text(attempt.step_id, what="the step id"),
        "step_no": attempt.step_no,
        "segment": attempt.segment,
        "side_effects": attempt.side_effects,
        "idempotency_key": encode_text(attempt.idempotency_key, what="the idempotency key"),
        "state": "started",
        "trace": None,
        "started_at": now,
        "finished_at": None,
    }


def attempt_end(run_id: RunId, checkpoint: Checkpoint, *, now: float) -> Row:
    """The ``attempts`` row of an ended attempt (the whole row, for insert or update)."""
    row = attempt_start(run_id, checkpoint.attempt, now=now)
    if checkpoint.attempt_id is not None:
        del row["started_at"]  # keep the intent's time
    row["state"] = checkpoint.state
    row["trace"] = encode_json(checkpoint.trace.to_dict(), what="the trace entry")
    row["finished_at"] = now
    return row


def step(run_id: RunId, entry: HistoryEntry, *, now: float, observation: str | None = None) -> Row:
    """The ``steps`` row of a finished step (its history entry).

    ``observation`` is the observation's :func:`encode_json` text, when made already.
    """
    if observation is None:
        what = f"the observation of step {entry.plan_step.id!r}"
        observation = encode_json(entry.observation, what=what)
    return {
        "run_id": key(run_id),
        "step_id": encode_text(entry.plan_step.id, what="the step id"),
        "step_no": entry.step_no,
        "observation": observation,
        "finished_at": now,
    }


def events(run_id: RunId, records: Sequence[EventRecord]) -> list[Row]:
    """``events`` rows."""
    stored = key(run_id)
    return [
        {
            "run_id": stored,
            "kind": record.kind,
            "at": record.at,
            "data": encode_json(dict(record.data), what=f"a {record.kind} event"),
        }
        for record in records
    ]


def finished(result: RunResult, *, now: float) -> Row:
    """The ``runs`` columns a finished run updates; its lease ends with it."""
    outcome = {
        "answer": result.answer,
        "raw_plan": result.raw_plan,
        "llm_phase": result.llm_phase,
        "message": result.message,
    }
    if result.output is not None:  # runs without an answer type store what they did
        outcome["output"] = json_output(result.output)
    return {
        "status": result.status,
        "stop_reason": encode_text(result.stop_reason, what="the stop reason"),
        "usage": usage(result.usage),
        "result": encode_json(outcome, what="the run's result"),
        "updated_at": now,
        "finished_at": now,
        **released(),
    }
