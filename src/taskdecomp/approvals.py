"""Human approval: a run pauses until a person approves a plan or a tool call.

A strategy asks :meth:`Approvals.require` before it acts on something that needs a human
(a plan under ``approve_plan``, a call to a ``@tool(needs_approval=True)`` tool). What is
asked for is identified by a digest of its canonical JSON, so an approval given once is
never asked again for the same plan or the same call, including after a resume or a crash
(the approved digests are stored with the run). Given the run's redactor, the digest is of
the JSON with its secrets replaced, as the run is stored, so an approval still matches once
a resume reads the plan and the results back from the store. When it was not approved yet,
the request becomes the run's pending approval and the run stops with ``awaiting_approval``
(status ``paused``); ``approve`` or ``reject`` decide it later, from any process.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from taskdecomp import stops
from taskdecomp.plan import Plan
from taskdecomp.redact import Redactor
from taskdecomp.stops import StopRun

_NONE = Redactor()

ApprovalKind = Literal["plan", "tool"]
"""What waits for a human: a (revised) plan, or one tool call."""


def digest(value: Any) -> str:
    """sha256 of canonical JSON (sorted keys, compact), first 16 hex digits."""
    raw = json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"), default=str)
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalRequest:
    """One thing a human is asked to approve."""

    kind: ApprovalKind
    digest: str
    """Identifies the plan or the call (see :func:`digest`)."""
    subject: Mapping[str, Any]
    """What to show the human: ``{"plan": [...]}`` or ``{"step_id", "tool", "args"}``."""

    @classmethod
    def for_plan(cls, plan: Plan, *, redactor: Redactor | None = None) -> ApprovalRequest:
        """A request to approve ``plan`` (the remaining steps), its secrets replaced."""
        steps = (redactor or _NONE).value(plan.to_list())
        return cls(kind="plan", digest=digest(["plan", steps]), subject={"plan": steps})

    @classmethod
    def for_call(
        cls, call_id: str, tool: str, args: Mapping[str, Any], *, redactor: Redactor | None = None
    ) -> ApprovalRequest:
        """A request to approve calling ``tool`` with ``args`` (``call_id`` names the call)."""
        subject = {"step_id": call_id, "tool": tool, "args": dict(args)}
        subject = (redactor or _NONE).value(subject)
        return cls(kind="tool", digest=digest(["tool", subject]), subject=subject)

    def describe(self) -> str:
        """One line for people."""
        if self.kind == "plan":
            return f"the plan ({len(self.subject.get('plan', ()))} steps) waits for approval"
        return (
            f"the call of {self.subject.get('tool')!r} in step "
            f"{self.subject.get('step_id')!r} waits for approval"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"kind": self.kind, "digest": self.digest, "subject": dict(self.subject)}


class Approvals:
    """The approvals of one run: what was approved, and what is pending.

    Args:
        approved: digests approved before (from the store).
        enabled: ``False`` turns every check into a no-op (no human in the loop).
    """

    def __init__(self, approved: Iterable[str] = (), *, enabled: bool = True) -> None:
        self.approved: set[str] = set(approved)
        self.pending: ApprovalRequest | None = None
        self.enabled = enabled

    def require(self, request: ApprovalRequest) -> None:
        """Go on when ``request`` was approved; else make it pending and pause the run.

        Raises:
            StopRun: ``awaiting_approval``.
        """
        if not self.enabled or request.digest in self.approved:
            return
        self.pending = request
        raise StopRun(
            stops.AWAITING_APPROVAL,
            message=f"{request.describe()}: taskdecomp approve RUN_ID, or reject RUN_ID "
            "--reason TEXT",
        )

    def grant(self, digest_: str) -> None:
        """Record a human's approval."""
        self.approved.add(digest_)
        if self.pending is not None and self.pending.digest == digest_:
            self.pending = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form, for the store."""
        return {
            "approved": sorted(self.approved),
            "pending": self.pending.to_dict() if self.pending is not None else None,
        }
