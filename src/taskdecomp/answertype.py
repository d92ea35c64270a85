"""The type a run's answer must have: a pydantic model class, or a JSON schema.

:class:`AnswerType` holds the JSON schema the combine call runs under (the model's own
schema for a pydantic class) and checks a parsed answer against it:

- a pydantic model class is validated with pydantic (JSON mode: an ISO date string is a
  ``date``), and the run's ``output`` is an instance of it;
- a JSON schema (a ``dict``) is validated with the ``jsonschema`` package, every keyword of
  its draft, and the run's ``output`` is the JSON value. ``jsonschema`` is an optional extra
  (``pip install 'taskdecomp[answers]'``): a partial validator of our own would accept
  answers a schema keyword it ignored forbids, so without the package a JSON-schema answer
  type is refused before the run starts, with how to install it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from taskdecomp.errors import ConfigError
from taskdecomp.schemacheck import SchemaMismatch, schema_checker


class AnswerMismatch(ValueError):
    """A parsed answer does not match the answer type; the message says where and why."""


Check = Callable[[Any], Any]
"""Turns a parsed answer into the run's output, or raises :class:`AnswerMismatch`."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AnswerType:
    """The schema an answer must match, and how to check it."""

    schema: dict[str, Any]
    """The JSON schema the combine call runs under (stored with the run)."""
    model: type[BaseModel] | None = None
    """The pydantic class the output is an instance of, when one was given."""
    check: Check = field(compare=False, repr=False)
    """The parsed answer as the output; raises :class:`AnswerMismatch`."""

    def to_json(self, output: Any) -> Any:
        """``output`` as JSON: a model instance dumped, a JSON value as it is."""
        if isinstance(output, BaseModel):
            return output.model_dump(mode="json")
        return output


OutputType = type[BaseModel] | Mapping[str, Any] | AnswerType
"""What ``output_type=`` accepts: a pydantic model class, a JSON schema, or one made ready."""


def answer_type(output_type: OutputType) -> AnswerType:
    """``output_type`` as an :class:`AnswerType`.

    Raises:
        ConfigError: it is neither a pydantic model class nor a JSON schema object, the
            schema is not a valid JSON schema, or ``jsonschema`` is not installed.
    """
    if isinstance(output_type, AnswerType):
        return output_type
    if isinstance(output_type, type) and issubclass(output_type, BaseModel):
        return _of_model(output_type)
    if isinstance(output_type, Mapping):
        return _of_schema(dict(output_type))
    raise ConfigError(
        f"output_type {output_type!r} is neither a pydantic model class nor a JSON schema "
        "(a dict); pass a BaseModel subclass or a schema such as {'type': 'object', ...}"
    )


def _of_model(model: type[BaseModel]) -> AnswerType:
    def check(value: Any) -> Any:
        try:
            return model.model_validate_json(json.dumps(value))
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(part) for part in problem["loc"])
            raise AnswerMismatch(f"at {where or 'the top'!r}: {problem['msg']}") from None

    return AnswerType(schema=model.model_json_schema(), model=model, check=check)


def _of_schema(schema: dict[str, Any]) -> AnswerType:
    checker = schema_checker(schema, what="the answer schema", extra="answers")

    def check(value: Any) -> Any:
        try:
            checker(value)
        except SchemaMismatch as exc:
            raise AnswerMismatch(str(exc)) from None
        return value

    return AnswerType(schema=schema, check=check)
