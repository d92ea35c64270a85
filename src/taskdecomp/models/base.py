"""The model protocol: one async ``complete`` call per request.

Providers convert their SDK's failures into :class:`~taskdecomp.errors.ModelError` (or
:class:`~taskdecomp.errors.ModelTimeoutError`) at this boundary; the engine turns those into
stop reasons.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypedDict, runtime_checkable

from taskdecomp.stops import LlmPhase

Stage = Literal["loading", "generating"]
"""How far a model call is: its model file is loading, or it is writing its answer."""

Progress = Callable[[Stage, int], None]
"""Told how a call goes: the stage and the tokens written so far. A provider may call it
from any thread, as often as it likes; the caller throttles and forwards it."""


TextSink = Callable[[str], None]
"""Hears the pieces of an answer as a streaming provider receives them, in order."""


class Message(TypedDict):
    """A chat message."""

    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelRequest:
    """What the engine asks a model."""

    phase: LlmPhase
    """Which call this is (``plan``, ``finalize``)."""
    messages: tuple[Message, ...]
    json_schema: dict[str, Any] | None = None
    """When set, the answer must be JSON matching this schema (structured output)."""
    schema_name: str = "response"
    """A name for ``json_schema`` (OpenAI's ``response_format`` wants one)."""
    goal: str | None = None
    """The words the answer's literal values come from (the run's goal, with a step's
    instruction for the executor). A provider that constrains answers by grammar (the
    embedded model) limits arguments to the values it finds there, in the forms the
    schema asks for; others ignore it."""
    payload: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    """The JSON payload the call's user message was made from (the tool catalog, the
    history, the plan, ...), for a prompt-building function (:mod:`taskdecomp.prompting`)."""
    progress: Progress | None = field(default=None, compare=False, repr=False)
    """Where a provider that can say how far it is (a streaming one) reports it."""
    on_text: TextSink | None = field(default=None, compare=False, repr=False)
    """Where a provider that streams sends each piece of the answer as it comes (from any
    thread); the whole answer is still returned as the response."""

    def text(self) -> str:
        """All message contents, joined by newlines (what scripted rules match against)."""
        return "\n".join(message["content"] for message in self.messages)


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelResponse:
    """What a model answered."""

    text: str
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = 0.0
    """What the call cost in USD; ``None`` when the model's price is unknown."""
    finish_reason: str | None = "stop"
    """``length`` means the answer was cut off."""
    estimated: bool = False
    """The token counts are estimated (the server sent no usage), not the server's."""


@runtime_checkable
class Model(Protocol):
    """Anything that can answer a :class:`ModelRequest`."""

    @property
    def name(self) -> str:
        """The model string it was made from, e.g. ``scripted:plan.json``."""
        ...

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer one request.

        Raises:
            ModelError: the call failed; ``ModelTimeoutError`` when it timed out.
        """
        ...


def streams(model: object) -> bool:
    """Whether ``model`` sends the pieces of its answers to ``ModelRequest.on_text``."""
    return bool(getattr(model, "streams", False))


@runtime_checkable
class PricedModel(Protocol):
    """A model that can say what a call will cost before it is made."""

    def estimate_cost(self, tokens_in: int) -> float | None:
        """The USD cost of sending ``tokens_in`` prompt tokens (output not included).

        ``None`` when the model's price is unknown: a cost budget then cannot be kept.
        """
        ...


def estimate_tokens(text: str) -> int:
    """A rough token count (4 characters a token) for budgets before a call."""
    return max(1, (len(text) + 3) // 4)
