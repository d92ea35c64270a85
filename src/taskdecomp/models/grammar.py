"""GBNF grammars for llama.cpp, built from the project's JSON schemas.

llama-cpp-python turns a JSON schema into a grammar on its own (``response_format``); for
a plan that grammar lets a small model call the same tool again and again, write a month
as ``"April 2026"`` and spend tokens on spaces. :func:`grammar_for` starts from the same
converter (``llama_cpp.llama_grammar.SchemaConverter``) and adds:

- **Plans without repeated tools.** For a plan schema as
  :func:`~taskdecomp.models.schemas.plan_schema` builds it (on its own, or as a branch of
  a root ``anyOf`` like the replanner's decision), the list of steps is written by hand:
  its rules carry the set of tools already used, so a tool can be called at most once
  per plan, in any order. Past :data:`STATE_CAP` such sets (large catalogs), the tools
  must instead come in catalog order, which needs far fewer rules. Everything else the
  schema guarantees holds: ids ``step_<n>`` by position, ``depends_on`` naming earlier or
  finished steps only (here without repeats, in order), the step count bounds and
  instruction steps where the schema allows them. Titles are shorter
  (:data:`TITLE_MAX_CHARS`): fewer tokens to write.
- **Goal values** (``goal=``): every string or integer tool argument for which the goal
  offers fitting values (:mod:`~taskdecomp.models.goal_values`) can take only those. A
  tool with a required argument the goal must give and does not is left out of the plan,
  as a plan could only invent it, unless too few tools would remain for the fewest steps:
  an integer id (``booking_id`` when the goal names no number) or a string of a declared
  format (a ``pattern`` or ``format``: a day ``YYYY-MM-DD`` when the goal names none).
- **No whitespace** between JSON tokens: the converter allows one optional space after
  each; here there is none, so the model writes compact JSON in fewer tokens.
- **Strict strings.** The converter lets a string hold raw control characters (a newline),
  which strict JSON refuses; here they must be written escaped (a backslash and an ``n``).

A plan schema whose tools cannot fill even the fewest steps without a repeat (fewer
tools than ``min_steps`` and no instruction steps), or whose layout is not recognised,
gets the converter's own plan grammar, with the goal values and compact JSON.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from taskdecomp.models.goal_values import extract_values, resolved, restrict_arguments, words_of
from taskdecomp.models.patterns import portable_patterns

TITLE_MAX_CHARS = 32
"""Longest step title the plan grammar allows (the schema allows 60)."""
STATE_CAP = 512
"""Most step-list rules keyed by the set of tools used; past it, tools go in catalog order."""
SPACE = '""'
"""The ``space`` rule between JSON tokens: none (llama's converter allows one space)."""
CHAR = r'[^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])'
"""The ``char`` rule of a JSON string: llama's converter lets control characters through raw
(a newline inside a string), which strict JSON refuses; here they must be escaped."""

_STEP_REF = re.compile(r"^#/\$defs/(step_\d+)$")
_STEP_ID = re.compile(r"^step_(\d+)$")
_RULE_CHARS = re.compile(r"[^a-zA-Z0-9-]+")


def grammar_for(schema: Mapping[str, Any], *, goal: str | None = None) -> str:
    """A GBNF grammar (root rule ``root``) for JSON documents that match ``schema``.

    Args:
        schema: a JSON schema; a plan schema (or a root ``anyOf`` with one) gets the plan
            grammar described in this module's docstring.
        goal: the goal the answer is for; its values limit the tool arguments they fit.

    Returns:
        The grammar text, one rule per line, for ``LlamaGrammar.from_string``.

    Raises:
        ModuleNotFoundError: ``llama-cpp-python`` is not installed.
    """
    work = portable_patterns(restrict_arguments(schema, extract_values(goal or "")))
    prefix = _prefix(work)
    converter = _converter()
    converter.resolve_refs(work, "")
    defs: Mapping[str, Any] = work.get("$defs", {})
    own: dict[str, str] = {}
    known = goal is not None
    if _plan_rule(work, defs, converter, own, prefix, "root", known=known):
        return _text(converter, own)
    branches = work.get("anyOf") if "properties" not in work else None
    if isinstance(branches, list):
        plans = [
            _plan_rule(branch, defs, converter, own, prefix, f"{prefix}-{i}", known=known)
            for i, branch in enumerate(branches)
        ]
        if any(plans):
            own["root"] = " | ".join(
                plan or converter.visit(branch, f"alternative-{i}")
                for i, (plan, branch) in enumerate(zip(plans, branches, strict=True))
            )
            return _text(converter, own)
    converter.visit(work, "")
    return _text(converter, own)


def _converter() -> Any:
    from llama_cpp.llama_grammar import SchemaConverter

    # llama-cpp-python leaves the converter unannotated
    converter: Any = SchemaConverter(  # type: ignore[no-untyped-call]
        prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False
    )
    return converter


def _prefix(schema: Mapping[str, Any]) -> str:
    """A prefix for the plan rules that no converter rule name starts with."""
    taken = [_RULE_CHARS.sub("-", key) for key in schema.get("$defs", {})]
    prefix, n = "plan", 0
    while any(name.startswith(prefix) for name in taken):
        prefix, n = f"plan{n}", n + 1
    return prefix


def _text(converter: Any, own: Mapping[str, str]) -> str:
    rules: dict[str, str] = {}
    for line in str(converter.format_grammar()).splitlines():
        name, _, body = line.partition(" ::= ")
        rules[name] = body
    clash = set(rules) & set(own)
    if clash:  # a bug here, never the caller's: the prefix keeps the names apart
        raise RuntimeError(f"grammar rules {sorted(clash)!r} are written twice")
    rules.update(own)
    rules["space"] = SPACE
    if "char" in rules:
        rules["char"] = CHAR
    ordered = sorted(rules.items(), key=lambda item: (item[0] != "root", item[0]))
    return "".join(f"{name} ::= {body}\n" for name, body in ordered)


@dataclass(frozen=True, kw_only=True, slots=True)
class _Layout:
    """A plan schema as :func:`~taskdecomp.models.schemas.plan_schema` lays it out."""

    positions: tuple[int, ...]
    """The step numbers, in order (``first`` onwards)."""
    min_steps: int
    tools: tuple[tuple[str, Any], ...]
    """(name, ``args`` schema) of each tool, in catalog order."""
    title: Mapping[str, Any]
    instruction: Mapping[str, Any] | None
    earlier: tuple[tuple[str, ...], ...]
    """The ids ``depends_on`` may name, for each position."""

    @property
    def max_steps(self) -> int:
        """Most steps."""
        return len(self.positions)

    @property
    def most_steps(self) -> int:
        """Most steps a plan can have without calling a tool twice."""
        return self.max_steps if self.instruction else min(len(self.tools), self.max_steps)


def _plan_rule(
    node: Any,
    defs: Mapping[str, Any],
    converter: Any,
    own: dict[str, str],
    prefix: str,
    name: str,
    *,
    known: bool,
) -> str | None:
    """Add the rules of the plan ``node`` (its own rule is ``name``) and return ``name``.

    ``known``: the goal is known, so a tool needing a value it does not give is left out.
    ``None`` when ``node`` is no plan schema, or one that this grammar leaves as it is.
    """
    layout = _layout(node, defs)
    if layout is None:
        return None
    if known:
        layout = _without_invented_values(layout, defs)
    if not layout.tools or layout.most_steps < layout.min_steps:
        return None  # no plan of the allowed length avoids a repeat: keep the schema's
    return _PlanRules(layout, converter, defs, own, prefix).build(name)


def _without_invented_values(layout: _Layout, defs: Mapping[str, Any]) -> _Layout:
    """The layout without the tools that need a value the goal does not give.

    A required integer argument named as an id (``id``, ``booking_id``, ``customerId``), or
    a required string of a declared format, that the goal offered no value for still has
    its bare schema here: a plan could only invent the value. Such tools are left out,
    unless too few tools would remain for the fewest steps.
    """
    kept = tuple(tool for tool in layout.tools if not _needs_invented_value(tool[1], defs))
    fewer = replace(layout, tools=kept)
    if len(kept) == len(layout.tools) or not kept or fewer.most_steps < layout.min_steps:
        return layout
    return fewer


def _needs_invented_value(args: Any, defs: Mapping[str, Any]) -> bool:
    args = resolved(args, defs)
    if not isinstance(args, Mapping):
        return False
    properties = args.get("properties", {})
    for name in args.get("required", ()):
        prop = resolved(properties.get(name, {}), defs)
        if not isinstance(prop, Mapping):
            continue
        if prop.get("type") == "integer" and "id" in words_of(name):
            return True
        if prop.get("type") == "string" and ("pattern" in prop or "format" in prop):
            return True
    return False


def _layout(node: Any, defs: Mapping[str, Any]) -> _Layout | None:
    if not isinstance(node, Mapping) or node.get("type") != "object":
        return None
    properties = node.get("properties", {})
    if set(properties) != {"kind", "steps"} or properties["kind"].get("enum") != ["plan"]:
        return None
    steps = properties["steps"]
    options = steps.get("anyOf", [steps])
    lengths = [_tuple_length(option) for option in options]
    counts = [count for count in lengths if count is not None]
    if not counts or len(counts) != len(lengths):
        return None
    if sorted(counts) != list(range(min(counts), max(counts) + 1)):
        return None
    longest = options[counts.index(max(counts))]
    refs = [_STEP_REF.match(str(ref.get("$ref", ""))) for ref in longest["prefixItems"]]
    names = [ref[1] for ref in refs if ref is not None]
    if len(names) != len(refs):
        return None
    return _combine([_step(defs.get(name), name) for name in names], min(counts))


def _tuple_length(option: Any) -> int | None:
    if not isinstance(option, Mapping) or not isinstance(option.get("prefixItems"), list):
        return None
    count = len(option["prefixItems"])
    if option.get("items") is not False or option.get("minItems") != count:
        return None
    return count if option.get("maxItems") == count else None


@dataclass(frozen=True, kw_only=True, slots=True)
class _Step:
    position: int
    tools: tuple[tuple[str, Any], ...]
    title: Mapping[str, Any]
    instruction: Mapping[str, Any] | None
    earlier: tuple[str, ...]


def _step(definition: Any, name: str) -> _Step | None:
    """One position's variants read back: its tools, title, instruction and ``depends_on``."""
    match = _STEP_ID.match(name)
    if not isinstance(definition, Mapping) or match is None:
        return None
    tools: list[tuple[str, Any]] = []
    instruction: Mapping[str, Any] | None = None
    titles: list[Any] = []
    earliers: list[tuple[str, ...]] = []
    for variant in definition.get("anyOf", [definition]):
        read = _variant(variant, name)
        if read is None:
            return None
        tool, body, title, earlier = read
        titles.append(title)
        earliers.append(earlier)
        if tool is None:
            instruction = body
        else:
            tools.append((tool, body))
    if any(t != titles[0] for t in titles) or any(e != earliers[0] for e in earliers):
        return None
    return _Step(
        position=int(match[1]),
        tools=tuple(tools),
        title=titles[0],
        instruction=instruction,
        earlier=earliers[0],
    )


def _variant(variant: Any, step: str) -> tuple[str | None, Any, Any, tuple[str, ...]] | None:
    """(tool or ``None``, its args or the instruction, title, ``depends_on`` ids)."""
    if not isinstance(variant, Mapping) or variant.get("additionalProperties") is not False:
        return None
    props = variant.get("properties", {})
    if props.get("id", {}).get("enum") != [step] or "title" not in props:
        return None
    depends = props.get("depends_on", {}).get("items", {}).get("enum", [])
    body_keys = set(props) - {"id", "title", "depends_on"}
    if body_keys == {"tool", "args"}:
        tool = props["tool"].get("enum")
        if not (isinstance(tool, list) and len(tool) == 1 and isinstance(tool[0], str)):
            return None
        return tool[0], props["args"], props["title"], tuple(depends)
    if body_keys == {"instruction"}:
        return None, props["instruction"], props["title"], tuple(depends)
    return None


def _combine(steps: Sequence[_Step | None], min_steps: int) -> _Layout | None:
    """One layout when every position offers the same tools, title and instruction."""
    known = [step for step in steps if step is not None]
    if not known or len(known) != len(steps):
        return None
    head = known[0]
    numbers = [step.position for step in known]
    if numbers != list(range(head.position, head.position + len(known))):
        return None
    if any(
        (s.tools, s.title, s.instruction) != (head.tools, head.title, head.instruction)
        for s in known
    ):
        return None
    return _Layout(
        positions=tuple(numbers),
        min_steps=min_steps,
        tools=head.tools,
        title=head.title,
        instruction=head.instruction,
        earlier=tuple(step.earlier for step in known),
    )


def _literal(value: Any) -> str:
    """A GBNF literal for ``value`` as compact JSON."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _key(name: str) -> str:
    return f'{_literal(name)} space ":" space'


def _short(title: Mapping[str, Any]) -> dict[str, Any]:
    """The title schema with at most :data:`TITLE_MAX_CHARS` characters."""
    short = dict(title)
    pattern = short.get("pattern")
    if isinstance(pattern, str):
        short["pattern"] = re.sub(
            r"\{0,(\d+)\}\$$",
            lambda m: f"{{0,{min(int(m[1]), TITLE_MAX_CHARS - 1)}}}$",
            pattern,
        )
    if "pattern" not in short or short["pattern"] == pattern:
        short["maxLength"] = min(short.get("maxLength", TITLE_MAX_CHARS), TITLE_MAX_CHARS)
    return short


class _PlanRules:
    """Writes the rules of one plan: the object, the step list's states and each step."""

    def __init__(
        self,
        layout: _Layout,
        converter: Any,
        defs: Mapping[str, Any],
        own: dict[str, str],
        prefix: str,
    ) -> None:
        self.layout = layout
        self.converter = converter
        self.defs = defs
        self.own = own
        self.prefix = prefix
        self.states: dict[str, str | None] = {}

    def build(self, name: str) -> str:
        """Add the rules, the plan object's under ``name``; return ``name``."""
        empty: frozenset[int] = frozenset()
        start = self._state(0, -1 if _set_states(self.layout) > STATE_CAP else empty)
        self.own[name] = (
            f'"{{" space {_key("kind")} {_literal("plan")} space "," space {_key("steps")} '
            f'"[" space {start} "}}" space'
        )
        return name

    def _rule(self, name: str, body: str) -> str:
        full = f"{self.prefix}-{name}"
        self.own[full] = body
        return full

    def _state(self, count: int, used: frozenset[int] | int) -> str | None:
        """The rule for the rest of the list after ``count`` steps that used ``used``.

        ``used`` is the set of tool indexes, or in catalog order the last one (-1: none).
        ``None`` when no allowed list goes on from here (too few tools left).
        """
        tag = f"{used:x}" if isinstance(used, int) else f"{sum(1 << i for i in used):x}"
        name = f"list-{count}-{'o' if isinstance(used, int) else 's'}{tag}"
        if name in self.states:
            return self.states[name]
        layout = self.layout
        alternatives = ['"]" space'] if count >= layout.min_steps else []
        if count < layout.max_steps:
            following: list[tuple[Callable[[int, int], str], int, frozenset[int] | int]] = [
                (self._tool_step, tool, after) for tool, after in _next(used, len(layout.tools))
            ]
            if layout.instruction is not None:
                following.append((self._instruction_step, -1, used))
            choices = []
            for write, tool, after in following:
                rest = self._state(count + 1, after)
                if rest is not None:
                    choices.append(f"{write(count, tool)} {rest}")
            if choices:
                comma = '"," space ' if count else ""
                alternatives.append(f"{comma}{self._head(count)} ( {' | '.join(choices)} )")
        rule = self._rule(name, " | ".join(alternatives)) if alternatives else None
        self.states[name] = rule
        return rule

    def _head(self, count: int) -> str:
        """``{"id":"step_n","title":...,`` of the step after ``count`` steps."""
        position = self.layout.positions[count]
        title = self.converter.visit(_short(self.layout.title), f"{self.prefix}-text-title")
        return self._rule(
            f"head-{position}",
            f'"{{" space {_key("id")} {_literal(f"step_{position}")} space "," space '
            f'{_key("title")} {title} "," space',
        )

    def _tool_step(self, count: int, tool: int) -> str:
        position = self.layout.positions[count]
        name, args = self.layout.tools[tool]
        ref = str(args.get("$ref", ""))
        key = ref.removeprefix("#/$defs/")
        if ref.startswith("#/$defs/") and key in self.defs:
            args_rule = self.converter.visit(self.defs[key], key)
        else:
            args_rule = self.converter.visit(args, f"{self.prefix}-text-args-{tool}")
        return self._rule(
            f"step-{position}-{tool}",
            f'{_key("tool")} {_literal(name)} space "," space {_key("args")} {args_rule} '
            f'{self._depends(count)}"}}" space',
        )

    def _instruction_step(self, count: int, _: int) -> str:
        position = self.layout.positions[count]
        assert self.layout.instruction is not None
        text = self.converter.visit(self.layout.instruction, f"{self.prefix}-text-instruction")
        return self._rule(
            f"instruction-{position}",
            f'{_key("instruction")} {text} {self._depends(count)}"}}" space',
        )

    def _depends(self, count: int) -> str:
        """An optional ``,"depends_on":[...]``: earlier ids, each at most once, in order."""
        earlier = self.layout.earlier[count]
        if not earlier:
            return ""
        position = self.layout.positions[count]
        items = [f"{_literal(step)} space" for step in earlier]
        last = len(items) - 1
        for index in range(last, -1, -1):
            more = (
                f' ( "," space {self.prefix}-deps-{position}-{index + 1} )?' if index < last else ""
            )
            skip = f" | {self.prefix}-deps-{position}-{index + 1}" if index < last else ""
            self._rule(f"deps-{position}-{index}", f"{items[index]}{more}{skip}")
        first = f"{self.prefix}-deps-{position}-0"
        return f'( "," space {_key("depends_on")} "[" space {first}? "]" space )? '


def _next(used: frozenset[int] | int, tools: int) -> Iterator[tuple[int, frozenset[int] | int]]:
    """(tool, state after it) for each tool that may come next."""
    if isinstance(used, int):
        yield from ((tool, tool) for tool in range(used + 1, tools))
    else:
        yield from ((tool, used | {tool}) for tool in range(tools) if tool not in used)


def _set_states(layout: _Layout) -> int:
    """How many list rules keyed by the set of tools used the plan would need."""
    tools, most = len(layout.tools), layout.max_steps
    total = 0
    for size in range(min(tools, most) + 1):
        counts = (most - size + 1) if layout.instruction is not None else 1
        total += _choose(tools, size) * counts
    return total


def _choose(n: int, k: int) -> int:
    from math import comb

    return comb(n, k)
