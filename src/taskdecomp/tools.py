"""Tools and toolsets.

A tool is a plain Python function (sync or async). Its argument schema comes from its type
hints, through pydantic, so the planner sees the same schema the gateway enforces.
:func:`tool` adds a description, a timeout, a side-effect class, an isolation and retries
(a tool raises :class:`Retry` to say a call may be tried again).
:func:`load_toolset` reads a Python file or module: the functions in its ``TOOLS`` if it has
one, else every public top-level function with type hints; a module-level ``ISOLATION``
sets the isolation of every tool that does not choose its own.
"""

from __future__ import annotations

import inspect
import json
import math
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, overload

from pydantic import BaseModel, ValidationError

from taskdecomp.argmodels import (
    IDEMPOTENCY_PARAM,
    args_model,
    schema_text,
    validation_message,
)
from taskdecomp.errors import ConfigError, ToolsetError
from taskdecomp.schemacheck import Checker, SchemaMismatch, schema_checker

SideEffects = Literal["read_only", "idempotent", "unsafe"]
"""How a tool may be repeated: freely, with the same idempotency key, or at most once."""

Isolation = Literal["none", "process"]
"""Where a call runs: ``"none"`` (sync tools in a worker thread, async tools on the event
loop) or ``"process"`` (a worker process of its own, killed at the timeout or deadline)."""

ISOLATIONS: tuple[Isolation, ...] = ("none", "process")

DEFAULT_BACKOFF_S = 0.5
"""Seconds before a tool's first retry, unless it says otherwise; each retry doubles it."""

TOOL_OPTIONS_ATTR = "__taskdecomp_tool__"
"""The attribute :func:`tool` sets on a function: its :class:`ToolOptions`."""
F = TypeVar("F", bound=Callable[..., Any])


class Retry(Exception):
    """Raised by a tool: this call failed for a passing reason and may be tried again.

    A signal to the gateway, outside taskdecomp's error tree (:mod:`taskdecomp.errors`).
    When the tool allows retries (``@tool(retries=N)``, ``read_only`` and ``idempotent``
    tools only), the gateway calls it again after a backoff; otherwise, or once its retries
    are spent, the call ends with ``tool_error:<name>`` and this message.

    Args:
        message: why the call failed; it goes into the trace.
        after: seconds to wait before the next attempt (a server's ``Retry-After``), instead
            of the tool's backoff; ``None``: the backoff.

    Raises:
        ValueError: ``after`` is negative or not finite.
    """

    def __init__(self, message: str = "", *, after: float | None = None) -> None:
        if after is not None and not (math.isfinite(after) and after >= 0):
            raise ValueError(f"Retry(after=...) must be seconds >= 0, got {after!r}")
        super().__init__(message)
        self.message = message
        self.after = after


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolOptions:
    """What :func:`tool` attaches to a function."""

    description: str | None = None
    timeout: float | None = None
    side_effects: SideEffects = "read_only"
    needs_approval: bool = False
    isolation: Isolation | None = None
    """``None``: the toolset's ``ISOLATION``, else ``"none"``."""
    retries: int = 0
    """How many times a failed call may be tried again (see :class:`Retry`)."""
    backoff_s: float = DEFAULT_BACKOFF_S
    """Seconds before the first retry; doubled for each next one, with jitter."""


@overload
def tool(fn: F, /) -> F: ...
@overload
def tool(
    *,
    description: str | None = None,
    timeout: float | None = None,
    side_effects: SideEffects = "read_only",
    needs_approval: bool = False,
    isolation: Isolation | None = None,
    retries: int = 0,
    backoff_s: float = DEFAULT_BACKOFF_S,
) -> Callable[[F], F]: ...
def tool(
    fn: F | None = None,
    /,
    *,
    description: str | None = None,
    timeout: float | None = None,
    side_effects: SideEffects = "read_only",
    needs_approval: bool = False,
    isolation: Isolation | None = None,
    retries: int = 0,
    backoff_s: float = DEFAULT_BACKOFF_S,
) -> F | Callable[[F], F]:
    """Mark a function as a tool, optionally with options.

    Args:
        fn: the function, when used as a bare ``@tool``.
        description: shown to the planner; defaults to the docstring's first line.
        timeout: seconds before the call ends with ``tool_timeout:<name>``.
        side_effects: ``"read_only"`` (default), ``"idempotent"`` or ``"unsafe"``.
        needs_approval: pause the run for a human before every call of this tool
            (``awaiting_approval``), in every strategy.
        isolation: ``"process"`` runs every call in a worker process of its own, which is
            killed (SIGKILL) at the timeout or the run's deadline; a crash of that process
            is a ``tool_error``. The function must be defined at the top level of a module
            or toolset file, so the worker can import it. Default: the toolset's
            ``ISOLATION``, else ``"none"``.
        retries: how many times a call that raised :class:`Retry` or timed out is tried
            again (default 0), each attempt counted against ``max_tool_calls`` and bounded
            by the run's deadline. For ``read_only`` and ``idempotent`` tools only (an
            idempotent tool keeps its idempotency key across attempts).
        backoff_s: seconds before the first retry (default 0.5), doubled for each next one
            with jitter; a ``Retry(after=...)`` sets the wait itself.

    The function itself is returned unchanged, so it stays callable as before.

    Raises:
        ValueError: an option is out of range, or an ``unsafe`` tool asks for retries.
    """
    if side_effects not in ("read_only", "idempotent", "unsafe"):
        raise ValueError(
            f"side_effects must be 'read_only', 'idempotent' or 'unsafe', got {side_effects!r}"
        )
    if timeout is not None and timeout <= 0:
        raise ValueError(f"timeout must be positive seconds, got {timeout!r}")
    if isolation is not None and isolation not in ISOLATIONS:
        raise ValueError(f"isolation must be 'none' or 'process', got {isolation!r}")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be a whole number >= 0, got {retries!r}")
    if not (math.isfinite(backoff_s) and backoff_s >= 0):
        raise ValueError(f"backoff_s must be seconds >= 0, got {backoff_s!r}")
    options = ToolOptions(
        description=description,
        timeout=timeout,
        side_effects=side_effects,
        needs_approval=needs_approval,
        isolation=isolation,
        retries=retries,
        backoff_s=float(backoff_s),
    )

    def mark(func: F) -> F:
        problem = retry_problem(getattr(func, "__name__", repr(func)), side_effects, retries)
        if problem is not None:
            raise ValueError(problem)
        setattr(func, TOOL_OPTIONS_ATTR, options)
        return func

    return mark(fn) if fn is not None else mark


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolSpec:
    """A registered tool: the function plus what the engine needs to call it safely."""

    name: str
    fn: Callable[..., Any]
    description: str
    timeout: float | None
    side_effects: SideEffects
    args_model: type[BaseModel] | None = None
    """Validates a function's arguments; built from its type hints."""
    input_schema: Mapping[str, Any] | None = None
    """The argument schema a tool brings itself (an MCP server's ``inputSchema``, an OpenAI
    function definition's ``parameters``), checked with ``jsonschema``; ``None`` for a
    function, whose :attr:`args_model` checks them."""
    is_async: bool
    takes_idempotency_key: bool = False
    needs_approval: bool = False
    """Whether a human must approve each call before it is made."""
    isolation: Isolation = "none"
    """Where each call runs (see :data:`Isolation`)."""
    retries: int = 0
    """How many times a call that raised :class:`Retry` or timed out is tried again."""
    backoff_s: float = DEFAULT_BACKOFF_S
    """Seconds before the first retry; doubled for each next one, with jitter."""
    _checker: Checker | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        """Refuse retries for an ``unsafe`` tool and a tool without one argument schema.

        Raises:
            ToolsetError: an ``unsafe`` tool with retries; neither or both of ``args_model``
                and ``input_schema``; an ``input_schema`` that is not a valid JSON schema
                (or ``jsonschema`` is not installed).
        """
        problem = retry_problem(self.name, self.side_effects, self.retries)
        if problem is not None:
            raise ToolsetError(problem)
        if (self.args_model is None) == (self.input_schema is None):
            raise ToolsetError(
                f"tool {self.name!r} needs exactly one of args_model and input_schema"
            )
        if self.input_schema is not None and self._checker is None:
            try:
                checker = schema_checker(
                    self.input_schema, what=f"tool {self.name!r}'s argument schema", extra="tools"
                )
            except ConfigError as exc:
                raise ToolsetError(str(exc)) from None
            object.__setattr__(self, "_checker", checker)

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        isolation: Isolation | None = None,
    ) -> ToolSpec:
        """Build a spec from a function and its :func:`tool` options, if any.

        ``isolation`` is the toolset's default; the function's own option wins.

        Raises:
            ToolsetError: the type hints do not resolve, or a ``"process"`` tool cannot be
                imported by a worker process.
        """
        options: ToolOptions = getattr(fn, TOOL_OPTIONS_ATTR, ToolOptions())
        tool_name = name or fn.__name__
        doc = inspect.getdoc(fn) or ""
        chosen = options.isolation or isolation or "none"
        if chosen == "process":
            _check_importable(fn, tool_name)
        return cls(
            name=tool_name,
            fn=fn,
            description=options.description or (doc.splitlines()[0] if doc else tool_name),
            timeout=options.timeout,
            side_effects=options.side_effects,
            args_model=args_model(fn, tool_name),
            is_async=inspect.iscoroutinefunction(fn),
            takes_idempotency_key=IDEMPOTENCY_PARAM in inspect.signature(fn).parameters,
            needs_approval=options.needs_approval,
            isolation=chosen,
            retries=options.retries,
            backoff_s=options.backoff_s,
        )

    def check_args(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments a call passes to :attr:`fn`, once they match the schema.

        Raises:
            BadToolArgs: they do not; the message says which argument and why.
        """
        if self.args_model is None:
            assert self._checker is not None  # made in __post_init__
            try:
                self._checker(dict(args))
            except SchemaMismatch as exc:
                raise BadToolArgs(str(exc)) from None
            return dict(args)
        try:
            return self.args_model.model_validate(dict(args)).model_dump()
        except ValidationError as exc:
            raise BadToolArgs(validation_message(exc)) from None

    def args_schema(self) -> dict[str, Any]:
        """JSON schema of the arguments, as the planner sees it (a copy of its own)."""
        if self.args_model is None:
            return json.loads(json.dumps(self.input_schema))  # type: ignore[no-any-return]
        return json.loads(schema_text(self.args_model))  # type: ignore[no-any-return]

    def catalog_entry(self) -> dict[str, Any]:
        """Name, description and argument schema for the planner's tool catalog."""
        return {"name": self.name, "description": self.description, "args": self.args_schema()}


class BadToolArgs(ValueError):
    """A call's arguments do not match its tool's schema (``tool_bad_args:<name>``)."""


def retry_problem(name: str, side_effects: SideEffects, retries: int) -> str | None:
    """Why tool ``name`` may not have ``retries``, or ``None`` when it may."""
    if retries and side_effects == "unsafe":
        return (
            f"tool {name!r} is unsafe (run at most once), so it cannot have retries={retries}; "
            "drop retries, or declare side_effects='idempotent' if a repeat with the same "
            "idempotency key does no harm"
        )
    return None


def _check_importable(fn: Callable[..., Any], name: str) -> None:
    qualname = getattr(fn, "__qualname__", "")
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    if module is None or "<" in qualname:
        raise ToolsetError(
            f"tool {name!r} has isolation='process', so a worker process must import it, but "
            f"it is not a top-level function of a module ({qualname!r}); define it at the top "
            "level of a module or toolset file"
        )


class Toolset(Mapping[str, ToolSpec]):
    """Tools by name.

    Args:
        specs: the tools.
        source: where they were loaded from (a module name or a file's absolute path), so a
            stored run can load them again; ``None`` for tools given as objects.
        skipped: public functions of the source left out, with the reason (see
            :func:`load_toolset`).
    """

    def __init__(
        self,
        specs: Iterable[ToolSpec] = (),
        *,
        source: str | None = None,
        skipped: Mapping[str, str] | None = None,
    ) -> None:
        self.source = source
        self.skipped: Mapping[str, str] = dict(skipped or {})
        """Public functions of the source that are not tools, by name, with the reason."""
        self._specs: dict[str, ToolSpec] = {}
        for spec in specs:
            if spec.name in self._specs:
                raise ToolsetError(f"tool {spec.name!r} is defined twice")
            self._specs[spec.name] = spec

    @classmethod
    def from_functions(
        cls,
        functions: Iterable[Callable[..., Any] | ToolSpec],
        *,
        isolation: Isolation | None = None,
        source: str | None = None,
        skipped: Mapping[str, str] | None = None,
    ) -> Toolset:
        """A toolset of these tools, each named after its function or its own name.

        An item is a function, a :class:`ToolSpec`, a :class:`Toolset` or an object with a
        ``__taskdecomp_toolset__()`` method returning one (every tool of it), or a tool of
        another framework that :func:`taskdecomp.toolsets.frameworks.adapt` knows.
        ``isolation`` applies to the functions whose :func:`tool` options do not set one.

        Raises:
            ToolsetError: an item is none of these, or cannot be described.
        """
        return cls(
            (spec for item in functions for spec in _specs_of(item, isolation)),
            source=source,
            skipped=skipped,
        )

    def __getitem__(self, name: str) -> ToolSpec:
        return self._specs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def catalog(self, allowed: Iterable[str]) -> list[dict[str, Any]]:
        """Catalog entries of the allowed tools this toolset has, in definition order."""
        allow = set(allowed)
        return [spec.catalog_entry() for name, spec in self._specs.items() if name in allow]


def _specs_of(item: Any, isolation: Isolation | None) -> Iterable[ToolSpec]:
    if isinstance(item, ToolSpec):
        return (item,)
    if isinstance(item, Toolset):
        return item.values()
    provides = getattr(item, "__taskdecomp_toolset__", None)
    if provides is not None:
        return provides().values()  # type: ignore[no-any-return]
    from taskdecomp.toolsets.frameworks import adapt

    adapted = adapt(item)
    if adapted is not None:
        return (adapted,)
    if not callable(item):
        raise ToolsetError(
            f"{item!r} is not a tool: pass functions, ToolSpecs, toolsets, or tools of a "
            "framework taskdecomp reads (see docs/tools.md)"
        )
    return (ToolSpec.from_function(item, isolation=isolation),)


def load_toolset(source: str | Path) -> Toolset:
    """Load a toolset: a Python file or module, or any registered source (``scheme:...``).

    See :func:`taskdecomp.toolsets.load_toolset`.

    Raises:
        ToolsetError: it cannot be found, loaded, or holds no tool.
    """
    from taskdecomp.toolsets import load_toolset as load

    return load(source)
