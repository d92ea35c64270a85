"""The spans of the work inside a run, each opened where that work happens.

Every span here is a context manager that makes itself the current span, so whatever runs
inside it (a model call's HTTP request, a tool's own spans, the nodes under a node) is its
child. A span that ends in a stop records it as an error: status ``ERROR`` and
``error.type`` the stop reason (``tool_error:fetch``, ``llm_timeout``); a pause for
approval is not an error. Attribute names follow the OpenTelemetry GenAI semantic
conventions where they have one (``gen_ai.*``), else they are ``taskdecomp.*``.

Without an OpenTelemetry SDK every span is the API's no-op: nothing is computed for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from opentelemetry import context, trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from taskdecomp import stops
from taskdecomp.errors import ModelError, ModelTimeoutError
from taskdecomp.stops import StopRun
from taskdecomp.telemetry import content

if TYPE_CHECKING:
    from taskdecomp.decomposition import DecompositionResult
    from taskdecomp.models.base import Model, ModelRequest, ModelResponse
    from taskdecomp.plan import Step
    from taskdecomp.redact import Redactor
    from taskdecomp.runtime import RunContext

TRACER = "taskdecomp"
"""The instrumentation scope of every span."""

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
ERROR_TYPE = "error.type"
RUN_ID = "taskdecomp.run.id"
PHASE = "taskdecomp.phase"
STEP_ID = "taskdecomp.step.id"
STEP_NO = "taskdecomp.step.no"


_TRACER = trace.get_tracer(TRACER)
"""The global provider's tracer; before one is set up, a proxy that finds it once it is."""


def tracer() -> trace.Tracer:
    """The tracer of taskdecomp's spans (the global provider's, set up or not)."""
    return _TRACER


@contextmanager
def span(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    links: Sequence[Link] = (),
    redactor: Redactor | None = None,
) -> Iterator[Span]:
    """A span named ``name``, current while the block runs; a stop or error is recorded.

    ``redactor`` replaces secrets in the error message recorded with content on.
    """
    current = _TRACER.start_span(name, kind=kind, attributes=attributes, links=links)
    token = context.attach(trace.set_span_in_context(current))  # not use_span: a third cheaper
    try:
        yield current
    except BaseException as exc:
        if current.is_recording():
            failed(current, exc, redactor)
        raise
    finally:
        context.detach(token)
        current.end()


def failed(current: Span, exc: BaseException, redactor: Redactor | None) -> None:
    """Record ``exc`` on ``current``: its stop reason (or kind) as ``error.type``."""
    kind = error_type(exc)
    if kind is None:
        return  # a pause for approval
    current.set_attribute(ERROR_TYPE, kind)
    message = getattr(exc, "message", None) or str(exc)
    shown = content.text(message, redactor) if content.tracing_content() and message else None
    current.set_status(Status(StatusCode.ERROR, shown or kind))


def error_type(exc: BaseException) -> str | None:
    """What went wrong, as ``error.type``: a stop reason where there is one.

    ``None`` for a pause for approval, which is no error.
    """
    if isinstance(exc, StopRun):
        return None if exc.reason == stops.AWAITING_APPROVAL else exc.reason
    if isinstance(exc, ModelTimeoutError):
        return stops.LLM_TIMEOUT
    if isinstance(exc, ModelError):
        return stops.with_detail("llm_error", exc.kind)
    if isinstance(exc, asyncio.CancelledError):
        return stops.CANCELLED
    return type(exc).__qualname__


def provider_and_model(name: str) -> tuple[str, str]:
    """A model string's provider and model: ``openai:gpt-4.1-mini``, ``local:local``.

    A model named by a file (``scripted:/path/plan.json``) is named by the file's name:
    a path on this machine says nothing to whoever reads the trace.
    """
    provider, _, model = name.partition(":")
    if PurePath(model).is_absolute():  # not openrouter:meta-llama/llama-3.1-8b
        model = PurePath(model).name
    return provider, model or provider


class ModelCall:
    """The span of one model call; :meth:`answered` records the response."""

    def __init__(self, current: Span, redactor: Redactor | None) -> None:
        self.span = current
        self._redactor = redactor

    def answered(self, response: ModelResponse) -> ModelResponse:
        """Record ``response``'s usage (and, with content on, its text); return it."""
        current = self.span
        if current.is_recording():
            current.set_attribute(INPUT_TOKENS, response.tokens_in)
            current.set_attribute(OUTPUT_TOKENS, response.tokens_out)
            if response.finish_reason:
                current.set_attribute(FINISH_REASONS, [response.finish_reason])
            if content.tracing_content():
                answer: dict[str, Any] = {"role": "assistant", "parts": _parts(response.text)}
                if response.finish_reason:
                    answer["finish_reason"] = response.finish_reason
                current.set_attribute(OUTPUT_MESSAGES, content.text([answer], self._redactor))
        return response


@contextmanager
def model_call(
    model: Model, request: ModelRequest, redactor: Redactor | None = None
) -> Iterator[ModelCall]:
    """The span of a call to ``model`` (``chat <model>``), with its phase.

    With content on, the request's messages are recorded (``gen_ai.input.messages``), and
    the answer (``gen_ai.output.messages``), in the GenAI conventions' message format.
    """
    provider, name = provider_and_model(model.name)
    attributes = {OPERATION: "chat", PROVIDER: provider, REQUEST_MODEL: name, PHASE: request.phase}
    with span(f"chat {name}", attributes, kind=SpanKind.CLIENT, redactor=redactor) as current:
        if content.tracing_content() and current.is_recording():
            messages = [
                {"role": message["role"], "parts": _parts(message["content"])}
                for message in request.messages
            ]
            current.set_attribute(INPUT_MESSAGES, content.text(messages, redactor))
        yield ModelCall(current, redactor)


def _parts(text: str) -> list[dict[str, str]]:
    """A message's text as the GenAI conventions' ``parts``."""
    return [{"type": "text", "content": text}]


class ToolCall:
    """The span of one tool call; :meth:`observed` records the observation."""

    def __init__(self, current: Span, redactor: Redactor | None) -> None:
        self.span = current
        self._redactor = redactor

    def observed(self, observation: Any) -> Any:
        """Record ``observation`` (with content on); return it."""
        if content.tracing_content() and self.span.is_recording():
            self.span.set_attribute(TOOL_RESULT, content.text(observation, self._redactor))
        return observation


@contextmanager
def tool_call(
    ctx: RunContext, step_no: int, step: Step, tool: str, args: Mapping[str, Any], *, key: str
) -> Iterator[ToolCall]:
    """The span of a call to ``tool`` for ``step`` (``execute_tool <tool>``).

    ``key`` is the call's idempotency key (``gen_ai.tool.call.id``); with content on, the
    arguments are recorded.
    """
    spec = ctx.gateway.toolset.get(tool)
    attributes = {  # the run's id is on the run's span
        OPERATION: "execute_tool",
        TOOL_NAME: tool,
        TOOL_CALL_ID: key,
        STEP_ID: step.id,
        "taskdecomp.tool.side_effects": spec.side_effects if spec is not None else "unknown",
    }
    with span(f"execute_tool {tool}", attributes, redactor=ctx.redactor) as current:
        if content.tracing_content() and current.is_recording():
            current.set_attribute(TOOL_ARGUMENTS, content.text(dict(args), ctx.redactor))
        yield ToolCall(current, ctx.redactor)


@contextmanager
def step(ctx: RunContext, step_no: int, task: Step) -> Iterator[Span]:
    """The span of an instruction step an agent carries out (``step <id>``).

    A ``replan`` step, a workflow's phase run: the agent's model and tool calls nest in it.
    """
    attributes = {RUN_ID: ctx.run_id, STEP_ID: task.id, STEP_NO: step_no}
    with span(f"step {task.id}", attributes, redactor=ctx.redactor) as current:
        if content.tracing_content() and current.is_recording():
            current.set_attribute(
                "taskdecomp.step.instruction",
                content.text(task.instruction or task.title, ctx.redactor),
            )
        yield current


class Node:
    """The span of a node of a plan tree; :meth:`ended` records how it ended."""

    def __init__(self, current: Span) -> None:
        self.span = current

    def ended(self, ok: bool, reason: str | None) -> bool:
        """Record that the node ended ``ok``, or failed for ``reason``; return ``ok``."""
        current = self.span
        if current.is_recording():
            current.set_attribute("taskdecomp.node.status", "ok" if ok else "failed")
            if not ok:
                current.set_attribute(ERROR_TYPE, reason or "failed")
                current.set_status(Status(StatusCode.ERROR, reason or "failed"))
        return ok


@contextmanager
def node(ctx: RunContext, node_id: int, name: str, *, leaf: bool) -> Iterator[Node]:
    """The span of node ``node_id`` of a ``tree`` run (``node <id>``).

    Its attempts, its splits and its children run inside it. With content on, its name
    is recorded.
    """
    attributes = {RUN_ID: ctx.run_id, "taskdecomp.node.id": node_id, "taskdecomp.node.leaf": leaf}
    with span(f"node {node_id}", attributes, redactor=ctx.redactor) as current:
        if content.tracing_content() and current.is_recording():
            current.set_attribute("taskdecomp.node.name", content.text(name, ctx.redactor))
        yield Node(current)


class Decomposition:
    """The span of one decomposition; :meth:`ended` records what it made."""

    def __init__(self, current: Span) -> None:
        self.span = current

    def ended(self, result: DecompositionResult) -> DecompositionResult:
        """Record ``result`` (nodes made, failed, why it stopped); return it."""
        current = self.span
        if current.is_recording():
            current.set_attribute("taskdecomp.decompose.created", len(result.created_tasks))
            current.set_attribute("taskdecomp.decompose.failed", len(result.failed_nodes))
            if result.stopped_reason:
                current.set_attribute("taskdecomp.decompose.stopped", result.stopped_reason)
        return result


@contextmanager
def decomposition(plan_id: int, mode: str, node_id: int | None) -> Iterator[Decomposition]:
    """The span of decomposing plan tree ``plan_id`` (``decompose <mode>``).

    Its model calls nest in it. ``node_id`` is the node split, in ``single_node`` mode.
    """
    attributes: dict[str, Any] = {"taskdecomp.plan.id": plan_id, "taskdecomp.decompose.mode": mode}
    if node_id is not None:
        attributes["taskdecomp.node.id"] = node_id
    with span(f"decompose {mode}", attributes) as current:
        yield Decomposition(current)
