"""Checking a JSON value against a JSON schema, with the ``jsonschema`` package.

Typed answers given as a schema and tools that bring their own argument schema (MCP servers,
OpenAI function definitions) are checked here, every keyword of the schema's draft. The
package is optional: a partial checker of our own would pass values a keyword it ignored
forbids, so without it such a schema is refused up front, with how to install it.

A ``$ref`` is resolved inside the schema itself (and the drafts' own meta-schemas) only:
nothing is ever fetched over the network, since a schema may come from an MCP client or a
server we do not trust. A reference that does not resolve refuses the schema up front.
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
        ConfigError: ``schema`` is not a valid JSON schema, a ``$ref`` in it does not resolve
            within it, or ``jsonschema`` is missing.
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
    import referencing
    import referencing.exceptions
    import referencing.jsonschema

    registry: referencing.Registry[Any] = referencing.Registry()  # retrieves nothing
    validator = cls(schema, registry=registry)
    local: Any = importlib.import_module("jsonschema_specifications").REGISTRY
    resource = referencing.Resource.from_contents(
        schema, default_specification=referencing.jsonschema.DRAFT202012
    )
    missing = _unresolvable(resource, local.combine(registry).resolver_with_root(resource))
    if missing is not None:
        raise ConfigError(
            f"{what} refers to {missing!r}, which is not in the schema; "
            "references are resolved within the schema only, never fetched"
        )
    best_match = importlib.import_module("jsonschema.exceptions").best_match

    def check(value: Any) -> None:
        try:
            error = best_match(validator.iter_errors(value))
        except referencing.exceptions.Unresolvable as exc:  # one a walk could not see
            raise SchemaMismatch(f"the schema refers to {exc.ref!r}, which it lacks") from None
        if error is not None:
            where = "/".join(str(part) for part in error.absolute_path)
            raise SchemaMismatch(f"at {where or 'the top'!r}: {error.message}")

    return check


def _unresolvable(resource: Any, resolver: Any) -> str | None:
    """The first ``$ref`` of ``resource`` or its subschemas that does not resolve, if any."""
    import referencing.exceptions

    contents = resource.contents
    ref = contents.get("$ref") if isinstance(contents, Mapping) else None
    if isinstance(ref, str):
        try:
            resolver.lookup(ref)
        except referencing.exceptions.Unresolvable:
            return ref
    for sub in resource.subresources():
        found = _unresolvable(sub, resolver.in_subresource(sub))
        if found is not None:
            return found
    return None
