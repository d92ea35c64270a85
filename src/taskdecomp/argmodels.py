"""Argument models: what a Python function's type hints say a call may pass.

A tool's arguments are checked by a pydantic model built from its signature, and the
planner sees that model's JSON schema. Both are made once: a model per shape of function
(a toolset file loaded again per run reuses its functions' models), a schema per model.
A parameter pydantic cannot describe is refused in one line naming it.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Literal, get_args, get_origin, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from taskdecomp.errors import ToolsetError

IDEMPOTENCY_PARAM = "idempotency_key"
"""A parameter with this name receives the run's key for the step; the planner never sees it."""

TOOLSET_MODULE_PREFIX = "taskdecomp_toolset_"
"""Module names given to toolsets loaded from a file (they are not importable by name)."""


def validation_message(exc: ValidationError) -> str:
    """Pydantic's errors as one line: where, and what is wrong."""
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(p) for p in error["loc"]) or "(arguments)"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


_SCHEMAS: weakref.WeakKeyDictionary[type[BaseModel], str] = weakref.WeakKeyDictionary()


def schema_text(args_model: type[BaseModel]) -> str:
    """An argument model's JSON schema, made once while the model lives.

    Pydantic takes about 0.1 ms a tool, which every planner call paid for every tool. Kept
    by a weak key: a toolset built for one run does not outlive it here.
    """
    text = _SCHEMAS.get(args_model)
    if text is None:
        schema = args_model.model_json_schema()
        schema.pop("title", None)
        text = _SCHEMAS[args_model] = json.dumps(schema)
    return text


def args_model(fn: Callable[..., Any], name: str) -> type[BaseModel]:
    """The model that checks the arguments of ``fn``, tool ``name``; made once per shape.

    ``idempotency_key`` and ``*args`` are left out; ``**kwargs`` lets unknown names pass.

    Raises:
        ToolsetError: the hints do not resolve, a parameter is positional-only, or pydantic
            cannot describe a parameter's type as JSON schema.
    """
    try:
        hints = get_type_hints(fn, include_extras=True)  # keep Annotated[..., Field(...)]
    except Exception as exc:  # a forward reference that does not resolve, etc.
        raise ToolsetError(f"tool {name!r}: cannot read its type hints: {exc}") from exc
    fields: dict[str, Any] = {}
    extra: Literal["forbid", "allow"] = "forbid"
    for param in inspect.signature(fn).parameters.values():
        if param.kind is param.VAR_KEYWORD:
            extra = "allow"
            continue
        if param.kind is param.VAR_POSITIONAL or param.name == IDEMPOTENCY_PARAM:
            continue
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolsetError(
                f"tool {name!r}: positional-only parameter {param.name!r} cannot be "
                "passed by name; make it a regular parameter"
            )
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hints.get(param.name, Any), default)
    key = _model_key(name, extra, fields)
    made = _ARGS_MODELS.get(key) if key is not None else None
    if made is not None:
        return made
    from pydantic import PydanticUserError

    try:
        model: type[BaseModel] = create_model(
            f"{name}_args", __config__=ConfigDict(extra=extra), **fields
        )
        schema_text(model)  # a type pydantic validates but cannot describe fails only here
    except (PydanticUserError, TypeError) as exc:
        hints = {param: hint for param, (hint, _) in fields.items()}
        raise ToolsetError(undescribable(name, hints)) from exc
    if key is not None:
        if len(_ARGS_MODELS) >= ARGS_MODELS_KEPT:
            oldest = next(iter(_ARGS_MODELS), None)  # the oldest
            if oldest is not None:  # another thread may have emptied it meanwhile
                _ARGS_MODELS.pop(oldest, None)
        _ARGS_MODELS[key] = model
    return model


ARGS_MODELS_KEPT = 512
"""How many argument models :func:`args_model` keeps for functions of the same shape."""

_ARGS_MODELS: dict[tuple[Any, ...], type[BaseModel]] = {}


def _model_key(
    name: str, extra: str, fields: Mapping[str, tuple[Any, Any]]
) -> tuple[Any, ...] | None:
    """What an argument model is made of, or ``None`` when it is not to be kept.

    A toolset file loaded again (a run given its path) has new functions of the same
    names, types and defaults: their model is made once, not again per run (pydantic takes
    a quarter of a millisecond a tool). A type or value defined in the file is new on each
    load, so its tools' models are not kept: they would never be found again, and each
    would keep that load's module alive. The hints' and defaults' ``repr`` is part of the
    key, since equal is not the same (``int | float`` and ``float | int``, ``(1, 2)`` and
    ``(1.0, 2.0)``).
    """
    if any(_per_load(hint) or _per_load(default) for hint, default in fields.values()):
        return None
    try:
        key = (
            name,
            extra,
            tuple((p, h, repr(h), type(d), d, repr(d)) for p, (h, d) in fields.items()),
        )
        hash(key)
    except Exception:  # an unhashable default or type hint, a repr that fails
        return None
    return key


_WALK_DEPTH = 6
"""How deep :func:`_per_load` looks into a hint or default before giving up (not kept)."""

_WALK_WIDTH = 32
"""How many parts of a hint or default :func:`_per_load` looks at before giving up."""


def _per_load(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` (a type hint or a default) holds something a toolset file defines.

    Looks into generics, unions, ``Annotated`` metadata (a validator function, a
    :class:`~pydantic.fields.FieldInfo`), containers and dataclasses; ``True`` as well when
    ``value`` is too deep or wide to tell.
    """
    if depth > _WALK_DEPTH:
        return True
    try:
        module = getattr(value, "__module__", None)
    except Exception:  # an object whose attributes fail: not to be kept
        return True
    if isinstance(module, str) and module.startswith(TOOLSET_MODULE_PREFIX):
        return True
    parts = _parts(value)
    if len(parts) > _WALK_WIDTH:
        return True
    return any(_per_load(part, depth + 1) for part in parts)


def _parts(value: Any) -> tuple[Any, ...]:
    """What ``value`` is made of, as far as :func:`_per_load` looks."""
    from pydantic.fields import FieldInfo

    if isinstance(value, str | bytes | int | float | bool | type(None)):
        return ()
    if args := get_args(value):
        return (get_origin(value), *args)
    if isinstance(value, tuple | list | set | frozenset):
        return tuple(value)
    if isinstance(value, dict):
        return (*value.keys(), *value.values())
    if isinstance(value, FieldInfo):
        return (value.default, value.default_factory, *value.metadata)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return tuple(getattr(value, f.name, None) for f in dataclasses.fields(value))
    return ()


def undescribable(name: str, hints: Mapping[str, Any]) -> str:
    """Why tool ``name`` has no argument schema: the first of ``hints`` with no JSON schema.

    Args:
        name: the tool.
        hints: its parameters' types, by parameter name.
    """
    from pydantic import TypeAdapter

    for param, hint in hints.items():
        try:
            TypeAdapter(hint).json_schema()
        except Exception:  # pydantic raises several kinds, all meaning the same here
            shown = hint.__qualname__ if isinstance(hint, type) else repr(hint)
            return (
                f"tool {name!r}: parameter {param!r} has type {shown}, which pydantic cannot "
                "describe as JSON schema; use JSON types (str, int, float, bool, list, dict, "
                "a pydantic model or a dataclass of them)"
            )
    return f"tool {name!r}: pydantic cannot describe its arguments as JSON schema"
