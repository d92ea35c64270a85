"""Greedy decoding under a grammar, checked token for token against llama-cpp-python itself."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from taskdecomp import load_toolset
from taskdecomp.models.schemas import plan_schema
from taskdecomp.prompts import render
from tests.conftest import SALES_TOOLS
from tests.models.conftest import require_local_extra
from tests.support import SEED_GOAL

Messages = Sequence[Mapping[str, Any]]

PERSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
RARE = 'root ::= "Ж" [a-z] [a-z]? "𝄞"'
"""Characters the model does not expect, of two and four UTF-8 bytes."""


@pytest.fixture(scope="module")
def llama() -> Iterator[Any]:
    gguf = require_local_extra()
    from llama_cpp import Llama

    model = Llama(model_path=str(gguf), n_ctx=4096, n_threads=1, seed=0, verbose=False)
    yield model
    model.close()


def schema_grammar(schema: Mapping[str, Any]) -> str:
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    return str(json_schema_to_gbnf(json.dumps(schema)))


def plan_messages(goal: str = SEED_GOAL, system: str | None = None) -> list[dict[str, str]]:
    toolset = load_toolset(SALES_TOOLS)
    catalog = toolset.catalog(toolset.keys())
    payload = {"available_tools": catalog, "max_plan_steps": 6, "goal": goal}  # as the planner
    return [
        {"role": "system", "content": system or render("planner", min_steps=3, max_steps=6)},
        {"role": "user", "content": json.dumps(payload)},
    ]


def plan_grammar() -> str:
    toolset = load_toolset(SALES_TOOLS)
    return schema_grammar(plan_schema(toolset.catalog(toolset.keys()), min_steps=3, max_steps=6))


def reference(llama: Any, messages: Messages, grammar: str | None, max_tokens: int) -> Any:
    """llama-cpp-python's own greedy answer, its finish reason and the tokens it evaluated."""
    from llama_cpp import LlamaGrammar

    from taskdecomp.models.llama_decode import prompt_tokens

    llama.reset()
    answer = llama.create_chat_completion(
        messages=list(messages),
        grammar=LlamaGrammar.from_string(grammar) if grammar else None,
        temperature=0,
        max_tokens=max_tokens,
    )
    n_prompt = len(prompt_tokens(llama, messages))
    evaluated = [int(token) for token in llama._input_ids[n_prompt:]]
    choice = answer["choices"][0]
    return choice["message"]["content"], choice["finish_reason"], evaluated


def assert_same_answer(decoded: Any, expected: Any) -> None:
    text, finish, evaluated = expected
    assert decoded.text == text
    assert decoded.finish_reason == finish
    # The answer's last token is evaluated only when another one follows it.
    written = decoded.tokens[:-1] if finish == "length" else decoded.tokens
    assert list(written) == evaluated


def assert_restored(
    llama: Any, messages: Messages, decoded: Any, cache: Any, expected: Any
) -> None:
    """The answer is the reference one, and its shared prefix came from ``cache`` once."""
    from taskdecomp.models.llama_decode import prefix_length, prompt_tokens

    assert decoded.tokens_reused == prefix_length(llama, messages, prompt_tokens(llama, messages))
    assert cache.hits == 1
    assert_same_answer(decoded, expected)


CASES = {
    "json-schema object": (
        [{"role": "user", "content": "Give a person's name and age as JSON."}],
        schema_grammar(PERSON_SCHEMA),
        60,
    ),
    "plan": (plan_messages(), None, 120),  # the plan grammar is built in the test
    "free text": ([{"role": "user", "content": "Write one sentence about the sea."}], None, 30),
    "rare characters": ([{"role": "user", "content": "Say hello."}], RARE, 12),
}


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_answer_is_token_identical_to_create_chat_completion(llama: Any, case: str) -> None:
    from taskdecomp.models.llama_decode import decode

    messages, grammar, max_tokens = CASES[case]
    if case == "plan":
        grammar = plan_grammar()
    expected = reference(llama, messages, grammar, max_tokens)
    llama.reset()

    decoded = decode(llama, messages, grammar=grammar, max_tokens=max_tokens, close_repeats=False)

    assert_same_answer(decoded, expected)
    assert decoded.tokens_out > 0


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_free_text_that_loops_is_cut_where_the_loop_began(llama: Any) -> None:
    from taskdecomp.models.llama_decode import REPEAT_WINDOW, decode

    messages = [{"role": "user", "content": "List the days of the week, over and over."}]
    looping, finish, _ = reference(llama, messages, None, 200)
    assert finish == "length"  # left alone, greedy decoding loops to the limit
    llama.reset()

    decoded = decode(llama, messages, max_tokens=200)

    assert decoded.finish_reason == "repeated"
    assert decoded.text and looping.startswith(decoded.text)
    assert len(decoded.text) < len(looping) / 2
    tokens = list(decoded.tokens)
    windows = [tuple(tokens[i : i + REPEAT_WINDOW]) for i in range(len(tokens) - REPEAT_WINDOW + 1)]
    assert len(windows) == len(set(windows))  # what is left does not repeat itself


def one_string_grammar(key: str) -> str:
    """llama-cpp-python's grammar for an object with one string, ``key``."""
    schema = {
        "type": "object",
        "properties": {key: {"type": "string"}},
        "required": [key],
        "additionalProperties": False,
    }
    return schema_grammar(schema)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_json_string_that_loops_is_closed_and_the_answer_stays_valid(llama: Any) -> None:
    from taskdecomp.models.llama_decode import decode

    grammar = one_string_grammar("days")
    messages = [{"role": "user", "content": "As JSON: list the days of the week, over and over."}]
    looping, _, _ = reference(llama, messages, grammar, 300)
    llama.reset()

    decoded = decode(llama, messages, grammar=grammar, max_tokens=300)

    assert decoded.closed_repeat and decoded.finish_reason == "stop"
    assert decoded.tokens_out < 150 and len(decoded.text) < len(looping)
    days = json.loads(decoded.text)["days"]
    assert days and looping.startswith(decoded.text[: decoded.text.rindex('"')])


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_json_string_still_open_near_the_limit_is_closed_and_the_answer_stays_valid(
    llama: Any,
) -> None:
    from taskdecomp.models.llama_decode import CLOSE_RESERVE, decode

    grammar = one_string_grammar("numbers")
    messages = [{"role": "user", "content": "As JSON: count from 1 to 1000, in words."}]
    limit = CLOSE_RESERVE + 24
    running, finish, _ = reference(llama, messages, grammar, limit)
    assert finish == "length"  # left alone, the string runs to the limit: not JSON
    llama.reset()

    decoded = decode(llama, messages, grammar=grammar, max_tokens=limit)

    assert decoded.closed_at_limit and decoded.finish_reason == "stop"
    assert json.loads(decoded.text)["numbers"]
    assert running.startswith(decoded.text[: decoded.text.rindex('"')])


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_grammar_that_forbids_the_favourite_token_still_yields_a_valid_answer(
    llama: Any,
) -> None:
    from taskdecomp.models.llama_decode import decode

    messages = [{"role": "user", "content": "Say hello."}]
    favourite = decode(llama, messages, max_tokens=1).tokens[0]
    pieces: list[str] = []

    decoded = decode(llama, messages, grammar=RARE, max_tokens=12, on_piece=pieces.append)

    assert re.fullmatch("Ж[a-z]{1,2}𝄞", decoded.text), decoded.text
    assert decoded.tokens[0] != favourite
    assert decoded.finish_reason == "stop"  # the grammar is complete: only the end is left
    assert decoded.vocabulary_scans >= 1  # "Ж" is not among the 256 likeliest tokens
    assert "".join(pieces) == decoded.text
    assert all("\ufffd" not in piece for piece in pieces)
    assert len(pieces) < decoded.tokens_out  # a 4-byte character spans several tokens


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_stop_event_ends_the_answer_between_tokens(llama: Any) -> None:
    from taskdecomp.models.llama_decode import decode

    stop = threading.Event()
    pieces: list[str] = []

    def hear(piece: str) -> None:
        pieces.append(piece)
        if len(pieces) == 3:
            stop.set()

    messages = [{"role": "user", "content": "Write a long story about the sea."}]
    decoded = decode(llama, messages, max_tokens=200, stop=stop, on_piece=hear)

    assert decoded.finish_reason == "cancelled"
    assert len(pieces) == 3
    assert decoded.tokens_out == 3
    assert decoded.text == "".join(pieces)
    assert decode(llama, messages, max_tokens=200, stop=stop).tokens_out == 0


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_second_request_with_the_same_system_prompt_evaluates_only_its_own_part(
    llama: Any,
) -> None:
    from taskdecomp.models.llama_decode import decode, prefix_length, prompt_tokens

    first, second = plan_messages("Summarise March 2026 sales."), plan_messages()
    grammar = plan_grammar()
    expected = reference(llama, second, grammar, 40)
    llama.reset()
    decode(llama, first, grammar=grammar, max_tokens=40)

    decoded = decode(llama, second, grammar=grammar, max_tokens=40, close_repeats=False)

    tokens = prompt_tokens(llama, second)
    assert decoded.tokens_in == len(tokens)
    assert decoded.tokens_reused >= prefix_length(llama, second, tokens) > 200
    assert_same_answer(decoded, expected)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_saved_prefix_is_restored_after_another_prompt_took_the_context(llama: Any) -> None:
    from taskdecomp.models.llama_decode import PrefixCache, decode

    cache = PrefixCache()
    messages = plan_messages()
    grammar = plan_grammar()
    expected = reference(llama, messages, grammar, 40)
    llama.reset()
    decode(llama, plan_messages("Summarise March 2026 sales."), max_tokens=5, cache=cache)
    other = [{"role": "system", "content": "You write haiku."}, {"role": "user", "content": "Sea"}]
    decode(llama, other, max_tokens=5, cache=cache)

    decoded = decode(
        llama, messages, grammar=grammar, max_tokens=40, cache=cache, close_repeats=False
    )

    assert_restored(llama, messages, decoded, cache, expected)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_catalog_written_before_the_goal_is_shared_by_requests_with_other_goals(
    llama: Any,
) -> None:
    from taskdecomp.models.llama_decode import PrefixCache, decode, prefix_length, prompt_tokens

    cache = PrefixCache()
    first, second = plan_messages("Summarise March 2026 sales."), plan_messages()
    content = second[-1]["content"]
    shared = content[: content.rindex('"goal"')]
    assert first[-1]["content"].startswith(shared)
    grammar = plan_grammar()
    expected = reference(llama, second, grammar, 40)
    llama.reset()
    decode(llama, first, max_tokens=5, cache=cache, shared_text=shared)
    llama.reset()  # the context holds nothing: the saved state must serve

    decoded = decode(
        llama, second, grammar=grammar, max_tokens=40, cache=cache, shared_text=shared,
        close_repeats=False,
    )  # fmt: skip

    tokens = prompt_tokens(llama, second)
    assert decoded.tokens_reused == prefix_length(llama, second, tokens, shared_text=shared)
    assert decoded.tokens_reused > prefix_length(llama, second, tokens) + 200  # the catalog too
    assert cache.hits == 1
    assert_same_answer(decoded, expected)


SAVE_IN_ANOTHER_PROCESS = """
import json, sys
from llama_cpp import Llama
from taskdecomp.models.llama_decode import PrefixCache, decode
llama = Llama(model_path=sys.argv[1], n_ctx=4096, n_threads=1, seed=0, verbose=False)
decoded = decode(llama, json.loads(sys.argv[3]), max_tokens=3, cache=PrefixCache(sys.argv[2]))
print(decoded.tokens_reused)
llama.close()
"""


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_prefix_saved_on_disk_by_another_process_is_restored(llama: Any, tmp_path: Path) -> None:
    from taskdecomp.models.llama_decode import PrefixCache, decode

    messages = plan_messages()
    grammar = plan_grammar()
    expected = reference(llama, messages, grammar, 40)
    other = plan_messages("Summarise March 2026 sales.")
    saved = subprocess.run(
        [sys.executable, "-c", SAVE_IN_ANOTHER_PROCESS, llama.model_path, str(tmp_path),
         json.dumps(other)],
        capture_output=True, text=True, check=True, timeout=600,
    )  # fmt: skip
    assert saved.stdout.split() == ["0"]  # it started from nothing
    assert len(list(tmp_path.glob("*.seq"))) == 1
    llama.reset()

    cache = PrefixCache(tmp_path)
    decoded = decode(
        llama, messages, grammar=grammar, max_tokens=40, cache=cache, close_repeats=False
    )

    assert_restored(llama, messages, decoded, cache, expected)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_damaged_state_file_is_evaluated_instead(llama: Any, tmp_path: Path) -> None:
    from taskdecomp.models.llama_decode import PrefixCache, decode

    messages = plan_messages()
    expected = reference(llama, messages, None, 10)
    llama.reset()
    decode(llama, messages, max_tokens=1, cache=PrefixCache(tmp_path))
    (saved,) = tmp_path.glob("*.seq")
    saved.write_bytes(saved.read_bytes()[:1000])
    llama.reset()
    cache = PrefixCache(tmp_path)

    decoded = decode(llama, messages, max_tokens=10, cache=cache)

    assert decoded.tokens_reused == 0
    assert (cache.hits, cache.misses) == (0, 1)
    assert_same_answer(decoded, expected)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_prompt_longer_than_the_context_or_a_broken_grammar_is_a_value_error(
    llama: Any,
) -> None:
    from taskdecomp.models.llama_decode import decode

    with pytest.raises(ValueError, match="exceed context window of 4096"):
        decode(llama, [{"role": "user", "content": "sales " * 5000}])
    with pytest.raises(ValueError, match="grammar does not parse"):
        decode(llama, [{"role": "user", "content": "hi"}], grammar='root ::= ("a"')
