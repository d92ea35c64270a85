"""What every strategy shares while a run is in flight.

:class:`RunContext` bundles a run's parts (model, gateway, meter, events, clock, and the
journal of a stored run) and collects its trace and history. :meth:`RunContext.ask` is the
one way a strategy calls a model: it enforces the model budgets and turns model failures
into stop reasons. :func:`run_blocking` is the sync facades' event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field, replace
from types import FrameType, TracebackType
from typing import Any, Literal, TypeVar

from taskdecomp import stops
from taskdecomp.approvals import Approvals
from taskdecomp.budget import Meter
from taskdecomp.durable import Journal
from taskdecomp.errors import ModelError, ModelTimeoutError
from taskdecomp.events import EventBus, ModelCalled, ModelProgress, PlanCreated, StepFinished
from taskdecomp.gateway import ToolGateway
from taskdecomp.models.base import (
    Model,
    ModelRequest,
    ModelResponse,
    PricedModel,
    Stage,
    estimate_tokens,
)
from taskdecomp.plan import Plan, Step
from taskdecomp.prompting import Prompts
from taskdecomp.redact import Redactor
from taskdecomp.roles import Role, role_of
from taskdecomp.run import HistoryEntry, RunId, TraceEntry
from taskdecomp.stops import StopRun, with_detail
from taskdecomp.telemetry import spans

logger = logging.getLogger(__name__)

T = TypeVar("T")

PROGRESS_EVERY = 0.25
"""Seconds between two ``ModelProgress`` token counts of one call."""

CLEANUP_GRACE = 0.2
"""Seconds :func:`run_blocking` lets leftover tasks take to end once cancelled."""

Clock = Callable[[], float]
"""Monotonic seconds; ``time.monotonic`` unless a test supplies another."""

_STRUCTURED_PHASES = {
    "plan": "invalid_plan",
    "replan": "invalid_replan",
    "execute": "invalid_action",
}
"""Phases whose answer is parsed, and the stop family of an answer cut off by the limit."""

StoredState = tuple[Plan, Mapping[str, Any], Mapping[str, Any]]
"""What a strategy stores with a step: its plan, its own state, the approvals."""

StepAgent = Callable[[int, Step], Awaitable[Any]]
"""Carries out an instruction step (its number, the step) and returns the step's result."""


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
    approvals: Approvals = field(default_factory=Approvals)
    """What a human approved, and what waits for one."""
    agent: StepAgent | None = None
    """Carries out instruction steps (the ``replan`` strategy's executor agent)."""
    redactor: Redactor = field(default_factory=Redactor.from_environ)
    """Replaces secrets in what the run records: its events, its journal, its result."""
    roles: Mapping[Role, Model] = field(default_factory=dict)
    """The models of the roles that have their own (:mod:`taskdecomp.roles`); every other
    call goes to :attr:`model`."""
    prompts: Prompts | None = None
    """The caller's prompt-building functions, by role (:mod:`taskdecomp.prompting`)."""

    def model_for(self, phase: stops.LlmPhase) -> Model:
        """The model that answers calls of ``phase``: its role's, else the run's."""
        role = role_of(phase)
        return self.roles.get(role, self.model) if role is not None else self.model

    def step_finished(
        self,
        step_no: int,
        step: Step,
        observation: Any,
        *,
        started: float,
        then: Callable[[], StoredState | None] | None = None,
    ) -> None:
        """Record a step that finished without a tool call of its own, and checkpoint it.

        An instruction step carried out by an agent, or a workflow's phase run: its trace
        entry and history, the ``StepFinished`` event, then the journal's checkpoint.
        ``then`` runs after the history holds the step and returns what to store with it
        (the plan, the strategy's state and the approvals), in the same transaction.

        Raises:
            StopRun: ``lease_lost``: another process owns the run; nothing was written.
        """
        entry = TraceEntry(
            step_no=step_no,
            step_id=step.id,
            tool=step.tool_name,
            args_hash="",
            ok=True,
            seconds=round(self.clock() - started, 6),
        )
        history = HistoryEntry(step_no=step_no, plan_step=step, observation=observation)
        self.history.append(history)
        self.events.emit(StepFinished(run_id=self.run_id, entry=entry, observation=observation))
        state = then() if then is not None else None
        if self.journal is not None:
            self.journal.step_done(history, state=state)

    def plan_created(self, plan: Plan) -> None:
        """Say that ``plan`` passed the policy boundary, and store it with the run.

        A strategy calls this once its plan is valid, before any step of it runs: a resume
        reads the plan back (its finished steps are checked against it).
        """
        self.events.emit(PlanCreated(run_id=self.run_id, plan=plan))
        if self.journal is not None:
            self.journal.plan_created(plan)

    async def ask(self, request: ModelRequest, *, model: Model | None = None) -> ModelResponse:
        """Call the model within the budgets.

        The model is ``model`` when given, else the one of the request's role
        (:meth:`model_for`); the messages are built by the role's prompt function when
        the run has one (:attr:`prompts`). Returns the response with non-empty text. A
        plan answer cut off by the length limit is refused, never parsed.

        Raises:
            StopRun: ``max_llm_calls``, ``max_tokens``, ``max_cost``, ``llm_timeout``,
                ``llm_empty``, ``llm_error:<kind>`` (``llm_error:prompt_function`` when
                a prompt function fails) or ``<family>:truncated`` for a plan, replan
                or executor answer cut off by the length limit; and ``lease_lost`` before
                calling, once another process owns the run.
        """
        if self.journal is not None:
            self.journal.check()
        phase = request.phase
        chosen = model or self.model_for(phase)
        if self.prompts is not None:
            request = self.prompts.apply(request, self.goal)
        tokens = estimate_tokens(request.text())
        cost = chosen.estimate_cost(tokens) if isinstance(chosen, PricedModel) else 0.0
        self.meter.before_model_call(phase, estimated_tokens=tokens, estimated_cost_usd=cost)
        started = self.clock()
        progress = _Progress(self, phase, chosen.name)
        try:
            with spans.model_call(chosen, request, self.redactor) as call:
                response = call.answered(await chosen.complete(replace(request, progress=progress)))
        except asyncio.CancelledError:  # the deadline or Ctrl-C: say the call ended too
            self._called(phase, ok=False, started=started)
            raise
        except ModelTimeoutError as exc:
            self._called(phase, ok=False, started=started)
            raise StopRun(stops.LLM_TIMEOUT, llm_phase=phase, message=str(exc)) from exc
        except ModelError as exc:
            self._called(phase, ok=False, started=started)
            raise StopRun(
                with_detail("llm_error", exc.kind), llm_phase=phase, message=str(exc)
            ) from exc
        finally:
            progress.close()
        self._called(phase, ok=True, started=started, response=response)
        self.meter.after_model_call(
            phase,
            tokens_in=response.tokens_in,
            tokens_out=response.tokens_out,
            cost_usd=response.cost_usd,
            estimated=response.estimated,
        )
        if not response.text.strip():
            raise StopRun(stops.LLM_EMPTY, llm_phase=phase)
        family = _STRUCTURED_PHASES.get(phase)
        if response.finish_reason == "length" and family is not None:
            raise StopRun(
                with_detail(family, "truncated"),
                llm_phase=phase,
                message="the model hit its output limit; its answer was cut off",
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
                estimated=response.estimated if response else False,
            )
        )


class _Progress:
    """Forwards a provider's progress as ``ModelProgress`` events, from any thread.

    Events reach the bus on the run's loop, at most every :data:`PROGRESS_EVERY` seconds
    for token counts, and never after the call has ended.
    """

    def __init__(self, ctx: RunContext, phase: stops.LlmPhase, model: str) -> None:
        self._ctx = ctx
        self._phase = phase
        self._model = model
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._last = 0.0
        self._open = True
        self._emit("started", 0)

    def __call__(self, stage: Stage, tokens_out: int) -> None:
        now = time.monotonic()
        if stage == "generating" and now - self._last < PROGRESS_EVERY:
            return
        self._last = now
        if threading.get_ident() == self._thread:
            self._emit(stage, tokens_out)
        else:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                self._loop.call_soon_threadsafe(self._emit, stage, tokens_out)

    def close(self) -> None:
        """The call ended: later reports are dropped."""
        self._open = False

    def _emit(self, stage: Literal["started"] | Stage, tokens_out: int) -> None:
        if self._open:
            event = ModelProgress(
                run_id=self._ctx.run_id,
                phase=self._phase,
                model=self._model,
                stage=stage,
                tokens_out=tokens_out,
            )
            self._ctx.events.emit(event)


def run_blocking(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on a new event loop and return its result, for the sync facades.

    Unlike :func:`asyncio.run`, it never waits for a task that ignores cancellation (an
    abandoned tool): tasks left over when ``main`` ends are cancelled and given
    :data:`CLEANUP_GRACE` seconds, then left behind. In the main thread, Ctrl-C (SIGINT)
    cancels ``main`` (a run then records itself as ``cancelled``) and raises
    :class:`KeyboardInterrupt` once it has ended; a second Ctrl-C raises it at once.
    """
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    task = loop.create_task(main)
    interrupts = _CancelOnSigint(loop, task)
    try:
        with interrupts:
            return loop.run_until_complete(task)
    except asyncio.CancelledError:
        if interrupts.count:
            raise KeyboardInterrupt from None
        raise
    finally:
        if interrupts.count > 1:
            # A second Ctrl-C leaves at once, cutting tasks off mid-cleanup: whatever they
            # raised then is not worth a traceback on the way out.
            loop.set_exception_handler(_quiet)
        _close(loop)
        asyncio.set_event_loop(None)


def _quiet(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """An exception handler that reports nothing."""


class _CancelOnSigint:
    """Ctrl-C cancels ``task`` once, then raises :class:`KeyboardInterrupt`.

    Installed only in the main thread, over Python's own SIGINT handler.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        self._loop = loop
        self._task = task
        self._installed = False
        self.count = 0

    def __enter__(self) -> None:
        if threading.current_thread() is threading.main_thread() and (
            signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            signal.signal(signal.SIGINT, self._on_sigint)
            self._installed = True

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count == 1 and not self._task.done():
            self._task.cancel()
            self._loop.call_soon_threadsafe(lambda: None)  # wake the loop up
            return
        raise KeyboardInterrupt


def _close(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is left, give it a moment, and close ``loop`` without waiting longer."""
    try:
        left = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.wait(left, timeout=CLEANUP_GRACE))
        for task in left:
            if not task.done():
                task._log_destroy_pending = False  # type: ignore[attr-defined]  # left behind
            elif not task.cancelled() and task.exception() is not None:
                logger.warning("a task failed while the run ended", exc_info=task.exception())
        closing = loop.create_task(loop.shutdown_asyncgens())
        loop.run_until_complete(asyncio.wait([closing], timeout=CLEANUP_GRACE))
        closing._log_destroy_pending = False  # type: ignore[attr-defined]  # same
    finally:
        loop.close()
