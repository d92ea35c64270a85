"""Tools of other frameworks, read as tool specs (:class:`~taskdecomp.tools.ToolSpec`).

A tools list may hold, besides functions:

- a JSON-schema tool: the pair ``(definition, function)``, where ``definition`` is an OpenAI
  function definition (``{"type": "function", "function": {...}}`` or the bare
  ``{"name", "description", "parameters"}``) and ``function`` is called with the arguments
  as keywords (:func:`schema_tool`);
- a LangChain ``BaseTool`` (``@tool`` functions, ``StructuredTool``, subclasses): its
  ``args_schema`` model checks the arguments, or its JSON schema when it has no model; it is
  called with ``ainvoke`` when it has an async implementation, else ``invoke`` in a worker
  thread, as any sync tool;
- a pydantic-ai ``Tool``: its function schema's JSON schema, checked by its own validator.

A framework is never imported here: an object of one of its classes exists only once the
framework is imported, so the check reads ``sys.modules``, and ``import taskdecomp`` or a
toolset of functions loads neither. What these tools do cannot be known, so they are
``unsafe`` (run at most once; never repeated by a resume) unless :func:`schema_tool` or
:func:`framework_tool` says otherwise. A tool that needs a context the engine does not give
(a pydantic-ai ``RunContext``, a LangChain injected argument) is refused when it is read.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from taskdecomp.argmodels import IDEMPOTENCY_PARAM, undescribable, validation_message
from taskdecomp.errors import ToolsetError
from taskdecomp.schemacheck import SchemaMismatch
from taskdecomp.tools import (
    DEFAULT_BACKOFF_S,
    TOOL_OPTIONS_ATTR,
    SideEffects,
    ToolOptions,
    ToolSpec,
    tool,
)

FOREIGN_SIDE_EFFECTS: SideEffects = "unsafe"
"""The side-effect class of a tool of another framework unless told otherwise."""

_DEFAULTS = ToolOptions(side_effects=FOREIGN_SIDE_EFFECTS)

_DEFINITION_KEYS = frozenset({"name", "description", "parameters", "strict"})

__all__ = ["FOREIGN_SIDE_EFFECTS", "adapt", "framework_tool", "schema_tool"]


def adapt(item: Any) -> ToolSpec | None:
    """``item`` as a tool spec when it is a tool of a framework this module reads, else None.

    Raises:
        ToolsetError: it is one, but cannot be used: a malformed definition, a parameter
            with no JSON schema, a context the engine does not provide, or :func:`tool`
            options set on it (give them to :func:`schema_tool` or :func:`framework_tool`).
    """
    return _read(item, _DEFAULTS)


def schema_tool(
    definition: Mapping[str, Any],
    fn: Callable[..., Any],
    *,
    side_effects: SideEffects = FOREIGN_SIDE_EFFECTS,
    timeout: float | None = None,
    needs_approval: bool = False,
    retries: int = 0,
    backoff_s: float = DEFAULT_BACKOFF_S,
) -> ToolSpec:
    """A tool from an OpenAI function definition and the callable that does the work.

    Args:
        definition: ``{"type": "function", "function": {"name", "description",
            "parameters"}}`` or the bare ``{"name", "description", "parameters"}``;
            ``parameters`` is the JSON schema of the arguments (checked with ``jsonschema``,
            the ``tools`` extra, before every call).
        fn: called with the arguments as keywords, sync (in a worker thread) or async (an
            async function, or an object with an async ``__call__``). A parameter
            ``idempotency_key`` receives the step's key, as for any tool.
        side_effects: ``"unsafe"`` (the default: what it does is not known),
            ``"idempotent"`` or ``"read_only"``.
        timeout: seconds before a call ends with ``tool_timeout:<name>``.
        needs_approval: pause the run for a human before every call.
        retries: how many times a call that raised :class:`~taskdecomp.Retry` or timed out
            is tried again (not for ``unsafe`` tools).
        backoff_s: seconds before the first retry, doubled for each next one.

    Raises:
        ToolsetError: the definition is malformed, or ``jsonschema`` is not installed.
        ValueError: an option is out of range, as with :func:`~taskdecomp.tool`.
    """
    name, description, parameters = _definition(definition)
    options = _options(
        name,
        side_effects=side_effects,
        timeout=timeout,
        needs_approval=needs_approval,
        retries=retries,
        backoff_s=backoff_s,
    )
    return _schema_spec(name, description, parameters, fn, options)


def framework_tool(
    item: Any,
    *,
    name: str | None = None,
    description: str | None = None,
    side_effects: SideEffects = FOREIGN_SIDE_EFFECTS,
    timeout: float | None = None,
    needs_approval: bool = False,
    retries: int = 0,
    backoff_s: float = DEFAULT_BACKOFF_S,
) -> ToolSpec:
    """A tool of another framework, with the options :func:`~taskdecomp.tool` gives a function.

    ``framework_tool(search, side_effects="read_only", timeout=10)`` says what a LangChain
    or pydantic-ai tool ``search`` does, which taskdecomp cannot know (it is ``unsafe``
    without this).

    Args:
        item: a LangChain ``BaseTool``, a pydantic-ai ``Tool`` or a ``(definition, fn)`` pair.
        name: the name the planner sees, instead of the tool's own.
        description: the description the planner sees, instead of the tool's own.
        side_effects: ``"unsafe"`` (the default), ``"idempotent"`` or ``"read_only"``.
        timeout: seconds before a call ends with ``tool_timeout:<name>``.
        needs_approval: pause the run for a human before every call.
        retries: how many times a call that raised :class:`~taskdecomp.Retry` or timed out
            is tried again (not for ``unsafe`` tools).
        backoff_s: seconds before the first retry, doubled for each next one.

    Raises:
        ToolsetError: ``item`` is not a tool of a framework taskdecomp reads, or cannot be
            used (see :func:`adapt`).
        ValueError: an option is out of range, as with :func:`~taskdecomp.tool`.
    """
    options = _options(
        name or _own_name(item),
        description=description,
        side_effects=side_effects,
        timeout=timeout,
        needs_approval=needs_approval,
        retries=retries,
        backoff_s=backoff_s,
    )
    spec = _read(item, options, name=name)
    if spec is None:
        raise ToolsetError(
            f"{_shown(item)} is not a tool of a framework taskdecomp reads: give a LangChain "
            "BaseTool, a pydantic-ai Tool or a (definition, function) pair"
        )
    return spec


def _read(item: Any, options: ToolOptions, *, name: str | None = None) -> ToolSpec | None:
    """The spec of ``item`` if a reader knows it; ``None`` if none does."""
    if isinstance(item, Mapping) and ("parameters" in item or "function" in item):
        raise ToolsetError(
            f"{_shown(item)} is a function definition alone; a JSON-schema tool is the pair "
            "(definition, function), or taskdecomp.schema_tool(definition, function)"
        )
    if _is_pair(item):
        definition, fn = item
        _refuse_marks(fn, "the function of a (definition, function) pair", "schema_tool")
        tool_name, description, parameters = _definition(definition)
        return _schema_spec(name or tool_name, description, parameters, fn, options)
    for reader in (_langchain, _pydantic_ai):
        spec = reader(item, options, name)
        if spec is not None:
            return spec
    return None


def _own_name(item: Any) -> str:
    """The name ``item`` gives itself, for the messages of option checks."""
    if _is_pair(item):
        body = item[0].get("function", item[0])
        if isinstance(body, Mapping) and isinstance(body.get("name"), str):
            return str(body["name"])
    return str(getattr(item, "name", None) or "tool")


def _is_pair(item: Any) -> bool:
    return isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], Mapping)


# -- options ---------------------------------------------------------------------------------


def _options(name: str, **given: Any) -> ToolOptions:
    """Options checked by :func:`~taskdecomp.tool` itself, so the messages are the same."""

    def probe() -> None:
        """Carries the options; never called."""

    probe.__name__ = name
    tool(**given)(probe)
    options: ToolOptions = getattr(probe, TOOL_OPTIONS_ATTR)
    return options


def _refuse_marks(target: Any, what: str, instead: str) -> None:
    if getattr(target, TOOL_OPTIONS_ATTR, None) is not None:
        raise ToolsetError(
            f"@tool options on {what} are not read; give them to "
            f"taskdecomp.{instead}(..., side_effects=..., timeout=...) instead"
        )


def _spec(
    name: str,
    description: str,
    fn: Callable[..., Any],
    options: ToolOptions,
    *,
    timeout: float | None = None,
    needs_approval: bool = False,
    takes_idempotency_key: bool = False,
    **schema: Any,
) -> ToolSpec:
    """The spec of a foreign tool; ``schema``: ``args_model`` or ``input_schema`` (+ checker).

    ``options`` win over what the tool says of itself (``timeout``, ``needs_approval``).
    """
    return ToolSpec(
        name=name,
        fn=fn,
        description=options.description or description or name,
        timeout=options.timeout if options.timeout is not None else timeout,
        side_effects=options.side_effects,
        is_async=_is_async(fn),
        takes_idempotency_key=takes_idempotency_key,
        needs_approval=options.needs_approval or needs_approval,
        retries=options.retries,
        backoff_s=options.backoff_s,
        **schema,
    )


def _is_async(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` makes a coroutine (an async function, or an async ``__call__``)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def _shown(item: Any) -> str:
    text = repr(item)
    return text if len(text) <= 80 else f"{text[:77]}..."


# -- JSON-schema tools -----------------------------------------------------------------------


def _definition(definition: Any) -> tuple[str, str, Mapping[str, Any]]:
    """Name, description and parameters of an OpenAI function definition.

    Raises:
        ToolsetError: it is not one.
    """
    body = definition
    if isinstance(definition, Mapping) and definition.get("type") == "function":
        if set(definition) != {"type", "function"}:
            raise ToolsetError(
                f"function definition {_shown(definition)} must have only the keys "
                "'type' and 'function'"
            )
        body = definition["function"]
    if not isinstance(body, Mapping):
        raise ToolsetError(f"function definition {_shown(definition)} is not an object")
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise ToolsetError(f"function definition {_shown(definition)} has no 'name'")
    unknown = sorted(set(body) - _DEFINITION_KEYS)
    if unknown:
        raise ToolsetError(
            f"function definition {name!r} has unknown keys {unknown}; "
            f"known: {', '.join(sorted(_DEFINITION_KEYS))}"
        )
    description = body.get("description") or name
    parameters = body.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(description, str):
        raise ToolsetError(f"function definition {name!r}: 'description' must be a string")
    if not isinstance(parameters, Mapping) or parameters.get("type", "object") != "object":
        raise ToolsetError(
            f"function definition {name!r}: 'parameters' must be a JSON schema of an object "
            '({"type": "object", "properties": {...}})'
        )
    return name, description, parameters


def _schema_spec(
    name: str,
    description: str,
    parameters: Mapping[str, Any],
    fn: Callable[..., Any],
    options: ToolOptions,
) -> ToolSpec:
    if not callable(fn):
        raise ToolsetError(f"tool {name!r}: {_shown(fn)} is not callable")
    try:
        takes_key = IDEMPOTENCY_PARAM in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        takes_key = False
    return _spec(
        name, description, fn, options, input_schema=parameters, takes_idempotency_key=takes_key
    )


# -- LangChain -------------------------------------------------------------------------------


def _langchain(item: Any, options: ToolOptions, name: str | None) -> ToolSpec | None:
    module = sys.modules.get("langchain_core.tools.base")  # where BaseTool is defined
    if module is None or not isinstance(item, module.BaseTool):
        return None
    tool_name = name or item.name
    _refuse_marks(item, f"LangChain tool {tool_name!r}", "framework_tool")
    own = item.args_schema if item.args_schema is not None else item.get_input_schema()
    injected = [field for field in _fields(own) if field not in _fields(item.tool_call_schema)]
    if injected:
        raise ToolsetError(
            f"tool {tool_name!r}: parameter {injected[0]!r} is injected by LangChain (an "
            "InjectedToolArg, a tool call id, a graph state), a context taskdecomp does not "
            "provide; take it as an ordinary argument, or drop it"
        )
    schema: dict[str, Any]
    if isinstance(item.args_schema, type) and issubclass(item.args_schema, BaseModel):
        schema = {"args_model": _strict_model(item.args_schema, tool_name)}
    else:
        schema = {"input_schema": _json_schema(item.tool_call_schema, tool_name)}
    if _lc_is_async(item):

        async def call(**kwargs: Any) -> Any:
            return await item.ainvoke(kwargs)
    else:

        def call(**kwargs: Any) -> Any:  # type: ignore[misc]  # sync twin of the async one
            return item.invoke(kwargs)

    spec = _spec(tool_name, item.description, call, options, **schema)
    _check_describable(spec, item.args_schema)
    return spec


def _fields(schema: Any) -> list[str]:
    if isinstance(schema, Mapping):
        return list(schema.get("properties", {}))
    return list(getattr(schema, "model_fields", {}))


def _lc_is_async(item: Any) -> bool:
    """Whether the tool has an async implementation of its own.

    LangChain's default ``_arun`` runs the sync one in the event loop's default executor,
    whose threads keep the process alive: a sync tool runs in the gateway's thread instead,
    abandoned at the deadline like any other.
    """
    if getattr(item, "coroutine", None) is not None:  # StructuredTool and Tool
        return True
    defined_by = type(item)._arun.__module__
    return not defined_by.startswith("langchain_core.")


def _strict_model(model: type[BaseModel], name: str) -> type[BaseModel]:
    """``model``, refusing unknown arguments unless it says what to do with them."""
    if model.model_config.get("extra") is not None:
        return model
    strict: type[BaseModel] = type(
        f"{name}_args", (model,), {"model_config": ConfigDict(extra="forbid")}
    )
    return strict


def _json_schema(schema: Any, name: str) -> Mapping[str, Any]:
    if isinstance(schema, Mapping):
        return schema
    try:
        described: dict[str, Any] = schema.model_json_schema()
    except Exception as exc:  # pydantic raises several kinds, all meaning the same here
        raise ToolsetError(undescribable(name, _hints(schema))) from exc
    described.pop("title", None)
    return described


def _check_describable(spec: ToolSpec, model: Any) -> None:
    try:
        spec.args_schema()
    except Exception as exc:  # as in _json_schema
        raise ToolsetError(undescribable(spec.name, _hints(model))) from exc


def _hints(model: Any) -> dict[str, Any]:
    fields = getattr(model, "model_fields", {})
    return {field: info.annotation for field, info in fields.items()}


# -- pydantic-ai -----------------------------------------------------------------------------


def _pydantic_ai(item: Any, options: ToolOptions, name: str | None) -> ToolSpec | None:
    module = sys.modules.get("pydantic_ai.tools")
    if module is None or not isinstance(item, module.Tool):
        return None
    tool_name = name or item.name
    _refuse_marks(item, f"pydantic-ai tool {tool_name!r}", "framework_tool")
    if item.takes_ctx:
        first = next(iter(inspect.signature(item.function).parameters), "ctx")
        raise ToolsetError(
            f"tool {tool_name!r}: parameter {first!r} is a pydantic-ai RunContext, a context "
            "taskdecomp does not provide; write its function without it"
        )
    for hook in ("prepare", "args_validator"):
        if getattr(item, hook, None) is not None:
            raise ToolsetError(
                f"tool {tool_name!r}: its {hook} function takes a pydantic-ai RunContext, a "
                f"context taskdecomp does not provide; build the Tool without {hook}"
            )
    schema = item.function_schema
    return _spec(
        tool_name,
        item.description or "",
        _pydantic_ai_call(schema),
        options,
        input_schema=schema.json_schema,
        _checker=_validator_checker(schema.validator),
        timeout=getattr(item, "timeout", None),  # newer pydantic-ai versions have these
        needs_approval=getattr(item, "requires_approval", False),
    )


def _validator_checker(validator: Any) -> Callable[[Any], None] | None:
    """The tool's own validator as the gateway's check, so what passes is what it accepts.

    ``None`` (``jsonschema`` checks the schema) when it accepts anything: a tool made with
    ``Tool.from_schema`` has a JSON schema and no validator.
    """
    if validator.isinstance_python(object()):
        return None

    def check(args: Any) -> None:
        try:
            validator.validate_python(args)
        except ValidationError as exc:
            raise SchemaMismatch(validation_message(exc)) from None

    return check


def _pydantic_ai_call(schema: Any) -> Callable[..., Any]:
    """Call the tool's function with its validated arguments, as pydantic-ai would."""

    def arguments(kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        values = dict(schema.validator.validate_python(kwargs))
        args = [values.pop(field) for field in schema.positional_fields]
        if schema.var_positional_field:
            args.extend(values.pop(schema.var_positional_field))
        return args, values

    if schema.is_async:

        async def call(**kwargs: Any) -> Any:
            args, values = arguments(kwargs)
            return await schema.function(*args, **values)

        return call

    def call_sync(**kwargs: Any) -> Any:
        args, values = arguments(kwargs)
        return schema.function(*args, **values)

    return call_sync
