"""Literal values a goal states, normalised, and the tool arguments they fit.

A small model copies what it sees: asked for a month in a goal that says "April 2026", it
writes ``"April 2026"`` where the tool wants ``"2026-04"``. :func:`extract_values` reads the
goal once, deterministically, and writes its values the way tools take them; :func:`values_for`
says which of them one argument can take, so a grammar can offer the model exactly those.

What is recognised (case-insensitive, English):

- **months** as ``YYYY-MM``: ``April 2026``, ``Apr. 2026``, ``April, 2026``, ``April of
  2026``, ``2026-04``, ``2026/04``, ``04/2026``, ``4-2026``;
- **dates** as ``YYYY-MM-DD``: ``March 3rd 2026``, ``March 3, 2026``, ``3 March 2026``,
  ``3rd of March 2026``, ``2026-03-03``, ``2026/03/03``, and ``a/b/YYYY`` (also with ``-``
  or ``.``) only when it is unambiguous: one of ``a`` and ``b`` is above 12 (so it is the
  day), or both are equal. ``03/04/2026`` is left out: it is the 3rd of April in most of
  the world and the 4th of March in the US, and a wrong date is worse than none;
- **integers**: standalone numbers (``42``, ``-3``, ``1,000``, ``#1042``), each with the
  word before it as its label (``customer 1042``, ``order #1042``, ``manager_id=42``).
  Digits that belong to a word (``Q2``, ``abc123``, ``3rd``), a decimal (``2.5``), a time
  (``10:30``), a range (``5-6``) or a month or date above are not integers; a year on its
  own is (``2026 people``);
- **quoted strings**: ``"..."``, ``'...'`` (not an apostrophe) and ``“...”``, each with the
  word before it as its label;
- **key=value pairs**: ``key=value``, ``key="a value"``; a value that starts with a month or
  a date is normalised (``month=April 2026`` gives ``2026-04``).

Nothing here knows any toolset: an argument's fit is read from its JSON schema (type,
``pattern``, ``format``, ``enum``, bounds) and, for free-text strings, from its name.
"""

from __future__ import annotations

import copy
import datetime
import re
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

Value = str | int
"""A goal value an argument can take."""

_MONTH_NUMBERS = {
    "january": 1, "february": 2, "march": 3, "april": 4, "may": 5, "june": 6, "july": 7,
    "august": 8, "september": 9, "october": 10, "november": 11, "december": 12,
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8, "sep": 9,
    "sept": 9, "oct": 10, "nov": 11, "dec": 12,
}  # fmt: skip
_NAME = "(?:" + "|".join(sorted(_MONTH_NUMBERS, key=len, reverse=True)) + r")\.?(?![\w])"
_YEAR = r"[12]\d{3}(?![\w]|[.,/:-]\d)"
_DAY = r"(?:0?[1-9]|[12]\d|3[01])(?:st|nd|rd|th)?(?![\w])"
_START = r"(?<![\w.,/:-])"  # a number starts here: not inside a word, decimal, range or time

_DATE_PATTERNS = (
    # March 3rd 2026, Mar. 3, 2026
    rf"\b(?P<mname>{_NAME})\s+(?P<day>{_DAY}),?\s+(?P<year>{_YEAR})",
    # 3 March 2026, 3rd of March, 2026
    rf"{_START}(?P<day>{_DAY})\s+(?:of\s+)?(?P<mname>{_NAME}),?\s+(?P<year>{_YEAR})",
    # 2026-03-03, 2026/03/03
    rf"{_START}(?P<year>[12]\d{{3}})(?P<sep>[-/])(?P<month>\d{{1,2}})(?P=sep)"
    r"(?P<day>\d{1,2})(?=T\d|(?![\w]|[.,/:-]\d))",  # a date-time's date too
    # 03/03/2026, 15.03.2026: read by _numeric_date
    rf"{_START}(?P<a>\d{{1,2}})(?P<sep>[-/.])(?P<b>\d{{1,2}})(?P=sep)(?P<year>{_YEAR})",
)
_MONTH_PATTERNS = (
    # April 2026, Apr. 2026, April, 2026, April of 2026
    rf"\b(?P<mname>{_NAME}),?\s+(?:of\s+)?(?P<year>{_YEAR})",
    # 2026-04, 2026/04
    rf"{_START}(?P<year>[12]\d{{3}})[-/](?P<month>\d{{2}})(?![\w]|[.,/:-]\d)",
    # 04/2026, 4-2026
    rf"{_START}(?P<month>\d{{1,2}})[-/.](?P<year>{_YEAR})",
)
_DATES = tuple(re.compile(p, re.IGNORECASE) for p in _DATE_PATTERNS)
_MONTHS = tuple(re.compile(p, re.IGNORECASE) for p in _MONTH_PATTERNS)
_INTEGER = re.compile(r"(?<![\w./:-])(?P<number>-?(?:\d{1,3}(?:,\d{3})+|\d+))(?![\w]|[./:-]\d)")
_QUOTED = re.compile(r"\"(?P<a>[^\"\n]+)\"|“(?P<b>[^”\n]+)”|(?<![\w])'(?P<c>[^'\n]+)'(?![\w])")
_PAIR = re.compile(r"(?<![\w.])(?P<key>[A-Za-z_][\w.-]*)\s*=\s*")
_PAIR_VALUE = re.compile(r"\"(?P<a>[^\"\n]*)\"|'(?P<b>[^'\n]*)'|(?P<c>[^\s,;)\]}]+)")
_LABEL = re.compile(r"(?P<label>[A-Za-z_][\w-]*)\s*(?:[:=#]\s*#?|#)?\s*$")
_LABEL_AFTER = re.compile(r"[ \t]*(?P<label>[A-Za-z_][\w-]*)(?![\w-]|\s*[:=])")  # no pair key
_WORD_SPLIT = re.compile(r"[^a-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_ID_WORDS = frozenset({"id", "ids", "no", "num", "number"})
_YEARS = range(1000, 3000)


@dataclass(frozen=True, kw_only=True, slots=True)
class GoalValues:
    """The literal values of one goal, in the order they appear, without repeats."""

    text: str
    """The goal itself (enum members are looked up in it)."""
    months: tuple[str, ...] = ()
    """Months, as ``YYYY-MM``."""
    dates: tuple[str, ...] = ()
    """Dates, as ``YYYY-MM-DD``."""
    integers: tuple[int, ...] = ()
    """Integers that are not part of a month, a date, a word or a decimal."""
    strings: tuple[str, ...] = ()
    """Quoted strings, without their quotes."""
    pairs: Mapping[str, str] = field(default_factory=dict)
    """``key=value`` pairs: key to value (normalised when it is a month or a date)."""
    labels: tuple[tuple[str, Value], ...] = ()
    """(word, value): the word before each integer and quoted string, and after each integer.

    ``booking #1042`` labels 1042 ``booking``; ``for 3 nights`` labels 3 ``for`` and
    ``nights``."""

    def __bool__(self) -> bool:
        return bool(self.months or self.dates or self.integers or self.strings or self.pairs)


def extract_values(goal: str) -> GoalValues:
    """The months, dates, integers, quoted strings and ``key=value`` pairs in ``goal``.

    Dates are read before months and both before integers; the text a date or a month
    used is not read again, so ``April 2026`` is a month and not the integer 2026.
    """
    text = goal
    dates: list[tuple[int, str]] = []
    months: list[tuple[int, str]] = []
    for pattern in _DATES:
        text = _take(pattern, text, _date, dates)
    for pattern in _MONTHS:
        text = _take(pattern, text, _month, months)
    integers: list[int] = []
    labels: list[tuple[str, Value]] = []
    for match in _INTEGER.finditer(text):
        number = int(match["number"].replace(",", ""))
        integers.append(number)
        _label(text, match.start(), number, labels)
        after = _LABEL_AFTER.match(text, match.end())
        if after is not None:
            labels.append((after["label"], number))
    strings: list[str] = []
    for match in _QUOTED.finditer(goal):
        value = (match["a"] or match["b"] or match["c"]).strip()
        if value:
            strings.append(value)
            _label(goal, match.start(), value, labels)
    return GoalValues(
        text=goal,
        months=_unique([value for _, value in sorted(months)]),
        dates=_unique([value for _, value in sorted(dates)]),
        integers=_unique(integers),
        strings=_unique(strings),
        pairs=_pairs(goal),
        labels=_unique(labels),
    )


def _take(
    pattern: re.Pattern[str],
    text: str,
    read: Callable[[re.Match[str]], str | None],
    found: list[tuple[int, str]],
) -> str:
    """Add what ``read`` makes of each match to ``found``; blank the matched text out.

    Each value is added with where its match starts. A match ``read`` refuses (an
    impossible or ambiguous date) is blanked out too, so its numbers are not read as
    integers.
    """
    pieces: list[str] = []
    end = 0
    for match in pattern.finditer(text):
        value = read(match)
        if value is not None:
            found.append((match.start(), value))
        pieces += [text[end : match.start()], " " * (match.end() - match.start())]
        end = match.end()
    return "".join([*pieces, text[end:]])


def _date(match: re.Match[str]) -> str | None:
    groups = match.groupdict()
    if groups.get("a") is not None:
        return _numeric_date(int(match["a"]), int(match["b"]), int(match["year"]))
    month = _MONTH_NUMBERS[groups["mname"].rstrip(".").lower()] if groups.get("mname") else 0
    day = int(re.sub(r"\D", "", match["day"]))
    return _iso(int(match["year"]), month or int(match["month"]), day)


def _numeric_date(a: int, b: int, year: int) -> str | None:
    """``a/b/year`` as a date when only one reading is possible (or both agree)."""
    if a > 12 >= b:
        return _iso(year, b, a)  # day first
    if b > 12 >= a or a == b:
        return _iso(year, a, b)  # month first
    return None  # 03/04/2026: 3 April or March 4


def _iso(year: int, month: int, day: int) -> str | None:
    try:
        return datetime.date(year, month, day).isoformat()
    except ValueError:
        return None


def _month(match: re.Match[str]) -> str | None:
    groups = match.groupdict()
    if groups.get("mname"):
        month = _MONTH_NUMBERS[groups["mname"].rstrip(".").lower()]
    else:
        month = int(match["month"])
    return f"{int(match['year']):04d}-{month:02d}" if 1 <= month <= 12 else None


def _label(text: str, start: int, value: Value, labels: list[tuple[str, Value]]) -> None:
    found = _LABEL.search(text, 0, start)
    if found is not None:
        labels.append((found["label"], value))


def _pairs(goal: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for key in _PAIR.finditer(goal):
        value = _normalised_at(goal, key.end())
        if value is None:
            raw = _PAIR_VALUE.match(goal, key.end())
            if raw is None:
                continue
            value = raw["a"] if raw["a"] is not None else raw["b"]
            if value is None:
                value = raw["c"].rstrip(".:!?")
        pairs.setdefault(key["key"], value)
    return pairs


def _normalised_at(text: str, start: int) -> str | None:
    """The date or month that starts exactly at ``start``, normalised."""
    for patterns, read in ((_DATES, _date), (_MONTHS, _month)):
        for pattern in patterns:
            match = pattern.match(text, start)
            if match is not None:
                value: str | None = read(match)
                if value is not None:
                    return value
    return None


def _unique(values: list[Any]) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(values))


def values_for(
    schema: Mapping[str, Any],
    values: GoalValues,
    *,
    name: str | None = None,
    others: Collection[str] = (),
) -> tuple[Value, ...]:
    """The goal values an argument with this JSON schema can take; ``()`` when none fit.

    Args:
        schema: the argument's schema as pydantic writes it (``type``, ``pattern``,
            ``format``, ``enum``, ``minLength``/``maxLength``, ``minimum``/``maximum``,
            ``anyOf`` with ``{"type": "null"}`` for an optional one).
        values: the goal's values (:func:`extract_values`).
        name: the argument's name. It picks among several fitting values: a
            ``key=value`` pair with this key, values labelled by the same word
            (``customer 1042`` for ``customer_id``), and the kind of value the name says
            (``month``, ``date``/``day``, ``year``). A string with neither a pattern, a
            format nor an enum takes goal values only through its name.
        others: the names of the other arguments the goal's values may be meant for (every
            tool's, in a catalog). An integer labelled by one of them (``booking 1042``
            when there is a ``booking_id``) is not offered to this argument, unless this
            argument's name is the label too.

    Returns:
        The fitting values, in the order the goal gives them: members of an enum that the
        goal mentions (case-insensitively, ``_``/``-`` read as spaces); for a string with
        a ``pattern``, the goal's months, dates, quoted strings, pair values and integers
        that match it; for ``format: date``, the dates; for an integer, the integers.
    """
    branches = [b for b in schema.get("anyOf", ()) if b.get("type") != "null"]
    if branches:
        return _unique(
            [v for b in branches for v in values_for(b, values, name=name, others=others)]
        )
    if "const" in schema:
        return ()
    if "enum" in schema:
        return _mentioned(schema["enum"], values)
    words = _words(name or "")
    paired = _paired(schema, values, name)
    if paired:
        return paired
    if schema.get("type") == "integer":
        return _integers(schema, values, words, [_words(other) for other in others])
    if schema.get("type") == "string" or "pattern" in schema or "format" in schema:
        return _strings(schema, values, words)
    return ()


def _mentioned(members: list[Any], values: GoalValues) -> tuple[Value, ...]:
    """The members the goal names; one named only inside a longer one's name is not.

    ``economy`` is not named by "premium economy" when ``premium_economy`` is a member.
    """
    spans: dict[Value, list[tuple[int, int]]] = {}
    for member in members:
        if isinstance(member, bool):
            continue
        if isinstance(member, int) and member in values.integers:
            spans[member] = []
        elif isinstance(member, str) and member.strip():
            found = _spans(values.text, member)
            if found:
                spans[member] = found
    return tuple(
        member
        for member, own in spans.items()
        if not own or any(not _inside(span, spans, member) for span in own)
    )


def _inside(span: tuple[int, int], spans: Mapping[Value, list[tuple[int, int]]], me: Value) -> bool:
    """Whether ``span`` lies within a longer span of another member."""
    start, end = span
    return any(
        s <= start and end <= e and (e - s) > (end - start)
        for other, theirs in spans.items()
        if other != me
        for s, e in theirs
    )


def _spans(text: str, phrase: str) -> list[tuple[int, int]]:
    """Where ``text`` names ``phrase`` (case-insensitive, ``_``/``-`` read as spaces)."""
    parts = [re.escape(part) for part in re.split(r"[\s_-]+", phrase.strip()) if part]
    pattern = r"(?<![\w])" + r"[\s_-]+".join(parts) + r"(?![\w])"
    return [m.span() for m in re.finditer(pattern, text, re.IGNORECASE)]


def _paired(schema: Mapping[str, Any], values: GoalValues, name: str | None) -> tuple[Value, ...]:
    """The value of the ``name=...`` pair, if the goal has one and it fits."""
    if not name:
        return ()
    keys = [key for key in values.pairs if key == name] or [
        key for key in values.pairs if key.lower() == name.lower()
    ]
    if not keys:
        return ()
    raw = values.pairs[keys[0]]
    if schema.get("type") == "integer":
        number = int(raw) if re.fullmatch(r"-?\d+", raw) else None
        return (number,) if number is not None and _in_bounds(number, schema) else ()
    return (raw,) if _string_fits(raw, schema) else ()


def _integers(
    schema: Mapping[str, Any], values: GoalValues, words: set[str], others: list[set[str]]
) -> tuple[int, ...]:
    calendar = [*values.dates, *values.months]
    if "year" in words:
        found = [int(v[:4]) for v in calendar] + [n for n in values.integers if n in _YEARS]
    elif "month" in words:
        found = [int(v[5:7]) for v in calendar]
    elif "day" in words:
        found = [int(v[8:10]) for v in values.dates]
    else:
        labelled = [v for label, v in values.labels if isinstance(v, int) and _same(label, words)]
        claimed = {
            v
            for label, v in values.labels
            if isinstance(v, int) and any(_same(label, o) for o in others if o != words)
        }
        found = labelled or [n for n in values.integers if n not in claimed]
    return _unique([n for n in found if _in_bounds(n, schema)])


def _strings(schema: Mapping[str, Any], values: GoalValues, words: set[str]) -> tuple[str, ...]:
    if schema.get("format") == "date":
        candidates = list(values.dates)
    elif "pattern" in schema or schema.get("format"):
        candidates = [
            *values.months,
            *values.dates,
            *values.strings,
            *values.pairs.values(),
            *(str(n) for n in values.integers),
        ]
    elif "month" in words:
        candidates = list(values.months)
    elif words & {"date", "day"}:
        candidates = list(values.dates)
    else:
        candidates = [v for label, v in values.labels if isinstance(v, str) and _same(label, words)]
    return _unique([v for v in candidates if _string_fits(v, schema)])


def _string_fits(value: str, schema: Mapping[str, Any]) -> bool:
    if not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value)):
        return False
    if schema.get("format") == "date" and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value) is None:
        return False
    pattern = schema.get("pattern")
    if pattern is None:
        return True
    try:
        return re.search(pattern, value) is not None
    except re.error:  # a JSON-schema (ECMA) pattern Python cannot read: offer nothing
        return False


def _in_bounds(number: int, schema: Mapping[str, Any]) -> bool:
    checks = (
        ("minimum", number >= schema.get("minimum", number)),
        ("maximum", number <= schema.get("maximum", number)),
        ("exclusiveMinimum", number > schema.get("exclusiveMinimum", number - 1)),
        ("exclusiveMaximum", number < schema.get("exclusiveMaximum", number + 1)),
    )
    return all(ok for _, ok in checks)


def words_of(name: str) -> set[str]:
    """The lower-case words of an identifier: ``customerId`` and ``customer_id`` give both."""
    return _words(name)


def _words(name: str) -> set[str]:
    return {w for w in _WORD_SPLIT.split(_CAMEL.sub("_", name).lower()) if w}


def _same(label: str, words: set[str]) -> bool:
    """Whether a label names the argument: ``customer`` for ``customer_id``, and back."""
    mine = {_singular(w) for w in words - _ID_WORDS}
    return bool(mine) and mine == {_singular(w) for w in _words(label) - _ID_WORDS}


def _singular(word: str) -> str:
    """``nights`` and ``night`` alike (a plain trailing ``s``; enough for labels)."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def restrict_arguments(schema: Mapping[str, Any], values: GoalValues) -> dict[str, Any]:
    """A copy of ``schema`` whose tool arguments take only the goal values that fit them.

    Tool arguments are the ``$defs`` that :mod:`~taskdecomp.models.schemas` hoists
    (``tool__<name>__args`` and their own ``tool__<name>__defs__*``) and any object under
    an ``args`` property. Each string or integer property (optional ones included) for
    which :func:`values_for` finds values becomes ``{"enum": [...]}`` of those values;
    the others keep their schema.
    """
    out = copy.deepcopy(dict(schema))
    if not values:
        return out
    defs = out.get("$defs", {})
    objects = [d for k, d in defs.items() if k.startswith("tool__") and isinstance(d, dict)]
    objects += list(_under_args(out))
    names = sorted({name for node in objects for name in node.get("properties", {})})
    for node in objects:
        _restrict_object(node, values, defs, names)
    return out


def _under_args(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, list):
        for item in node:
            yield from _under_args(item)
    elif isinstance(node, dict):
        args = node.get("properties", {}).get("args")
        if isinstance(args, dict) and "properties" in args:
            yield args
        for key, value in node.items():
            if key != "$defs":
                yield from _under_args(value)


def _restrict_object(
    node: dict[str, Any], values: GoalValues, defs: Mapping[str, Any], names: Collection[str]
) -> None:
    properties = node.get("properties")
    if not isinstance(properties, dict):
        return
    targets = {name: resolved(prop, defs) for name, prop in properties.items()}
    for name, target in targets.items():
        if isinstance(target, dict) and _scalar(target):
            fitting = values_for(target, values, name=name, others=names)
            if fitting and len(fitting) >= _sharing(target, targets):
                properties[name] = {"enum": list(fitting)}


def _sharing(target: Mapping[str, Any], targets: Mapping[str, Any]) -> int:
    """How many arguments of one object take the members of ``target``'s enum (1 if none).

    Several arguments with one enum (a ``from_currency`` and a ``to_currency``) are
    restricted only when the goal names as many members as there are such arguments:
    else each would be held to the one currency the goal names, and one of them wrongly.
    """
    members = target.get("enum")
    if members is None:
        return 1
    return sum(
        1
        for other in targets.values()
        if isinstance(other, Mapping) and other.get("enum") == members
    )


def resolved(schema: Any, defs: Mapping[str, Any]) -> Any:
    """The definition a local ``$ref`` names, else ``schema`` itself.

    pydantic refers to enum classes so, and plan schemas to each tool's arguments.
    """
    ref = schema.get("$ref") if isinstance(schema, dict) else None
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return defs.get(ref.removeprefix("#/$defs/"))
    return schema


def _scalar(schema: Mapping[str, Any]) -> bool:
    """Whether an argument is a string or an integer (or an optional one)."""
    branches = [b for b in schema.get("anyOf", ()) if b.get("type") != "null"]
    if branches:
        return all(_scalar(b) for b in branches)
    return schema.get("type") in ("string", "integer") or "enum" in schema
