"""What every strategy shares while a run is in flight.

:class:`RunContext` bundles a run's parts (model, gateway, meter, events, clock, and the
journal of a stored run) and collects its trace and history. :meth:`RunContext.ask` is the
one way a strategy calls a model: it enforces the model budgets and turns model failures
into stop reasons.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from taskdecomp import stops
from taskdecomp.budget import Meter
from taskdecomp.durable import Journal
from taskdecomp.errors import ModelError, ModelTimeoutError
from taskdecomp.events import EventBus, ModelCalled
from taskdecomp.gateway import ToolGateway
from taskdecomp.models.base import (
    Model,
    ModelRequest,
    ModelResponse,
    PricedModel,
    estimate_tokens,
)
from taskdecomp.run import HistoryEntry, RunId, TraceEntry
from taskdecomp.stops import StopRun, invalid_plan, with_detail

Clock = Callable[[], float]
"""Monotonic seconds; ``time.monotonic`` unless a test supplies another."""


@dataclass(kw_only=True)
class RunContext:
    """The parts and the running record of one run."""

    run_id: RunId
    goal: str
    model: Model
    gateway: ToolGateway
    meter: Meter
    events: EventBus
    clock: Clock = time.monotonic
    trace: list[TraceEntry] = field(default_factory=list)
    history: list[HistoryEntry] = field(default_factory=list)
    journal: Journal | None = None
    """Where the run is checkpointed; ``None`` keeps it in memory only."""

    async def ask(self, request: ModelRequest, *, model: Model | None = None) -> ModelResponse:
        """Call the model within the budgets.

        Returns the response with non-empty text. A plan answer cut off by the length
        limit is refused, never parsed.

        Raises:
            StopRun: ``max_llm_calls``, ``max_tokens``, ``max_cost``, ``llm_timeout``,
                ``llm_empty``, ``llm_error:<kind>`` or ``invalid_plan:truncated``; and
                ``lease_lost`` before calling, once another process owns the run.
        """
        if self.journal is not None:
            self.journal.check()
        phase = request.phase
        chosen = model or self.model
        tokens = estimate_tokens(request.text())
        cost = chosen.estimate_cost(tokens) if isinstance(chosen, PricedModel) else 0.0
        self.meter.before_model_call(phase, estimated_tokens=tokens, estimated_cost_usd=cost)
        started = self.clock()
        try:
            response = await chosen.complete(request)
        except ModelTimeoutError as exc:
            self._called(phase, ok=False, started=started)
            raise StopRun(stops.LLM_TIMEOUT, llm_phase=phase, message=str(exc)) from exc
        except ModelError as exc:
            self._called(phase, ok=False, started=started)
            raise StopRun(
                with_detail("llm_error", exc.kind), llm_phase=phase, message=str(exc)
            ) from exc
        self._called(phase, ok=True, started=started, response=response)
        self.meter.after_model_call(
            phase,
            tokens_in=response.tokens_in,
            tokens_out=response.tokens_out,
            cost_usd=response.cost_usd,
        )
        if not response.text.strip():
            raise StopRun(stops.LLM_EMPTY, llm_phase=phase)
        if response.finish_reason == "length" and phase == "plan":
            raise StopRun(
                invalid_plan("truncated"),
                llm_phase=phase,
                message="the model hit its output limit; the plan was cut off",
            )
        return response

    def _called(
        self,
        phase: stops.LlmPhase,
        *,
        ok: bool,
        started: float,
        response: ModelResponse | None = None,
    ) -> None:
        self.events.emit(
            ModelCalled(
                run_id=self.run_id,
                phase=phase,
                ok=ok,
                tokens_in=response.tokens_in if response else 0,
                tokens_out=response.tokens_out if response else 0,
                seconds=self.clock() - started,
            )
        )
