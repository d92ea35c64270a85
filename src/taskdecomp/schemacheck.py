"""Checking a JSON value against a JSON schema, with the ``jsonschema`` package.

Typed answers given as a schema and tools that bring their own argument schema (MCP servers,
OpenAI function definitions) are checked here, every keyword of the schema's draft. The
package is optional: a partial checker of our own would pass values a keyword it ignored
forbids, so without it such a schema is refused up front, with how to install it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from taskdecomp.errors import ConfigError


class SchemaMismatch(ValueError):
    """A value does not match its schema; the message says where and why."""


Checker = Callable[[Any], None]
"""Returns when the value matches; raises :class:`SchemaMismatch`."""


def schema_checker(schema: Mapping[str, Any], *, what: str, extra: str) -> Checker:
    """A checker of values against ``schema``.

    Args:
        schema: the JSON schema.
        what: what the schema is, for errors (``"the answer schema"``).
        extra: the taskdecomp extra that installs ``jsonschema`` for this use.

    Raises:
        ConfigError: ``schema`` is not a valid JSON schema, or ``jsonschema`` is missing.
    """
    try:  # untyped (no stubs in the install): used through a few calls checked by tests
        jsonschema: Any = importlib.import_module("jsonschema")
    except ImportError:
        raise ConfigError(
            f"{what} is checked with the jsonschema package, which is not installed; "
            f"pip install 'taskdecomp[{extra}]'"
        ) from None
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ConfigError(f"{what} is not a valid JSON schema: {exc.message}") from None
    validator = cls(schema)
    best_match = importlib.import_module("jsonschema.exceptions").best_match

    def check(value: Any) -> None:
        error = best_match(validator.iter_errors(value))
        if error is not None:
            where = "/".join(str(part) for part in error.absolute_path)
            raise SchemaMismatch(f"at {where or 'the top'!r}: {error.message}")

    return check
