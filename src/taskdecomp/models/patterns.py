r"""JSON-schema ``pattern`` keywords in the regex subset that llama.cpp grammars are built from.

llama-cpp-python's schema converter (``llama_cpp.llama_grammar.SchemaConverter``) turns a
string's ``pattern`` into grammar rules, but it copies ``\d``, ``\w``, ``\s`` and escaped
punctuation (``\.``) into the grammar as they are, where llama.cpp refuses them ("unknown
escape"), and it asserts that a pattern is anchored (``^...$``). A tool argument declared as
``Annotated[str, Field(pattern=r"^\d{4}-\d{2}$")]`` would make every answer fail.

:func:`portable_patterns` rewrites each pattern into the form the converter reads right:
shorthand classes become bracket classes, escaped punctuation a hex escape (``\x2E``),
and a missing anchor ``.*`` (a JSON-schema pattern matches anywhere in the string). A
pattern it cannot rewrite faithfully (lookarounds, back-references, negated shorthands
inside a class, word boundaries) is dropped from the grammar's copy of the schema: the
argument is then any string there, and the policy boundary still checks the pattern.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_CLASSES = {"d": "0-9", "w": "0-9A-Za-z_", "s": " \\t\\n\\r"}
"""Shorthand classes as the inside of a bracket class."""

_KEPT = frozenset('ntr\\"[]')
"""Escapes a llama.cpp grammar reads as they are (and the converter passes on)."""


def portable_patterns(schema: Any) -> Any:
    """A copy of ``schema`` whose ``pattern`` keywords llama.cpp's converter reads right.

    Patterns that cannot be rewritten are left out (see the module docstring); a property
    named ``pattern`` is a property like any other.
    """
    if isinstance(schema, list):
        return [portable_patterns(item) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "properties" and isinstance(value, Mapping):
            out[key] = {name: portable_patterns(prop) for name, prop in value.items()}
        elif key == "pattern" and isinstance(value, str):
            rewritten = portable_pattern(value)
            if rewritten is not None:
                out[key] = rewritten
        else:
            out[key] = portable_patterns(value)
    return out


def portable_pattern(pattern: str) -> str | None:
    r"""``pattern`` rewritten for the converter, anchored at both ends; ``None`` if it cannot be.

    ``^\d{4}-\d{2}$`` becomes ``^[0-9]{4}-[0-9]{2}$``; ``v\d+\.\d+`` becomes
    ``^.*v[0-9]+\x2E[0-9]+.*$``.
    """
    if "(?" in pattern or _escaped_end(pattern):
        return None  # lookarounds, non-capturing and named groups, flags; a dangling "\"
    body = pattern[1:] if pattern.startswith("^") else ".*" + pattern
    anchored_end = body.endswith("$") and not _escaped_end(body[:-1])
    body = body[:-1] if anchored_end else body + ".*"
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            if i + 1 >= len(body):
                return None
            piece = _escape(body[i + 1], in_class)
            if piece is None:
                return None
            out.append(piece)
            i += 2
            continue
        if c in "^$" and not in_class:
            return None  # an anchor inside the pattern
        if c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class:
            in_class = False
        out.append(c)
        i += 1
    return None if in_class else "^" + "".join(out) + "$"


def _escaped_end(text: str) -> bool:
    """Whether ``text`` ends in an odd run of backslashes (its next character is escaped)."""
    return (len(text) - len(text.rstrip("\\"))) % 2 == 1


def _escape(c: str, in_class: bool) -> str | None:
    r"""What ``\c`` becomes, or ``None`` when it has no faithful form here."""
    if c in _CLASSES:
        return _CLASSES[c] if in_class else f"[{_CLASSES[c]}]"
    if c.isupper() and c.lower() in _CLASSES:  # \D \W \S
        return None if in_class else f"[^{_CLASSES[c.lower()]}]"
    if c in _KEPT:
        return "\\" + c
    if c.isalnum() or not c.isascii():
        return None  # \b, back-references, \p{...}, \x.. (kept simple: refused)
    return f"\\x{ord(c):02X}"
