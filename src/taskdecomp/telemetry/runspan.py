"""The span of a run, or of one segment of it (a resume, an approval, a queue worker's).

:class:`RunSpan` is opened where the engine executes a run's phases (``async with``), so
every model call, step, tool call and node of the run is its child. It sees the run's end
through the run's events: ``RunStopped`` sets the stop reason and the status (a run that
stopped for anything but success or a pause is an error, ``error.type`` its stop reason);
``ApprovalRequested`` adds an ``await_approval`` span, ``ApprovalDecided`` an
``approval`` span (see :mod:`taskdecomp.telemetry.propagation` for the trace context kept
with the run).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from opentelemetry import context, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from taskdecomp.events import ApprovalDecided, ApprovalRequested, Event, RunStopped
from taskdecomp.store.base import NewRun
from taskdecomp.telemetry import content, propagation, spans

if TYPE_CHECKING:
    from taskdecomp.runtime import RunContext

AGENT = "gen_ai.agent.name"
STRATEGY = "taskdecomp.strategy"
STOP_REASON = "taskdecomp.stop_reason"
STATUS = "taskdecomp.status"
SEGMENT = "taskdecomp.segment"


class RunSpan:
    """The span of a run's segment: ``invoke_agent <strategy>``.

    The strategy is the agent's name (``gen_ai.agent.name``), as the GenAI conventions name
    the span ``invoke_agent {gen_ai.agent.name}``.

    Args:
        ctx: the run.
        strategy: its strategy's name.
        stored: the config stored with the run, for a continued one: its first segment is
            a child of the trace kept there (a queued run's submitter), a later one links
            to it.
        segment: the segment's number (1: the run's start).
    """

    def __init__(
        self,
        ctx: RunContext,
        strategy: str,
        *,
        stored: Mapping[str, Any] | None = None,
        segment: int = 1,
    ) -> None:
        self._ctx, self._strategy, self._stored, self._segment = ctx, strategy, stored, segment
        self._span: Span | None = None
        self._token: object = None

    def stamped(self, new: NewRun) -> NewRun:
        """``new`` with this span's trace context in its config (a resume links to it)."""
        headers = propagation.carried(self._start())
        if not headers:
            return new
        return NewRun(
            run_id=new.run_id,
            goal=new.goal,
            model=new.model,
            tools=new.tools,
            config={**new.config, **headers},
        )

    def _start(self) -> Span:
        if self._span is not None:
            return self._span
        ctx, stored = self._ctx, self._stored or {}
        parent = propagation.parent(stored) if self._segment == 1 else None
        links = propagation.links(stored) if parent is None else []
        attributes: dict[str, Any] = {
            spans.OPERATION: "invoke_agent",
            AGENT: self._strategy,  # the span is invoke_agent {gen_ai.agent.name}
            spans.RUN_ID: ctx.run_id,
            STRATEGY: self._strategy,
            SEGMENT: self._segment,
        }
        self._span = spans.tracer().start_span(
            f"invoke_agent {self._strategy}",
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=links,
        )
        if self._span.is_recording():
            if content.tracing_content():
                self._span.set_attribute("taskdecomp.goal", content.text(ctx.goal, ctx.redactor))
            ctx.events.subscribe(self._seen)
        return self._span

    def __enter__(self) -> RunSpan:
        self._token = context.attach(trace.set_span_in_context(self._start()))
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        current = self._start()
        if exc is not None and current.is_recording():
            spans.failed(current, exc, self._ctx.redactor)
        context.detach(self._token)  # type: ignore[arg-type]  # the token attach gave
        current.end()

    async def __aenter__(self) -> RunSpan:
        return self.__enter__()

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(kind, exc, tb)

    def _seen(self, event: Event) -> None:
        """Record what the run's events say of its end and its pauses."""
        if isinstance(event, RunStopped):
            self._stopped(event)
        elif isinstance(event, ApprovalRequested):
            request = event.request
            attributes: dict[str, Any] = {
                spans.RUN_ID: event.run_id,
                "taskdecomp.approval.kind": request.kind,
                "taskdecomp.approval.digest": request.digest,
            }
            if request.kind == "tool":
                attributes[spans.TOOL_NAME] = str(request.subject.get("tool"))
                attributes[spans.STEP_ID] = str(request.subject.get("step_id"))
            self._child("await_approval", attributes)
        elif isinstance(event, ApprovalDecided):
            attributes = {
                spans.RUN_ID: event.run_id,
                "taskdecomp.approval.digest": event.digest,
                "taskdecomp.approval.approved": event.approved,
                "taskdecomp.approval.edited": event.edited,
            }
            self._child("approval", attributes)

    def _child(self, name: str, attributes: Mapping[str, Any]) -> None:
        parent = trace.set_span_in_context(self._start())
        spans.tracer().start_span(name, context=parent, attributes=attributes).end()

    def _stopped(self, event: RunStopped) -> None:
        current, result = self._start(), event.result
        current.set_attribute(STOP_REASON, result.stop_reason)
        current.set_attribute(STATUS, result.status)
        current.set_attribute(spans.INPUT_TOKENS, result.usage.tokens_in)
        current.set_attribute(spans.OUTPUT_TOKENS, result.usage.tokens_out)
        current.set_attribute("taskdecomp.usage.llm_calls", result.usage.llm_calls)
        current.set_attribute("taskdecomp.usage.tool_calls", result.usage.tool_calls)
        if result.status == "stopped":
            current.set_attribute(spans.ERROR_TYPE, result.stop_reason)
            current.set_status(Status(StatusCode.ERROR, result.stop_reason))
        if content.tracing_content() and result.answer is not None:
            current.set_attribute(
                "taskdecomp.answer", content.text(result.answer, self._ctx.redactor)
            )
