"""The combine call: the run's answer, written from the goal and the history of its steps.

:func:`combine` makes the one model call (no tools) that writes a run's answer:

- when the model streams (:func:`~taskdecomp.models.base.streams`), each piece of the
  answer is emitted as an :class:`~taskdecomp.events.AnswerDelta` as it comes;
- with an answer type (:mod:`taskdecomp.answertype`), the call runs under its JSON schema
  (the provider picks its best structured-output mode), the first JSON value of the answer
  is parsed strictly and checked against the type, and an answer that fails is repaired
  like a plan (:func:`~taskdecomp.repairs.ask_checked`) or stops the run with
  ``invalid_answer:<rule>``.

A strategy whose answer comes from elsewhere (``replan``'s replanner, ``tree``'s root
roll-up) gets its typed answer from :func:`typed`: one more combine call, under the schema,
that restates the answer the strategy reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from taskdecomp import redact, stops
from taskdecomp.answertype import AnswerMismatch, AnswerType
from taskdecomp.events import AnswerDelta
from taskdecomp.models.base import Model, ModelRequest, ModelResponse, streams
from taskdecomp.models.outputs import extract_json
from taskdecomp.policy import parse_model_json
from taskdecomp.prompts import render
from taskdecomp.repairs import ask_checked
from taskdecomp.stops import StopRun, with_detail

if TYPE_CHECKING:
    from taskdecomp.runtime import RunContext
    from taskdecomp.strategies.base import Outcome, Phases

TYPED_NOTE = (
    "Give the answer as one JSON value that matches the answer schema, with the facts in "
    "its fields."
)
"""Added to the combiner's prompt when the answer has a type."""

DRAFT_NOTE = "draft_answer is the answer the run reached: restate it in that form."
"""Added when a typed combine call restates another call's answer (:func:`typed`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Answer:
    """What the combine call answered."""

    text: str
    """The answer as text (with an answer type: its JSON text)."""
    output: Any = None
    """The typed answer (see :attr:`~taskdecomp.run.RunResult.output`), or ``None``."""


async def combine(
    ctx: RunContext,
    model: Model | None,
    answer_type: AnswerType | None,
    *,
    draft: str | None = None,
) -> Answer:
    """Write the run's answer from its goal and history.

    Args:
        ctx: the run.
        model: the combine call's own model; ``None``: the run's.
        answer_type: the type the answer must have, if any.
        draft: an answer the run already reached, to restate under ``answer_type``.

    Raises:
        StopRun: what :meth:`RunContext.ask` raises, or ``invalid_answer:<rule>`` when a
            typed answer still fails once the repairs are spent.
    """
    request = _request(ctx, answer_type, draft)
    deltas = _Deltas(ctx) if streams(model or ctx.model) else None
    if deltas is not None:
        request = replace(request, on_text=deltas)
    if answer_type is None:
        try:
            response = await ctx.ask(request, model=model)
        finally:
            if deltas is not None:
                deltas.end()
        return Answer(text=response.text.strip())

    def check(response: ModelResponse) -> Answer:
        if deltas is not None:
            deltas.end()
        try:
            return _typed(ctx, answer_type, response)
        except StopRun:
            if deltas is not None:
                deltas.attempt += 1  # a repaired answer's pieces start over
            raise

    return await ask_checked(ctx, request, check, model=model, stream_repairs=True)


def typed(phases: Phases, answer_type: AnswerType, model: Model | None) -> Phases:
    """``phases``, with the answer they reach restated under ``answer_type`` at the end.

    For strategies without a combine call of their own: a successful run's answer goes
    through one more combine call (:func:`combine` with ``draft``), which types it.
    """

    async def typed_phases(ctx: RunContext, outcome: Outcome) -> None:
        await phases(ctx, outcome)
        if outcome.reason == stops.SUCCESS and outcome.answer is not None:
            answer = await combine(ctx, model, answer_type, draft=outcome.answer)
            outcome.answer, outcome.output = answer.text, answer.output

    return typed_phases


def _request(ctx: RunContext, answer_type: AnswerType | None, draft: str | None) -> ModelRequest:
    history = sorted(ctx.history, key=lambda entry: entry.step_no)
    payload: dict[str, Any] = {"goal": ctx.goal, "history": [e.to_dict() for e in history]}
    system = render("combiner")
    if draft is not None:
        payload["draft_answer"] = draft
        system = f"{system}\n{DRAFT_NOTE}"
    if answer_type is not None:
        system = f"{system}\n{TYPED_NOTE}"
    return ModelRequest(
        phase="finalize",
        messages=(
            {"role": "system", "content": system},
            {"role": "user", "content": json.dumps(payload, ensure_ascii=True)},
        ),
        json_schema=answer_type.schema if answer_type is not None else None,
        schema_name="answer",
        payload=payload,
    )


def _typed(ctx: RunContext, answer_type: AnswerType, response: ModelResponse) -> Answer:
    """The typed answer in ``response``.

    Raises:
        StopRun: ``invalid_answer:truncated``, ``:non_json`` or ``:schema``.
    """
    if response.finish_reason == "length":
        raise _invalid("truncated", "the model hit its output limit; its answer was cut off")
    text = extract_json(response.text, answer_type.schema).strip()
    try:
        value = parse_model_json(text)
    except StopRun as exc:
        raise _invalid("non_json", exc.message) from None
    value = ctx.redactor.value(value)  # a pydantic output is not looked into later
    try:
        output = answer_type.check(value)
    except AnswerMismatch as exc:
        raise _invalid("schema", str(exc)) from None
    return Answer(text=text, output=output)


def _invalid(rule: str, message: str) -> StopRun:
    return StopRun(with_detail("invalid_answer", rule), llm_phase="finalize", message=message)


class _Deltas:
    """Emits each piece of a streamed answer as an ``AnswerDelta``, from any thread.

    Pieces pass the run's redactor as one text, so a secret split between two pieces is
    replaced too; :meth:`end` sends what was held back once the answer is complete.
    """

    def __init__(self, ctx: RunContext) -> None:
        self._ctx = ctx
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._lock = threading.Lock()
        self._stream = redact.StreamRedactor(ctx.redactor)
        self.attempt = 1

    def __call__(self, piece: str) -> None:
        with self._lock:
            self._emit(self._stream.feed(piece))

    def end(self) -> None:
        """The answer is complete: send the rest of it."""
        with self._lock:
            self._emit(self._stream.flush())

    def _emit(self, text: str) -> None:
        if not text:
            return
        event = AnswerDelta(run_id=self._ctx.run_id, text=text, attempt=self.attempt)
        if threading.get_ident() == self._thread:
            self._ctx.events.emit(event)  # in order, before the call returns
            return
        with contextlib.suppress(RuntimeError):  # the run is over and its loop closed
            self._loop.call_soon_threadsafe(self._ctx.events.emit, event)
