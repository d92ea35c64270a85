"""One event stream for everything that watches a run: the CLI, the store, the service.

Events are frozen records. :class:`EventBus` hands each one to its subscribers in order; a
subscriber that raises is logged and the run goes on, so a broken display can never change
how a run ends.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from taskdecomp.plan import Plan, Step
from taskdecomp.stops import LlmPhase

if TYPE_CHECKING:
    from taskdecomp.run import RunId, RunResult, TraceEntry

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class RunStarted:
    """A run began."""

    run_id: RunId
    goal: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelCalled:
    """A model call finished (successfully or not)."""

    run_id: RunId
    phase: LlmPhase
    ok: bool
    tokens_in: int
    tokens_out: int
    seconds: float


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanCreated:
    """The plan passed the policy boundary."""

    run_id: RunId
    plan: Plan


@dataclass(frozen=True, kw_only=True, slots=True)
class StepStarted:
    """A step is about to call its tool."""

    run_id: RunId
    step_no: int
    step: Step


@dataclass(frozen=True, kw_only=True, slots=True)
class StepFinished:
    """A step's tool call ended; ``entry.ok`` says how."""

    run_id: RunId
    entry: TraceEntry
    observation: Any = None


@dataclass(frozen=True, kw_only=True, slots=True)
class RunStopped:
    """The run ended (any stop reason, including success)."""

    run_id: RunId
    result: RunResult


Event = RunStarted | ModelCalled | PlanCreated | StepStarted | StepFinished | RunStopped
"""Every event type."""

Subscriber = Callable[[Event], None]


class EventBus:
    """Delivers events to subscribers, synchronously and in order."""

    def __init__(self, subscribers: list[Subscriber] | None = None) -> None:
        self._subscribers: list[Subscriber] = list(subscribers or [])

    def subscribe(self, subscriber: Subscriber) -> None:
        """Add a subscriber; it receives every later event."""
        self._subscribers.append(subscriber)

    def emit(self, event: Event) -> None:
        """Hand ``event`` to every subscriber; a failing subscriber is logged, not raised."""
        for subscriber in self._subscribers:
            try:
                subscriber(event)
            except Exception:
                logger.exception("event subscriber %r failed on %s", subscriber, type(event))
