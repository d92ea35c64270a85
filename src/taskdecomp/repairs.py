"""Answers that fail the policy boundary are sent back to the model to be repaired.

:func:`ask_checked` is how a strategy asks for an answer it must check (a plan, a replan,
an executor action, a roll-up, a typed answer): the model's answer goes through ``check``;
when ``check`` refuses it with an ``invalid_*`` stop reason, the model is told the rule it
broke and asked again, up to the run's ``repairs`` budget.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from taskdecomp.models.base import Model, ModelRequest, ModelResponse

if TYPE_CHECKING:
    from taskdecomp.runtime import RunContext

T = TypeVar("T")


async def ask_checked(
    ctx: RunContext,
    request: ModelRequest,
    check: Callable[[ModelResponse], T],
    *,
    model: Model | None = None,
) -> T:
    """Ask ``request`` and return what ``check`` makes of the answer.

    Raises:
        StopRun: what :meth:`RunContext.ask` raises, or ``check``'s stop reason.
    """
    response = await ctx.ask(request, model=model)
    return check(response)
