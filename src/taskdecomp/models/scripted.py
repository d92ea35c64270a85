"""The scripted model: answers from a JSON file, for tests, examples and benchmarks.

``scripted:PATH`` reads one of:

- a JSON list of responses, returned in call order;
- ``{"responses": [...]}``, the same;
- ``{"rules": [{"match": "<regex>", "response": ...}], "default": ...}``: the first rule
  whose regex matches the request's messages answers, so concurrent calls stay
  deterministic; ``default`` answers when none matches. A rule may add ``"phase"`` (one
  of ``plan``, ``execute``, ``decompose``, ``replan``, ``rollup``, ``finalize``,
  ``chat``), matched exactly: it then answers only calls of that phase, so one script can
  answer different roles about the same text (the executor, the decomposer and the
  roll-up of one tree node).

Either object may add ``"latency_ms"``: every answer waits that long before it starts, and
``"stream_ms"``: every answer then arrives in pieces spread over that long (sent to
``ModelRequest.on_text`` when the caller listens; the answer is returned after the last one,
as a streaming server's would be). A string response is
the raw completion text; an object or list is sent as JSON; ``{"error": "timeout"}`` and
``{"error": "empty"}`` simulate those failures, and ``{"error": "<kind>"}`` any other.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from taskdecomp.errors import ModelError, ModelNotFoundError, ModelTimeoutError
from taskdecomp.models.base import ModelRequest, ModelResponse, estimate_tokens
from taskdecomp.stops import LlmPhase

Rule = tuple[str, Any] | tuple[str, Any, LlmPhase | None]
"""A rule: a regex, its answer, and optionally the only phase it answers."""


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")
    match: str
    response: Any
    phase: LlmPhase | None = None


class _Script(BaseModel):
    model_config = ConfigDict(extra="forbid")
    responses: list[Any] | None = None
    rules: list[_Rule] | None = None
    default: Any = None
    latency_ms: float = Field(default=0, ge=0)
    stream_ms: float = Field(default=0, ge=0)


_NO_DEFAULT = object()
_PIECE = 4
"""Characters a streamed piece carries (about a token)."""


class ScriptedModel:
    """A model that answers from a script instead of a network.

    Args:
        responses: answers in call order.
        rules: ``(regex, response)`` or ``(regex, response, phase)``; the first match answers
            (a rule with a phase answers only calls of that phase).
        default: the answer when no rule matches (omit to fail instead).
        latency_ms: how long every answer waits before it starts.
        stream_ms: how long every answer then takes to arrive, in pieces.
        name: the model string it came from.
    """

    def __init__(
        self,
        *,
        responses: Sequence[Any] | None = None,
        rules: Sequence[Rule] | None = None,
        default: Any = _NO_DEFAULT,
        latency_ms: float = 0,
        stream_ms: float = 0,
        name: str = "scripted",
    ) -> None:
        if (responses is None) == (rules is None):
            raise ValueError("give exactly one of responses or rules")
        self._responses = list(responses) if responses is not None else None
        self._rules = [
            (re.compile(rule[0], re.DOTALL), rule[1], rule[2] if len(rule) > 2 else None)
            for rule in rules or ()
        ]
        self._default = default
        self._latency = latency_ms / 1000
        self._stream = stream_ms / 1000
        self._name = name
        self.calls: list[ModelRequest] = []
        """Every request received, in order (handy in tests)."""

    @property
    def name(self) -> str:
        """The model string."""
        return self._name

    @property
    def streams(self) -> bool:
        """Whether answers arrive in pieces (``stream_ms``)."""
        return self._stream > 0

    @property
    def in_order(self) -> bool:
        """Whether it answers in call order (a list of responses), not by rules."""
        return self._responses is not None

    def skip(self, calls: int) -> None:
        """Drop the answers of the first ``calls`` calls: a resumed run goes on from there.

        A list script answers by position, so a run continued from the store (``resume``,
        ``approve``) must not hear the first answers again. Rules answer by content and
        need no skipping.
        """
        if self._responses is not None:
            del self._responses[:calls]

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        """Load a script file.

        Raises:
            ModelNotFoundError: the file is missing, not JSON, or not a script.
        """
        name = f"scripted:{Path(path).expanduser().absolute()}"  # resumable from any directory
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise ModelNotFoundError(f"script file {str(path)!r} does not exist") from exc
        except (OSError, ValueError) as exc:
            raise ModelNotFoundError(f"script file {str(path)!r} is not JSON: {exc}") from exc
        if isinstance(data, list):
            return cls(responses=data, name=name)
        try:
            script = _Script.model_validate(data)
            if (script.responses is None) == (script.rules is None):
                raise ValueError("give exactly one of 'responses' or 'rules'")
            rules: list[Rule] = [(r.match, r.response, r.phase) for r in script.rules or []]
            for rule in rules:
                re.compile(rule[0])
        except (ValidationError, ValueError, re.error) as exc:
            raise ModelNotFoundError(
                f"script file {str(path)!r} is not a valid script: {exc}"
            ) from exc
        default = script.default if "default" in data else _NO_DEFAULT
        latency, stream = script.latency_ms, script.stream_ms
        if script.responses is not None:
            return cls(responses=script.responses, latency_ms=latency, stream_ms=stream, name=name)
        return cls(rules=rules, default=default, latency_ms=latency, stream_ms=stream, name=name)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer from the script."""
        self.calls.append(request)
        answer = self._next_answer(request)  # taken at the call, as a run counts its calls
        if self._latency:
            await asyncio.sleep(self._latency)
        if isinstance(answer, dict) and set(answer) == {"error"}:
            kind = str(answer["error"])
            if kind == "timeout":
                raise ModelTimeoutError("scripted timeout")
            if kind != "empty":
                raise ModelError(kind, f"scripted error {kind!r}")
            answer = ""
        text = answer if isinstance(answer, str) else json.dumps(answer)
        await self._send(text, request)
        return ModelResponse(
            text=text,
            tokens_in=estimate_tokens(request.text()),
            tokens_out=estimate_tokens(text) if text else 0,
        )

    async def _send(self, text: str, request: ModelRequest) -> None:
        """Spend ``stream_ms`` on the answer, in pieces of about a token each."""
        if not self._stream:
            return
        pieces = [text[i : i + _PIECE] for i in range(0, len(text), _PIECE)] or [""]
        loop = asyncio.get_running_loop()
        start, pause = loop.time(), self._stream / len(pieces)
        for number, piece in enumerate(pieces, start=1):
            await asyncio.sleep(max(0.0, start + number * pause - loop.time()))  # no drift
            if request.on_text is not None and piece:
                request.on_text(piece)

    def _next_answer(self, request: ModelRequest) -> Any:
        if self._responses is not None:
            if not self._responses:
                raise ModelError(
                    "script_exhausted",
                    f"{self._name}: no scripted answer left for call {len(self.calls)} "
                    f"({request.phase}); add one to the script",
                )
            return self._responses.pop(0)
        text = request.text()
        for pattern, response, phase in self._rules:
            if (phase is None or phase == request.phase) and pattern.search(text):
                return response
        if self._default is _NO_DEFAULT:
            raise ModelError(
                "script_no_match",
                f"{self._name}: no rule matches the {request.phase} request and there is "
                "no 'default'",
            )
        return self._default
