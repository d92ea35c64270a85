"""A prompt-building function per role: the messages of a role's calls, built by the caller.

``run(..., prompts={"planner": fn})`` hands every call of that role (see
:mod:`taskdecomp.roles`) to ``fn``, which receives a :class:`PromptInput` (the role, the
phase, the goal, the messages taskdecomp would send and the JSON payload the strategy
built: tool catalog, history, plan, ...) and returns the messages to send instead. It
changes what the model reads, never what the answer must be: the answer passes the same
schema and policy boundary whatever the prompt says.

A call that is repaired (:mod:`taskdecomp.repairs`) keeps the function's messages and adds
the refused answer and the rule it broke after them; the function is not asked again.
A function that raises, or returns something other than a non-empty list of chat
messages, stops the run with ``llm_error:prompt_function`` (its ``llm_phase`` is the
call's, its message names the role and the error). Functions are not stored with a run:
pass them again to :func:`~taskdecomp.engine.resume`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from taskdecomp.errors import ConfigError
from taskdecomp.models.base import Message, ModelRequest
from taskdecomp.roles import ROLES, Role, role_of
from taskdecomp.stops import LlmPhase, StopRun, with_detail

PROMPT_FUNCTION_FAILED = with_detail("llm_error", "prompt_function")
"""The stop reason of a prompt function that raised or returned no messages."""

REMEMBERED = 64
"""Built prompts kept so a repair of one of them reuses it (more than ever run at once)."""

_MESSAGE_ROLES = ("system", "user", "assistant")


@dataclass(frozen=True, kw_only=True, slots=True)
class PromptInput:
    """What a prompt function builds a call's messages from."""

    role: Role
    """The role of the call (``planner``, ``executor``, ...)."""
    phase: LlmPhase
    """The call's phase (``plan``, ``decompose``, ``execute``, ...)."""
    goal: str
    """The run's goal."""
    messages: tuple[Message, ...]
    """The messages taskdecomp would send: its system prompt, then the payload as JSON."""
    payload: Mapping[str, Any] = field(default_factory=dict)
    """The JSON payload the strategy built for the call (``available_tools``, ``goal``,
    ``history``, ``executed_steps``, ...); empty when the strategy gave none."""
    json_schema: Mapping[str, Any] | None = None
    """The schema the answer must match, when the call has one."""


PromptFunction = Callable[[PromptInput], Sequence[Message]]
"""Builds the messages of a call from its :class:`PromptInput`."""


class Prompts:
    """The prompt functions of a run, applied to each call of their role."""

    def __init__(self, functions: Mapping[Role, PromptFunction]) -> None:
        self._functions = dict(functions)
        self._built: deque[tuple[ModelRequest, tuple[Message, ...]]] = deque(maxlen=REMEMBERED)

    @classmethod
    def of(cls, given: Mapping[str, PromptFunction] | None) -> Prompts | None:
        """The functions ``given``, by role; ``None`` when there are none.

        Raises:
            ConfigError: a key is not a role, or a value is not callable.
        """
        if not given:
            return None
        for key, fn in given.items():
            if key not in ROLES:
                raise ConfigError(
                    f"prompts has {key!r}, which is not a role; give functions for: "
                    f"{', '.join(ROLES)}"
                )
            if not callable(fn):
                raise ConfigError(
                    f"prompts[{key!r}] is {fn!r}, not a function; give a function that "
                    "takes a PromptInput and returns a list of messages"
                )
        return cls({role: given[role] for role in ROLES if role in given})

    def apply(self, request: ModelRequest, goal: str) -> ModelRequest:
        """``request`` with its messages built by its role's function, if it has one.

        Raises:
            StopRun: ``llm_error:prompt_function``: the function raised or returned no
                messages.
        """
        role = role_of(request.phase)
        fn = self._functions.get(role) if role is not None else None
        if fn is None or role is None:
            return request
        for base, built in reversed(self._built):
            if _continues(request, base):
                return replace(request, messages=built + request.messages[len(base.messages) :])
        built = _call(fn, role, request, goal)
        self._built.append((request, built))
        return replace(request, messages=built)


def _continues(request: ModelRequest, base: ModelRequest) -> bool:
    """Whether ``request`` is ``base`` with more turns after it (a repair of it)."""
    n = len(base.messages)
    return (
        request.payload is base.payload
        and request.payload is not None
        and len(request.messages) > n
        and request.messages[:n] == base.messages
    )


def _call(fn: PromptFunction, role: Role, request: ModelRequest, goal: str) -> tuple[Message, ...]:
    """What ``fn`` builds for ``request``, checked.

    Raises:
        StopRun: ``llm_error:prompt_function``.
    """
    given = PromptInput(
        role=role,
        phase=request.phase,
        goal=goal,
        messages=request.messages,
        payload=request.payload if request.payload is not None else {},
        json_schema=request.json_schema,
    )
    try:
        messages = fn(given)
    except Exception as exc:  # the caller's code: any failure stops the run, named
        raise _failed(request, f"the {role} prompt function raised {exc!r}") from exc
    return _checked(messages, request, role)


def _checked(messages: object, request: ModelRequest, role: Role) -> tuple[Message, ...]:
    """``messages`` as chat messages.

    Raises:
        StopRun: ``llm_error:prompt_function``: they are not a non-empty list of
            ``{"role", "content"}`` messages.
    """
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence) or not messages:
        raise _failed(
            request, f"the {role} prompt function returned {_short(messages)}, not a list of "
            "messages; return [{'role': 'system' | 'user' | 'assistant', 'content': str}, ...]",
        )  # fmt: skip
    checked: list[Message] = []
    for message in messages:
        if (
            not isinstance(message, Mapping)
            or message.get("role") not in _MESSAGE_ROLES
            or not isinstance(message.get("content"), str)
        ):
            raise _failed(
                request, f"the {role} prompt function returned the message {_short(message)}; "
                f"a message is {{'role': one of {', '.join(_MESSAGE_ROLES)}, 'content': str}}",
            )  # fmt: skip
        checked.append({"role": message["role"], "content": message["content"]})
    return tuple(checked)


def _failed(request: ModelRequest, message: str) -> StopRun:
    return StopRun(PROMPT_FUNCTION_FAILED, llm_phase=request.phase, message=message)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."
