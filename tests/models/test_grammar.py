"""Grammars for the embedded model, checked with llama.cpp's own grammar engine.

``LlamaGrammar.from_string`` only stores the text; llama.cpp parses a grammar when a
sampler is made from it. So :class:`Engine` loads the SmolLM2 vocabulary (no weights),
makes a grammar sampler and feeds it a text token by token: a token the grammar forbids
gets a logit of minus infinity, and a text is accepted when every token passes and the
end of text may follow.
"""

from __future__ import annotations

import ctypes
import json
import math
from collections.abc import Iterator
from typing import Annotated, Any, Literal

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import Field

from taskdecomp import load_toolset, validate_plan_action
from taskdecomp.budget import MIN_PLAN_STEPS
from taskdecomp.models.grammar import STATE_CAP, TITLE_MAX_CHARS, grammar_for
from taskdecomp.models.schemas import plan_schema
from taskdecomp.prompts import render
from taskdecomp.strategies.replan.schemas import action_schema, decision_schema
from taskdecomp.tools import Toolset
from tests.conftest import SALES_TOOLS
from tests.models.conftest import require_local_extra
from tests.support import SEED_TOOLS

GOAL = "Prepare an April 2026 monthly sales summary for manager_id=42"
MONTH_TOOLS = ("fetch_sales_data", "fetch_refund_data", "calculate_monthly_kpis")


class Engine:
    """llama.cpp's grammar engine over the SmolLM2 vocabulary."""

    def __init__(self) -> None:
        import llama_cpp

        gguf = require_local_extra()
        self.lib = llama_cpp
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        llama_cpp.llama_backend_init()
        self.model = llama_cpp.llama_model_load_from_file(str(gguf).encode(), params)
        assert self.model, gguf
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.eos = llama_cpp.llama_vocab_eos(self.vocab)

    def close(self) -> None:
        self.lib.llama_model_free(self.model)

    def parses(self, grammar: str) -> bool:
        sampler = self.lib.llama_sampler_init_grammar(self.vocab, grammar.encode(), b"root")
        if sampler:
            self.lib.llama_sampler_free(sampler)
        return bool(sampler)

    def tokens(self, text: str) -> list[int]:
        data = text.encode()
        buffer = (self.lib.llama_token * (len(data) + 8))()
        count = self.lib.llama_tokenize(
            self.vocab, data, len(data), buffer, len(buffer), False, False
        )
        assert count >= 0
        return list(buffer[:count])

    def accepts(self, grammar: str, text: str | dict[str, Any]) -> bool:
        if not isinstance(text, str):
            text = compact(text)
        sampler = self.lib.llama_sampler_init_grammar(self.vocab, grammar.encode(), b"root")
        assert sampler, "llama.cpp cannot parse the grammar"
        try:
            for token in [*self.tokens(text), self.eos]:
                if not self._allows(sampler, token):
                    return False
                if token != self.eos:
                    self.lib.llama_sampler_accept(sampler, token)
            return True
        finally:
            self.lib.llama_sampler_free(sampler)

    def _allows(self, sampler: Any, token: int) -> bool:
        lib = self.lib
        data = (lib.llama_token_data * 1)(lib.llama_token_data(token, 0.0, 0.0))
        candidates = lib.llama_token_data_array(data, 1, -1, False)
        lib.llama_sampler_apply(sampler, ctypes.byref(candidates))
        return not math.isinf(data[0].logit)


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    loaded = Engine()
    try:
        yield loaded
    finally:
        loaded.close()


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def sales_catalog() -> list[dict[str, Any]]:
    toolset = load_toolset(SALES_TOOLS)
    return toolset.catalog(toolset.keys())


def sales_schema(max_steps: int = 10, **options: Any) -> dict[str, Any]:
    return plan_schema(
        sales_catalog(), min_steps=options.pop("min_steps", 3), max_steps=max_steps, **options
    )


def args_for(tool: str, month: str = "2026-04", manager_id: int = 42) -> dict[str, Any]:
    return {"manager_id": manager_id} if tool == "get_manager_profile" else {"month": month}


def step(n: int, tool: str, *, args: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"id": f"step_{n}", "title": "Do it", "tool": tool, "args": args or args_for(tool)}


def plan(*tools: str, first: int = 1, month: str = "2026-04") -> dict[str, Any]:
    steps = [step(first + i, t, args=args_for(t, month)) for i, t in enumerate(tools)]
    return {"kind": "plan", "steps": steps}


@pytest.fixture(scope="module")
def sales_grammar() -> str:
    return grammar_for(sales_schema(), goal=GOAL)


# -- it is a grammar, and a small one ------------------------------------------------------


def test_llama_cpp_parses_the_grammar(engine: Engine, sales_grammar: str) -> None:
    from llama_cpp import LlamaGrammar

    assert LlamaGrammar.from_string(sales_grammar, verbose=False) is not None
    assert engine.parses(sales_grammar)
    assert not engine.parses(sales_grammar.replace("root ::=", "root ::= ("))  # the check bites


def test_it_is_much_smaller_than_the_converters_own(sales_grammar: str) -> None:
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    theirs = json_schema_to_gbnf(json.dumps(sales_schema()))

    assert len(sales_grammar) * 4 < len(theirs)
    assert len(sales_grammar.splitlines()) * 4 < len(theirs.splitlines())


# -- no tool twice ----------------------------------------------------------------------------


def test_a_plan_that_uses_each_tool_once_is_accepted(engine: Engine, sales_grammar: str) -> None:
    assert engine.accepts(sales_grammar, plan(*SEED_TOOLS))
    assert engine.accepts(sales_grammar, plan(*reversed(SEED_TOOLS)))  # any order
    assert engine.accepts(sales_grammar, plan(*MONTH_TOOLS))


def test_a_plan_that_repeats_a_tool_is_rejected(engine: Engine, sales_grammar: str) -> None:
    assert not engine.accepts(sales_grammar, plan("fetch_sales_data", "fetch_sales_data", "x"))
    repeat = plan("fetch_sales_data", "fetch_refund_data", "fetch_sales_data")
    assert not engine.accepts(sales_grammar, repeat)
    repeat = plan(*SEED_TOOLS[:4], "fetch_refund_data")
    assert not engine.accepts(sales_grammar, repeat)


def test_ids_follow_positions(engine: Engine, sales_grammar: str) -> None:
    swapped = plan(*MONTH_TOOLS)
    swapped["steps"][0]["id"], swapped["steps"][1]["id"] = "step_2", "step_1"
    assert not engine.accepts(sales_grammar, swapped)

    skipped = plan(*MONTH_TOOLS)
    skipped["steps"][2]["id"] = "step_4"
    assert not engine.accepts(sales_grammar, skipped)


def test_the_step_count_stays_in_bounds(engine: Engine) -> None:
    grammar = grammar_for(sales_schema(max_steps=4), goal=GOAL)

    assert not engine.accepts(grammar, plan(*MONTH_TOOLS[:2]))
    assert engine.accepts(grammar, plan(*MONTH_TOOLS))
    assert engine.accepts(grammar, plan(*SEED_TOOLS[:4]))
    assert not engine.accepts(grammar, plan(*SEED_TOOLS))


def test_only_catalog_tools_and_their_own_args(engine: Engine, sales_grammar: str) -> None:
    unknown = plan(*MONTH_TOOLS)
    unknown["steps"][1]["tool"] = "send_email"
    assert not engine.accepts(sales_grammar, unknown)

    swapped_args = plan(*MONTH_TOOLS)
    swapped_args["steps"][0]["args"] = {"manager_id": 42}
    assert not engine.accepts(sales_grammar, swapped_args)

    extra_key = plan(*MONTH_TOOLS)
    extra_key["steps"][0]["note"] = "x"
    assert not engine.accepts(sales_grammar, extra_key)


def test_a_string_holds_no_raw_control_character(engine: Engine) -> None:
    schema = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    }
    grammar = grammar_for(schema)

    assert engine.accepts(grammar, '{"text":"one\\ntwo\\u0007"}')  # escaped: strict JSON
    assert not engine.accepts(grammar, '{"text":"one\ntwo"}')  # a raw newline is not
    assert not engine.accepts(grammar, '{"text":"bell\x07"}')


# -- the goal's values ------------------------------------------------------------------------


def test_a_month_argument_takes_the_goals_month_as_yyyy_mm(engine: Engine) -> None:
    restricted = grammar_for(sales_schema(), goal=GOAL)
    free = grammar_for(sales_schema())
    written = plan(*MONTH_TOOLS)
    written["steps"][1]["args"] = {"month": "April 2026"}

    assert engine.accepts(restricted, plan(*MONTH_TOOLS))
    assert not engine.accepts(restricted, written)
    assert engine.accepts(free, written)  # it is the goal that rules it out
    other = plan(*MONTH_TOOLS, month="2026-05")
    assert not engine.accepts(restricted, other)
    assert engine.accepts(grammar_for(sales_schema(), goal="for May 2026"), other)


def test_an_id_argument_takes_the_goals_id(engine: Engine, sales_grammar: str) -> None:
    def with_manager(manager_id: Any) -> dict[str, Any]:
        written = plan("get_manager_profile", *MONTH_TOOLS)
        written["steps"][0]["args"] = {"manager_id": manager_id}
        return written

    assert engine.accepts(sales_grammar, with_manager(42))
    assert not engine.accepts(sales_grammar, with_manager(7))
    assert not engine.accepts(sales_grammar, with_manager("42"))
    assert engine.accepts(grammar_for(sales_schema()), with_manager(7))


def test_a_tool_whose_id_the_goal_does_not_give_is_left_out(engine: Engine) -> None:
    grammar = grammar_for(sales_schema(), goal="Summarise the sales of April 2026")
    with_manager = plan("get_manager_profile", *MONTH_TOOLS)
    with_manager["steps"][0]["args"] = {"manager_id": 7}

    assert not engine.accepts(grammar, with_manager)
    assert engine.accepts(grammar, plan(*MONTH_TOOLS))


def test_a_tool_needing_an_id_stays_when_the_fewest_steps_need_it(engine: Engine) -> None:
    schema = sales_schema(min_steps=5)  # five tools, five steps: none can be left out
    grammar = grammar_for(schema, goal="Summarise the sales of April 2026")
    every = plan("get_manager_profile", *MONTH_TOOLS, "detect_risk_signals")
    every["steps"][0]["args"] = {"manager_id": 7}

    assert engine.accepts(grammar, every)


Day = Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}$")]


def forecast(city: str, day: Day) -> str:
    """The forecast for a city on a day."""
    return city


def booking(booking_id: int) -> str:
    """A booking."""
    return str(booking_id)


def cancel(booking_id: int, reason: Literal["price", "other"]) -> str:
    """Cancel a booking."""
    return reason


def convert(amount: float) -> str:
    """Convert an amount."""
    return str(amount)


def test_a_tool_whose_formatted_argument_the_goal_does_not_give_is_left_out(
    engine: Engine,
) -> None:
    toolset = Toolset.from_functions([booking, cancel, convert, forecast])
    schema = plan_schema(toolset.catalog(toolset.keys()), min_steps=3, max_steps=4)
    steps = [
        step(1, "booking", args={"booking_id": 1042}),
        step(2, "cancel", args={"booking_id": 1042, "reason": "price"}),
        step(3, "convert", args={"amount": 1.5}),
    ]
    day = step(4, "forecast", args={"city": "Oslo", "day": "2026-01-02"})
    short, long = {"kind": "plan", "steps": steps}, {"kind": "plan", "steps": [*steps, day]}

    no_day = grammar_for(schema, goal="Cancel booking 1042, too expensive")
    assert engine.accepts(no_day, short)
    assert not engine.accepts(no_day, long)  # the plan could only invent the day
    assert engine.accepts(grammar_for(schema), long)
    given = grammar_for(schema, goal="Cancel booking 1042 and the Oslo weather on 2026-01-02")
    assert engine.accepts(given, long)


def hotels(city: str, check_in: Day, nights: int) -> str:
    """Hotels in a city."""
    return city


def lookup(code: Annotated[str, Field(pattern=r"[A-Z]{3}\.x")]) -> str:
    """A code lookup."""
    return code


def test_a_declared_pattern_is_kept_by_the_grammar(engine: Engine) -> None:
    toolset = Toolset.from_functions([forecast, hotels, lookup])
    schema = plan_schema(toolset.catalog(toolset.keys()), min_steps=3, max_steps=3)
    grammar = grammar_for(schema, goal="Weather in Oslo, hotels there, and code ABC")

    def three(day: str, code: str) -> dict[str, Any]:
        steps = [
            {"id": "step_1", "title": "w", "tool": "forecast", "args": {"city": "O", "day": day}},
            {
                "id": "step_2",
                "title": "h",
                "tool": "hotels",
                "args": {"city": "Oslo", "check_in": day, "nights": 2},
            },
            {"id": "step_3", "title": "c", "tool": "lookup", "args": {"code": code}},
        ]
        return {"kind": "plan", "steps": steps}

    assert engine.parses(grammar)
    assert engine.accepts(grammar, three("2026-12-24", "ABC.x"))
    assert engine.accepts(grammar, three("2026-12-24", "the ABC.x code"))  # found anywhere
    assert not engine.accepts(grammar, three("2026-12-24T10:00", "ABC.x"))
    assert not engine.accepts(grammar, three("2026-12-24", "ABCdx"))  # "." is a dot


def test_arguments_the_goal_says_nothing_about_keep_their_schema(engine: Engine) -> None:
    grammar = grammar_for(sales_schema(), goal="Summarise sales for manager 42")
    written = plan("get_manager_profile", *MONTH_TOOLS)
    written["steps"][1]["args"] = {"month": "whatever month"}

    assert engine.accepts(grammar, written)
    written["steps"][1]["args"] = {"month": "x" * 121}
    assert not engine.accepts(grammar, written)  # the schema's bound


def pick(
    mode: Literal["fast", "slow"],
    day: str,
    limit: int | None = None,
    note: str = "",
) -> dict[str, Any]:
    """A tool with an enum, a pattern-free date string, an optional integer and free text."""
    return {}


def test_enums_optionals_and_dates_in_any_tool(engine: Engine) -> None:
    catalog = Toolset.from_functions([pick]).catalog(["pick"])
    schema = plan_schema(catalog, min_steps=1, max_steps=2)
    grammar = grammar_for(schema, goal="Run it SLOW on 3 March 2026 with limit=5")

    def one(**args: Any) -> dict[str, Any]:
        return {"kind": "plan", "steps": [step(1, "pick", args=args)]}

    assert engine.accepts(grammar, one(mode="slow", day="2026-03-03", limit=5))
    assert engine.accepts(grammar, one(mode="slow", day="2026-03-03", note="any text"))
    assert not engine.accepts(grammar, one(mode="fast", day="2026-03-03"))
    assert not engine.accepts(grammar, one(mode="slow", day="3 March 2026"))
    assert not engine.accepts(grammar, one(mode="slow", day="2026-03-03", limit=6))
    assert not engine.accepts(grammar, one(mode="slow", day="2026-03-03", limit=None))


# -- what the plan schema guarantees, kept --------------------------------------------------


def test_depends_on_names_earlier_steps_once_in_order(engine: Engine, sales_grammar: str) -> None:
    def depending(*ids: str) -> dict[str, Any]:
        written = plan(*MONTH_TOOLS)
        written["steps"][2]["depends_on"] = list(ids)
        return written

    assert engine.accepts(sales_grammar, depending("step_1", "step_2"))
    assert engine.accepts(sales_grammar, depending("step_2"))
    assert engine.accepts(sales_grammar, depending())
    assert not engine.accepts(sales_grammar, depending("step_3"))  # itself
    assert not engine.accepts(sales_grammar, depending("step_4"))  # later
    assert not engine.accepts(sales_grammar, depending("step_2", "step_1"))
    assert not engine.accepts(sales_grammar, depending("step_1", "step_1"))
    first = plan(*MONTH_TOOLS)
    first["steps"][0]["depends_on"] = []
    assert not engine.accepts(sales_grammar, first)  # nothing comes before step 1


def test_titles_are_short_plain_text(engine: Engine, sales_grammar: str) -> None:
    def titled(title: str) -> dict[str, Any]:
        written = plan(*MONTH_TOOLS)
        written["steps"][1]["title"] = title
        return written

    assert engine.accepts(sales_grammar, titled("A" * TITLE_MAX_CHARS))
    assert not engine.accepts(sales_grammar, titled("A" * (TITLE_MAX_CHARS + 1)))
    assert engine.accepts(sales_grammar, titled("Fetch April sales (USD), 2026-04"))
    assert not engine.accepts(sales_grammar, titled(" leading space"))
    assert not engine.accepts(sales_grammar, titled('a "quote"'))
    assert not engine.accepts(sales_grammar, titled(""))


def test_json_comes_without_whitespace(engine: Engine, sales_grammar: str) -> None:
    written = plan(*MONTH_TOOLS)

    assert engine.accepts(sales_grammar, compact(written))
    assert not engine.accepts(sales_grammar, json.dumps(written))
    assert not engine.accepts(sales_grammar, json.dumps(written, indent=2))


def test_the_goal_values_reach_plans_of_a_later_revision(engine: Engine) -> None:
    schema = sales_schema(max_steps=3, min_steps=1, first=3, finished=["step_1", "step_2"])
    grammar = grammar_for(schema, goal=GOAL)
    later = plan("detect_risk_signals", "get_manager_profile", first=3)

    assert engine.accepts(grammar, later)
    assert not engine.accepts(grammar, plan("detect_risk_signals"))  # ids go on from step_3
    later["steps"][0]["depends_on"] = ["step_1", "step_2"]
    later["steps"][1]["depends_on"] = ["step_2", "step_3"]
    assert engine.accepts(grammar, later)
    later["steps"][1]["depends_on"] = ["step_4"]
    assert not engine.accepts(grammar, later)


def test_instruction_steps_may_come_between_tools(engine: Engine) -> None:
    grammar = grammar_for(sales_schema(max_steps=4, min_steps=1, instructions=True), goal=GOAL)
    note = {"id": "step_2", "title": "Think", "instruction": "Compare the two months."}

    written = plan("fetch_sales_data", "x", "fetch_refund_data")
    written["steps"][1] = note
    assert engine.accepts(grammar, written)
    written["steps"][2]["tool"] = "fetch_sales_data"
    assert not engine.accepts(grammar, written)
    many = {"kind": "plan", "steps": [dict(note, id=f"step_{n}") for n in range(1, 5)]}
    assert engine.accepts(grammar, many)


def test_the_replanners_decision_keeps_its_respond_branch(engine: Engine) -> None:
    schema = decision_schema(sales_catalog(), max_steps=3, first=2, finished=["step_1"])
    grammar = grammar_for(schema, goal=GOAL)

    assert engine.accepts(grammar, {"kind": "respond", "response": "All done."})
    assert engine.accepts(grammar, plan("detect_risk_signals", first=2))
    assert not engine.accepts(grammar, plan("detect_risk_signals", "detect_risk_signals", first=2))
    assert not engine.accepts(grammar, plan("detect_risk_signals", first=1))


def test_any_schema_gets_the_goal_values_in_its_tool_arguments(engine: Engine) -> None:
    grammar = grammar_for(action_schema(sales_catalog()), goal=GOAL)
    call = {"kind": "call", "tool": "fetch_sales_data", "args": {"month": "2026-04"}}

    assert engine.accepts(grammar, call)
    assert not engine.accepts(grammar, dict(call, args={"month": "April 2026"}))
    assert engine.accepts(grammar, {"kind": "finish", "result": "April 2026 was fine"})
    assert not engine.accepts(grammar, json.dumps(call))  # compact here too


def many_tools(count: int) -> list[dict[str, Any]]:
    return [
        {"name": f"tool_{i}", "description": "", "args": {"type": "object", "properties": {}}}
        for i in range(count)
    ]


def bare(*indexes: int) -> dict[str, Any]:
    steps = [
        {"id": f"step_{n}", "title": "T", "tool": f"tool_{i}", "args": {}}
        for n, i in enumerate(indexes, start=1)
    ]
    return {"kind": "plan", "steps": steps}


def test_a_large_catalog_takes_tools_in_catalog_order(engine: Engine) -> None:
    grammar = grammar_for(plan_schema(many_tools(14), min_steps=3, max_steps=8))

    assert engine.accepts(grammar, bare(0, 5, 13))
    assert engine.accepts(grammar, bare(1, 2, 3, 4, 5, 6, 7, 8))
    assert not engine.accepts(grammar, bare(5, 0, 13))  # out of catalog order
    assert not engine.accepts(grammar, bare(0, 5, 5))
    assert len(grammar.splitlines()) < STATE_CAP  # the catalog does not blow the grammar up


def test_a_small_catalog_takes_tools_in_any_order(engine: Engine) -> None:
    grammar = grammar_for(plan_schema(many_tools(6), min_steps=3, max_steps=8))

    assert engine.accepts(grammar, bare(5, 0, 3))
    assert engine.accepts(grammar, bare(5, 4, 3, 2, 1, 0))
    assert not engine.accepts(grammar, bare(5, 0, 5))


def test_too_few_tools_for_the_fewest_steps_keeps_the_schemas_plan(engine: Engine) -> None:
    grammar = grammar_for(plan_schema(many_tools(2), min_steps=3, max_steps=4))

    assert engine.accepts(grammar, bare(0, 1, 0))  # no plan could avoid a repeat
    assert not engine.accepts(grammar, bare(0, 1))
    assert not engine.accepts(grammar, json.dumps(bare(0, 1, 0)))  # still compact


# -- every plan the grammar takes is one the schema and the policy take --------------------

TOOL_ORDERS = st.lists(st.sampled_from(SEED_TOOLS), min_size=1, max_size=7)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(tools=TOOL_ORDERS, depends=st.lists(st.sets(st.integers(1, 7)), min_size=7, max_size=7))
def test_accepted_plans_pass_the_schema_and_the_policy(
    engine: Engine, sales_grammar: str, tools: list[str], depends: list[set[int]]
) -> None:
    written = plan(*tools)
    for index, wanted in enumerate(depends[: len(tools)]):
        if wanted:
            written["steps"][index]["depends_on"] = [f"step_{n}" for n in sorted(wanted)]
    valid = len(tools) == len(set(tools)) >= MIN_PLAN_STEPS and all(
        max(wanted, default=0) <= index for index, wanted in enumerate(depends[: len(tools)])
    )

    assert engine.accepts(sales_grammar, written) == valid
    if valid:
        jsonschema.validate(written, sales_schema())
        validate_plan_action(written, max_plan_steps=10, allowed_tools=SEED_TOOLS)


# -- the real model ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_smollm2_writes_a_plan_without_repeats_in_the_tools_forms() -> None:
    gguf = require_local_extra()
    from llama_cpp import Llama, LlamaGrammar

    catalog = sales_catalog()
    payload = {"goal": GOAL, "max_plan_steps": 10, "available_tools": catalog}
    messages = [
        {"role": "system", "content": render("planner", min_steps=3, max_steps=10)},
        {"role": "user", "content": json.dumps(payload)},
    ]
    grammar = grammar_for(sales_schema(), goal=GOAL)
    llama = Llama(model_path=str(gguf), n_ctx=4096, n_threads=1, verbose=False)
    try:
        answer = llama.create_chat_completion(
            messages=messages,  # type: ignore[arg-type]
            grammar=LlamaGrammar.from_string(grammar, verbose=False),
            temperature=0,
            max_tokens=1024,
        )
    finally:
        llama.close()

    text = answer["choices"][0]["message"]["content"]  # type: ignore[index]
    written = json.loads(text)
    tools = [s["tool"] for s in written["steps"]]
    assert len(tools) == len(set(tools)) >= MIN_PLAN_STEPS, text
    for s in written["steps"]:
        assert s["args"] == args_for(s["tool"]), text
    validate_plan_action(written, max_plan_steps=10, allowed_tools=SEED_TOOLS)
