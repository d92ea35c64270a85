"""Answers that fail the policy boundary are sent back to the model to be repaired.

:func:`ask_checked` is how a strategy asks for an answer it must check (a plan, a replan,
an executor action, a roll-up, a typed answer): the model's answer goes through ``check``;
when ``check`` refuses it with a boundary rule, the model is shown its answer and told the
rule it broke, the part that broke it and what is allowed, and is asked again, up to the
run's ``Budget.repairs`` times for this answer. Each repair is one more call through
:meth:`RunContext.ask <taskdecomp.runtime.RunContext.ask>`, so every budget counts it; it
is counted in ``Usage.repairs`` and announced by a ``PlanRepaired`` event. When the
repairs run out, the run stops with the last rule broken.

Stops that no answer can repair are never sent back: the budgets, the model's failures
(``llm_*``, and an answer cut off by the length limit, which the same call would cut off
again), a lost lease, a pause for approval, a cancellation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from taskdecomp.events import PlanRepaired
from taskdecomp.models.base import Message, Model, ModelRequest, ModelResponse
from taskdecomp.stops import StopRun

if TYPE_CHECKING:
    from taskdecomp.runtime import RunContext

T = TypeVar("T")

NOT_REPAIRED = frozenset(
    {
        "max_execute_steps",
        "max_tool_calls",
        "max_seconds",
        "max_llm_calls",
        "max_tokens",
        "max_cost",
        "max_iterations",
        "llm_timeout",
        "llm_empty",
        "llm_error",
        "cancelled",
        "lease_lost",
        "awaiting_approval",
        "approval_rejected",
        "poisoned",
    }
)
"""Stop families a repair cannot help: a ``check`` that raises one stops the run at once."""

MAX_ANSWER_CHARS = 20_000
"""Longest refused answer shown back to the model; a longer one is cut (its rule says why)."""


def repairable(stop: StopRun) -> bool:
    """Whether ``stop``, raised by a boundary check, names a rule the model can repair."""
    family, _, detail = stop.reason.partition(":")
    return family not in NOT_REPAIRED and detail != "truncated"


def repair_messages(
    messages: tuple[Message, ...], answer: str, stop: StopRun
) -> tuple[Message, ...]:
    """``messages``, then the refused ``answer``, then what was wrong with it.

    The model sees its own answer as the assistant's and, as the user's, the rule it broke
    (``stop.reason``), the part that broke it and what is allowed (``stop.message``).
    """
    if len(answer) > MAX_ANSWER_CHARS:
        answer = answer[:MAX_ANSWER_CHARS] + " [cut]"
    detail = f"\n{stop.message}" if stop.message else ""
    feedback = (
        f"Your answer was refused: it breaks the rule {stop.reason}.{detail}\n"
        "Answer again with the whole corrected answer, in the same format, following every "
        "rule you were given. Change only what is needed to follow the rules."
    )
    return (
        *messages,
        {"role": "assistant", "content": answer},
        {"role": "user", "content": feedback},
    )


async def ask_checked(
    ctx: RunContext,
    request: ModelRequest,
    check: Callable[[ModelResponse], T],
    *,
    model: Model | None = None,
    stream_repairs: bool = False,
) -> T:
    """Ask ``request`` and return what ``check`` makes of the answer, repairing refusals.

    ``check`` raises :class:`~taskdecomp.stops.StopRun` to refuse an answer. A refusal that
    :func:`repairable` accepts, while repairs are left, sends the conversation back with
    :func:`repair_messages`; ``check`` sees every answer, in order. A repaired request has
    no ``on_text`` (its pieces do not go to the first answer's listener, which reads a plan
    as it streams) unless ``stream_repairs`` says the listener takes every attempt.

    Raises:
        StopRun: what :meth:`RunContext.ask` raises (a budget spent by a repair included),
            or ``check``'s last stop reason once the repairs run out.
    """
    left = ctx.meter.budget.repairs
    attempt = 0
    while True:
        response = await ctx.ask(request, model=model)
        try:
            return check(response)
        except StopRun as stop:
            if attempt >= left or not repairable(stop):
                raise
            attempt += 1
            ctx.meter.repairs += 1
            ctx.events.emit(
                PlanRepaired(
                    run_id=ctx.run_id,
                    phase=request.phase,
                    rule=stop.reason,
                    message=stop.message,
                    attempt=attempt,
                )
            )
            messages = repair_messages(request.messages, response.text, stop)
            on_text = request.on_text if stream_repairs else None
            request = replace(request, messages=messages, on_text=on_text)
