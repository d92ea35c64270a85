"""Budgets (the limits of a run) and usage (what a run spent).

:class:`Budget` holds the seed's defaults plus model-call, token, cost and parallelism
limits. :class:`Meter` counts what a run spends and raises :class:`~taskdecomp.stops.StopRun`
the moment a limit would be crossed; :class:`Usage` is its frozen snapshot for results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from taskdecomp import stops
from taskdecomp.stops import LlmPhase, StopRun

MIN_PLAN_STEPS = 3
"""The seed's lower bound on plan length (``invalid_plan:min_steps``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Budget:
    """The limits of one run. ``None`` means unlimited."""

    max_plan_steps: int = 6
    """Most steps a plan may have (``invalid_plan:max_steps``)."""
    max_execute_steps: int = 8
    """Most steps a run may execute (``max_execute_steps``)."""
    max_tool_calls: int = 8
    """Most tool calls a run may make (``max_tool_calls``)."""
    max_seconds: float = 60
    """Deadline for the whole run, in seconds (``max_seconds``)."""
    max_llm_calls: int | None = None
    """Most model calls (``max_llm_calls``)."""
    max_tokens: int | None = None
    """Most model tokens, input plus output (``max_tokens``)."""
    max_cost_usd: float | None = None
    """Most model spend in USD (``max_cost``)."""
    max_parallel: int = 8
    """Most steps of a DAG plan running at once."""
    min_plan_steps: int = MIN_PLAN_STEPS
    """Fewest steps a plan may have (``invalid_plan:min_steps``); 1 allows any plan."""
    repairs: int = 1
    """Times a refused answer (a plan, a revision, an action, a roll-up) is sent back with
    the rule it broke, per answer; 0 stops at the first refusal."""

    def __post_init__(self) -> None:
        for name in (
            "max_plan_steps",
            "max_execute_steps",
            "max_tool_calls",
            "max_parallel",
            "min_plan_steps",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)!r}")
        if self.min_plan_steps > self.max_plan_steps:
            raise ValueError(
                f"min_plan_steps ({self.min_plan_steps!r}) is above max_plan_steps "
                f"({self.max_plan_steps!r}); lower the one or raise the other"
            )
        if self.repairs < 0:
            raise ValueError(f"repairs must be 0 or more, got {self.repairs!r}")
        if not 0 < self.max_seconds < math.inf:
            raise ValueError(
                f"max_seconds must be a positive, finite number, got {self.max_seconds!r}"
            )
        for name in ("max_llm_calls", "max_tokens", "max_cost_usd"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < math.inf:
                raise ValueError(
                    f"{name} must be a finite number >= 0, or None for no limit, got {value!r}"
                )

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON object (numbers and ``None``: nothing to copy)."""
        return _fields_of(self)


def _fields_of(value: Budget | Usage) -> dict[str, Any]:
    """A flat dataclass's fields by name, without :func:`dataclasses.asdict`'s deep copy.

    A slotted dataclass's ``__slots__`` are its field names, kept by the class itself.
    """
    return {name: getattr(value, name) for name in value.__slots__}


@dataclass(frozen=True, kw_only=True, slots=True)
class Usage:
    """What a run spent."""

    llm_calls: int = 0
    """Model calls made (including failed ones)."""
    tool_calls: int = 0
    """Tool calls made."""
    tokens_in: int = 0
    """Prompt tokens."""
    tokens_out: int = 0
    """Completion tokens."""
    cost_usd: float | None = 0.0
    """Model spend in USD; ``None`` when a call's cost was unknown (its model's price)."""
    seconds: float = 0.0
    """Wall time of the run."""
    repairs: int = 0
    """Refused answers sent back to the model to be repaired (each one more model call)."""
    estimated: bool = False
    """Some token counts are estimated: a server sent none for a call."""

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON object (numbers and booleans: nothing to copy)."""
        return _fields_of(self)


@dataclass(kw_only=True)
class Meter:
    """Counts a run's spending against its budget.

    The engine is single-threaded asyncio, so plain counters are safe here.
    """

    budget: Budget
    llm_calls: int = 0
    tool_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = 0.0
    """``None`` once a call's cost was unknown: never counted as $0."""
    repairs: int = 0
    estimated: bool = False

    def before_model_call(
        self, phase: LlmPhase, *, estimated_tokens: int, estimated_cost_usd: float | None = 0.0
    ) -> None:
        """Check the model budgets before a call; count the call.

        Raises:
            StopRun: ``max_llm_calls``, ``max_tokens`` or ``max_cost`` when the call would
                exceed them.
        """
        budget = self.budget
        if budget.max_llm_calls is not None and self.llm_calls >= budget.max_llm_calls:
            raise StopRun(stops.MAX_LLM_CALLS, llm_phase=phase)
        if budget.max_tokens is not None and self.tokens + estimated_tokens > budget.max_tokens:
            raise StopRun(
                stops.MAX_TOKENS,
                llm_phase=phase,
                message=f"about {estimated_tokens} more tokens would exceed {budget.max_tokens}",
            )
        self._check_cost(phase, estimated_cost_usd)
        self.llm_calls += 1

    def _check_cost(self, phase: LlmPhase, estimated: float | None) -> None:
        limit = self.budget.max_cost_usd
        if limit is None:
            return
        if self.cost_usd is None or estimated is None:  # unknown is never taken for $0
            raise StopRun(stops.MAX_COST, llm_phase=phase, message=_UNKNOWN_COST)
        if self.cost_usd >= limit or self.cost_usd + estimated > limit:
            raise StopRun(
                stops.MAX_COST,
                llm_phase=phase,
                message=f"about ${estimated:.6f} more would exceed ${limit:g}",
            )

    def after_model_call(
        self,
        phase: LlmPhase,
        *,
        tokens_in: int,
        tokens_out: int,
        cost_usd: float | None,
        estimated: bool = False,
    ) -> None:
        """Account a finished call (``estimated``: its token counts are estimates).

        Raises:
            StopRun: ``max_tokens`` or ``max_cost`` when the call went over the budget.
        """
        self.tokens_in += tokens_in
        self.tokens_out += tokens_out
        if self.cost_usd is not None and cost_usd is not None:
            self.cost_usd += cost_usd
        else:
            self.cost_usd = None  # unknown from now on, never counted as $0
        self.estimated = self.estimated or estimated
        budget = self.budget
        if budget.max_tokens is not None and self.tokens > budget.max_tokens:
            raise StopRun(stops.MAX_TOKENS, llm_phase=phase)
        limit = budget.max_cost_usd
        if limit is not None and self.cost_usd is None:
            raise StopRun(stops.MAX_COST, llm_phase=phase, message=_UNKNOWN_COST)
        if limit is not None and self.cost_usd is not None and self.cost_usd > limit:
            raise StopRun(stops.MAX_COST, llm_phase=phase)

    def count_tool_call(self) -> None:
        """Count a tool call (the seed counts before checking anything else).

        Raises:
            StopRun: ``max_tool_calls`` when the budget is spent.
        """
        self.tool_calls += 1
        if self.tool_calls > self.budget.max_tool_calls:
            raise StopRun(stops.MAX_TOOL_CALLS)

    @property
    def tokens(self) -> int:
        """Input plus output tokens so far."""
        return self.tokens_in + self.tokens_out

    def snapshot(self, *, seconds: float) -> Usage:
        """A frozen copy for results."""
        return Usage(
            llm_calls=self.llm_calls,
            tool_calls=self.tool_calls,
            tokens_in=self.tokens_in,
            tokens_out=self.tokens_out,
            cost_usd=None if self.cost_usd is None else round(self.cost_usd, 8),
            seconds=round(seconds, 6),
            repairs=self.repairs,
            estimated=self.estimated,
        )


_UNKNOWN_COST = (
    "a model call's cost is unknown (its model has no known price), so the cost budget "
    "cannot be kept; set a price with --price-in/--price-out or --prices FILE"
)
