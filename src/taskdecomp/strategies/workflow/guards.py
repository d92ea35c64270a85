"""Transition guards: a small expression language, parsed once, never ``eval``-ed.

::

    guard      := or
    or         := and ("or" and)*
    and        := not ("and" not)*
    not        := "not" not | comparison
    comparison := operand (("==" | "!=") operand)?
    operand    := "(" guard ")" | "true" | "false" | "null" | NUMBER | STRING | PATH
    PATH       := NAME ("." NAME)*          e.g. status.taskPassed

A path reads the run's state (nested mappings); a missing path is ``null``. ``and``, ``or``
and ``not`` take truthiness (``null``, ``false``, ``0`` and ``""`` are false); ``==`` and
``!=`` compare values, and a boolean never equals a number. Every malformed guard raises
:class:`~taskdecomp.errors.WorkflowError` saying where, never anything else.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

from taskdecomp.errors import WorkflowError

MAX_GUARD_CHARS = 2_000
"""Longest guard text accepted."""
MAX_DEPTH = 50
"""Deepest nesting of parentheses and ``not`` accepted."""

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<number>-?\d+(?:\.\d+)?(?![\w.]))
      | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
      | (?P<op>==|!=|\(|\))
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
    )""",
    re.VERBOSE,
)
_KEYWORDS = frozenset({"and", "or", "not", "true", "false", "null"})
_LITERALS: dict[str, Any] = {"true": True, "false": False, "null": None}


@dataclass(frozen=True, slots=True)
class Const:
    """A constant."""

    value: Any


@dataclass(frozen=True, slots=True)
class Path:
    """A dotted path into the state."""

    parts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Not:
    """Logical negation."""

    operand: Node


@dataclass(frozen=True, slots=True)
class Logic:
    """``and`` / ``or`` over two or more operands, evaluated left to right."""

    op: Literal["and", "or"]
    operands: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Compare:
    """``==`` or ``!=``."""

    op: Literal["==", "!="]
    left: Node
    right: Node


Node = Const | Path | Not | Logic | Compare
"""A parsed guard expression."""


@dataclass(frozen=True, slots=True)
class Guard:
    """A parsed guard: its text and its expression."""

    text: str
    node: Node

    @classmethod
    def parse(cls, text: str) -> Guard:
        """Parse ``text``.

        Raises:
            WorkflowError: it is not a guard; the message says what was expected where.
        """
        if not isinstance(text, str):
            raise WorkflowError(f"a guard must be text, not {type(text).__name__}")
        if len(text) > MAX_GUARD_CHARS:
            raise WorkflowError(f"guard is {len(text)} characters; the most is {MAX_GUARD_CHARS}")
        return cls(text=text, node=_Parser(text).parse())

    def evaluate(self, state: Mapping[str, Any]) -> bool:
        """Whether the guard holds in ``state``."""
        return bool(evaluate(self.node, state))

    def paths(self) -> frozenset[str]:
        """The dotted paths the guard reads."""
        return frozenset(".".join(path.parts) for path in _paths(self.node))


def evaluate(node: Node, state: Mapping[str, Any]) -> Any:
    """The value of ``node`` in ``state``."""
    if isinstance(node, Const):
        return node.value
    if isinstance(node, Path):
        return lookup(state, node.parts)
    if isinstance(node, Not):
        return not evaluate(node.operand, state)
    if isinstance(node, Compare):
        same = equal(evaluate(node.left, state), evaluate(node.right, state))
        return same if node.op == "==" else not same
    if node.op == "and":
        return all(evaluate(operand, state) for operand in node.operands)
    return any(evaluate(operand, state) for operand in node.operands)


def lookup(state: Mapping[str, Any], parts: tuple[str, ...]) -> Any:
    """The value at ``parts`` in nested mappings; ``None`` when any part is missing."""
    value: Any = state
    for part in parts:
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def equal(left: Any, right: Any) -> bool:
    """Guard equality: values must match, and a boolean never equals a number."""
    if isinstance(left, bool) != isinstance(right, bool):
        return False
    return bool(left == right)


def _paths(node: Node) -> list[Path]:
    if isinstance(node, Path):
        return [node]
    if isinstance(node, Not):
        return _paths(node.operand)
    if isinstance(node, Compare):
        return _paths(node.left) + _paths(node.right)
    if isinstance(node, Logic):
        return [path for operand in node.operands for path in _paths(operand)]
    return []


class _Parser:
    """Recursive descent over the tokens of one guard."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._tokens = _tokens(text)
        self._at = 0
        self._depth = 0

    def parse(self) -> Node:
        if not self._tokens:
            raise WorkflowError("empty guard: write a condition such as status.done == true")
        node = self._or()
        if self._at < len(self._tokens):
            self._fail("'and', 'or' or the end")
        return node

    def _or(self) -> Node:
        return self._logic("or", self._and)

    def _and(self) -> Node:
        return self._logic("and", self._not)

    def _logic(self, op: Literal["and", "or"], operand: Any) -> Node:
        operands = [operand()]
        while self._peek() == ("name", op):
            self._at += 1
            operands.append(operand())
        return operands[0] if len(operands) == 1 else Logic(op=op, operands=tuple(operands))

    def _not(self) -> Node:
        if self._peek() == ("name", "not"):
            self._at += 1
            with self._deeper():
                return Not(operand=self._not())
        return self._comparison()

    def _comparison(self) -> Node:
        left = self._operand()
        kind, value = self._peek() or ("", "")
        if kind == "op" and value in ("==", "!="):
            self._at += 1
            op: Literal["==", "!="] = "==" if value == "==" else "!="
            return Compare(op=op, left=left, right=self._operand())
        return left

    def _operand(self) -> Node:
        token = self._peek()
        if token is None:
            self._fail("a value, a path or '('")
        kind, value = token
        self._at += 1
        if kind == "op" and value == "(":
            with self._deeper():
                node = self._or()
            if self._peek() != ("op", ")"):
                self._fail("')'")
            self._at += 1
            return node
        if kind == "number":
            return Const(float(value) if "." in value else int(value))
        if kind == "string":
            return Const(_unquote(value))
        if kind == "name" and value in _LITERALS:
            return Const(_LITERALS[value])
        if kind == "name" and value not in _KEYWORDS:
            return Path(tuple(value.split(".")))
        self._at -= 1
        self._fail("a value, a path or '('")

    def _peek(self) -> tuple[str, str] | None:
        return self._tokens[self._at][:2] if self._at < len(self._tokens) else None

    def _deeper(self) -> _Depth:
        return _Depth(self)

    def _fail(self, expected: str) -> NoReturn:
        if self._at < len(self._tokens):
            _, value, position = self._tokens[self._at]
            found = f"{value!r} at character {position + 1}"
        else:
            found = "the end"
        raise WorkflowError(f"guard {self._text!r}: expected {expected}, found {found}")


class _Depth:
    def __init__(self, parser: _Parser) -> None:
        self._parser = parser

    def __enter__(self) -> None:
        self._parser._depth += 1
        if self._parser._depth > MAX_DEPTH:
            raise WorkflowError(
                f"guard {self._parser._text[:80]!r}: nested deeper than {MAX_DEPTH} levels"
            )

    def __exit__(self, *exc: object) -> None:
        self._parser._depth -= 1


def _tokens(text: str) -> list[tuple[str, str, int]]:
    tokens: list[tuple[str, str, int]] = []
    position = 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if match is None or match.lastgroup is None:
            start = len(text[position:]) - len(text[position:].lstrip()) + position
            raise WorkflowError(
                f"guard {text!r}: unexpected {text[start]!r} at character {start + 1}; a guard "
                "uses ==, !=, and, or, not, parentheses, true, false, null, numbers, quoted "
                "strings and dotted paths"
            )
        start = match.start(match.lastgroup)
        tokens.append((match.lastgroup, match.group(match.lastgroup), start))
        position = match.end()
    return tokens


def _unquote(token: str) -> str:
    body = token[1:-1]
    return re.sub(r"\\(.)", r"\1", body)
