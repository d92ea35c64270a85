"""Tools of other frameworks (JSON-schema tools, LangChain, pydantic-ai) in real runs."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.tools import InjectedToolArg
from langchain_core.tools import tool as langchain_tool
from pydantic_ai import RunContext, Tool

from taskdecomp import (
    Budget,
    ScriptedModel,
    ToolsetError,
    approve_sync,
    framework_tool,
    open_store,
    run_sync,
    schema_tool,
    tool,
)
from taskdecomp.tools import Toolset, load_toolset
from tests.clitools import cli
from tests.conftest import ROOT, SALES_TOOLS
from tests.frameworks import mixed_tools
from tests.support import plan_of, step

HERE = Path(__file__).resolve().parent / "frameworks"
MIXED = HERE / "mixed_tools.py"
BUDGET = Budget(max_plan_steps=8, max_execute_steps=8, max_tool_calls=8)

EVERY_KIND = [
    ("word_count", {"text": "one two three"}, 3),
    ("shout", {"text": "hey", "times": 2}, "HEY!HEY"),
    ("lookup", {"key": "abc"}, {"key": "abc", "value": 3}),
    ("add", {"a": 40}, 42),
    ("scale", {"values": [1, 2.5], "factor": 2}, [2.0, 5.0]),
    ("convert", {"amount": 10, "currency": "USD"}, {"amount": 11.0, "currency": "USD"}),
]


@pytest.fixture(autouse=True)
def fresh_calls() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    mixed_tools.CALLS.clear()
    yield mixed_tools.CALLS
    mixed_tools.CALLS.clear()


def model_for(*steps: dict[str, Any]) -> ScriptedModel:
    return ScriptedModel(rules=[("max_plan_steps", plan_of(*steps))], default="all done")


def test_every_kind_runs_through_the_gateway_with_its_observation() -> None:
    steps = [step(n, name, args) for n, (name, args, _) in enumerate(EVERY_KIND, 1)]
    steps.append(step(7, "send", {"to": "boss@example.com"}))
    result = run_sync(
        "use them all", tools=mixed_tools.TOOLS, model=model_for(*steps), budget=BUDGET
    )
    assert (result.status, result.stop_reason, result.answer) == ("ok", "success", "all done")
    observations = {entry.plan_step.tool: entry.observation for entry in result.history}
    for name, _, expected in EVERY_KIND:
        assert observations[name] == expected, name
    sent = observations["send"]
    assert sent["sent_to"] == "boss@example.com"
    assert isinstance(sent["key"], str) and sent["key"]  # an idempotent tool gets its key
    called = dict(mixed_tools.CALLS)
    assert called["add"] == {"a": 40, "b": 2}  # pydantic-ai's default filled in
    assert called["scale"] == {"values": [1.0, 2.5], "factor": 2.0}  # and its types


@pytest.mark.parametrize(
    ("name", "args", "why"),
    [
        ("word_count", {"text": 3}, "text"),  # LangChain, its generated args model
        ("word_count", {"text": "a", "extra": 1}, "extra"),  # unknown arguments refused
        ("shout", {"text": "hey", "times": 0}, "minimum"),  # LangChain, a JSON schema
        ("lookup", {"key": "ABC"}, "pattern"),  # LangChain, its own args_schema model
        ("add", {"a": "forty"}, "a"),  # pydantic-ai, checked by its own validator
        ("add", {"a": 1, "c": 2}, "c"),
        ("convert", {"amount": 1, "currency": "EUR"}, "EUR"),  # an OpenAI definition
        ("send", {}, "to"),
    ],
)
def test_a_bad_argument_stops_the_run_before_the_call(
    name: str, args: dict[str, Any], why: str
) -> None:
    steps = [step(1, name, args), step(2, "add", {"a": 1}), step(3, "add", {"a": 2})]
    result = run_sync("bad", tools=mixed_tools.TOOLS, model=model_for(*steps), budget=BUDGET)
    assert result.stop_reason == f"tool_bad_args:{name}"
    assert why in (result.trace[0].error or "")
    assert mixed_tools.CALLS == []


def test_the_planner_sees_each_tools_own_schema() -> None:
    toolset = Toolset.from_functions(mixed_tools.TOOLS)
    catalog = {entry["name"]: entry for entry in toolset.catalog(toolset)}
    assert catalog["add"]["description"] == "Add two numbers."
    assert catalog["add"]["args"]["properties"]["a"] == {
        "description": "the first number.",
        "type": "integer",
    }
    assert catalog["convert"]["args"] == mixed_tools.CONVERT["function"]["parameters"]
    assert catalog["lookup"]["args"]["properties"]["key"]["pattern"] == "^[a-z]+$"
    assert catalog["shout"]["args"]["required"] == ["text"]


def test_tools_of_other_frameworks_are_unsafe_unless_told_otherwise() -> None:
    toolset = Toolset.from_functions(mixed_tools.TOOLS)
    classes = {name: spec.side_effects for name, spec in toolset.items()}
    assert classes == {
        "word_count": "unsafe",
        "shout": "unsafe",
        "lookup": "read_only",
        "add": "unsafe",
        "scale": "unsafe",
        "convert": "unsafe",
        "send": "idempotent",
    }
    assert (toolset["lookup"].timeout, toolset["send"].timeout) == (30, 30)
    assert toolset["send"].takes_idempotency_key
    renamed = framework_tool(mixed_tools.word_count, name="words", description="Count.")
    assert (renamed.name, renamed.description, renamed.side_effects) == (
        "words",
        "Count.",
        "unsafe",
    )


def test_options_are_checked_as_tools_options_are() -> None:
    with pytest.raises(ValueError, match="tool 'word_count' is unsafe"):
        framework_tool(mixed_tools.word_count, retries=2)
    with pytest.raises(ValueError, match="tool 'convert' is unsafe"):
        schema_tool(mixed_tools.CONVERT, mixed_tools.convert, retries=2)
    with pytest.raises(ValueError, match="side_effects must be"):
        framework_tool(Tool(mixed_tools.add), side_effects="maybe")
    spec = framework_tool(Tool(mixed_tools.add), side_effects="read_only", retries=2)
    assert (spec.side_effects, spec.retries) == ("read_only", 2)
    with pytest.raises(ToolsetError, match="is not a tool of a framework"):
        framework_tool(mixed_tools.add)


def test_a_pydantic_ai_tool_that_requires_approval_pauses_the_run(tmp_path: Path) -> None:
    tools = [Tool(mixed_tools.add, requires_approval=True), mixed_tools.word_count]
    steps = [
        step(1, "word_count", {"text": "a b"}),
        step(2, "add", {"a": 1}),
        step(3, "word_count", {"text": "c"}),
    ]
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        paused = run_sync(
            "approve", tools=tools, model=model_for(*steps), budget=BUDGET, store=store
        )
        assert paused.stop_reason == "awaiting_approval"
        assert [name for name, _ in mixed_tools.CALLS] == ["word_count"]
        done = approve_sync(paused.run_id, store=store, tools=tools, model=model_for(*steps))
    finally:
        store.close()
    assert done.stop_reason == "success"
    assert [name for name, _ in mixed_tools.CALLS] == ["word_count", "add", "word_count"]


def test_a_json_schema_tool_is_a_pair_in_either_shape_of_definition() -> None:
    bare = dict(mixed_tools.CONVERT["function"])
    for definition in (mixed_tools.CONVERT, bare):
        spec = Toolset.from_functions([(definition, mixed_tools.convert)])["convert"]
        assert spec.check_args({"amount": 2, "currency": "GBP"}) == {
            "amount": 2,
            "currency": "GBP",
        }


class Doubler:
    """A callable object whose call is a coroutine."""

    async def __call__(self, n: int) -> int:
        await asyncio.sleep(0)
        return 2 * n


def test_a_json_schema_tool_calls_an_async_callable_object_on_the_loop() -> None:
    definition = {"name": "double", "parameters": {"type": "object", "properties": {"n": {}}}}
    spec = schema_tool(definition, Doubler(), side_effects="read_only")
    assert spec.is_async
    steps = [step(n, "double", {"n": n}) for n in (1, 2, 3)]
    result = run_sync("double", tools=[spec], model=model_for(*steps), budget=BUDGET)
    assert result.status == "ok", result.message
    assert [entry.observation for entry in result.history] == [2, 4, 6]  # awaited


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (mixed_tools.CONVERT, "a function definition alone"),
        (({"name": "f", "paramaters": {}}, print), r"unknown keys \['paramaters'\]"),
        (({"description": "no name"}, print), "has no 'name'"),
        (({"name": "f", "parameters": {"type": "array"}}, print), "JSON schema of an object"),
        (({"name": "f", "parameters": {"type": "object", "required": 3}}, print), "not a valid"),
        (({"type": "function", "function": {"name": "f"}, "x": 1}, print), "only the keys"),
        (({"name": "f"}, "print"), "tool 'f': 'print' is not callable"),
    ],
)
def test_a_malformed_definition_is_one_line_naming_it(item: Any, message: str) -> None:
    with pytest.raises(ToolsetError, match=message) as refused:
        Toolset.from_functions([item])
    assert "\n" not in str(refused.value)


def needs_user(query: str, user: Annotated[str, InjectedToolArg]) -> str:
    """Search as a user."""
    return query + user


def greet(ctx: RunContext[str], name: str) -> str:
    """Greet."""
    return name


def shout_plain(text: str) -> str:
    """Shout."""
    return text.upper()


class Socketish:
    """Not data."""


def opaque(conn: Socketish, sql: str) -> str:
    """Query."""
    return sql


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (Tool(greet), "tool 'greet': parameter 'ctx' is a pydantic-ai RunContext"),
        (
            Tool(shout_plain, prepare=lambda ctx, d: d),
            "tool 'shout_plain': its prepare function takes a pydantic-ai RunContext",
        ),
        (
            langchain_tool(needs_user),
            "tool 'needs_user': parameter 'user' is injected by LangChain",
        ),
        (
            langchain_tool(opaque),
            "tool 'opaque': parameter 'conn' has type Socketish, which pydantic cannot describe",
        ),
        (opaque, "tool 'opaque': parameter 'conn' has type Socketish, which pydantic cannot"),
    ],
)
def test_a_tool_taskdecomp_cannot_serve_is_one_line_naming_the_parameter(
    item: Any, message: str
) -> None:
    with pytest.raises(ToolsetError, match=message) as refused:
        Toolset.from_functions([item])
    assert "\n" not in str(refused.value)


def test_a_parameter_pydantic_validates_but_cannot_describe_is_refused_too() -> None:
    def hook(on_done: Callable[[int], int], n: int) -> int:
        """Call back."""
        return on_done(n)

    with pytest.raises(ToolsetError, match="tool 'hook': parameter 'on_done' has type"):
        Toolset.from_functions([hook])


def test_tool_options_on_a_foreign_object_point_to_the_adapter() -> None:
    marked = tool(timeout=5)(langchain_tool(shout_plain))
    with pytest.raises(ToolsetError, match=r"taskdecomp\.framework_tool"):
        Toolset.from_functions([marked])
    with pytest.raises(ToolsetError, match=r"taskdecomp\.schema_tool"):
        Toolset.from_functions([(mixed_tools.CONVERT, tool(timeout=5)(mixed_tools.convert))])


# -- toolset files and the command line -------------------------------------------------------


def test_a_bad_item_of_tools_is_named_by_its_place(tmp_path: Path) -> None:
    path = tmp_path / "tools.py"
    path.write_text("def ok(x: int) -> int:\n    return x\n\nTOOLS = [ok, 42]\n")
    with pytest.raises(ToolsetError, match=r"TOOLS\[1\]: 42 is not a tool"):
        load_toolset(path)


def test_process_isolation_does_not_pretend_to_isolate_a_framework_tool(tmp_path: Path) -> None:
    path = tmp_path / "tools.py"
    path.write_text(
        "from langchain_core.tools import tool\n\n"
        "ISOLATION = 'process'\n\n"
        "def own(x: int) -> int:\n    return x\n\n"
        "@tool\ndef words(text: str) -> int:\n    '''Count words.'''\n    return 1\n\n"
        "TOOLS = [own, words]\n"
    )
    with pytest.raises(ToolsetError, match=r"TOOLS\[1\]: ISOLATION = 'process' cannot isolate"):
        load_toolset(path)


def test_a_toolset_file_that_fails_to_import_is_one_line_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "tools.py"
    path.write_text(
        "from pydantic_ai import Tool\n\n"
        "class Conn:\n    pass\n\n"
        "def query(conn: Conn) -> str:\n    return ''\n\n"
        "TOOLS = [Tool(query)]\n"
    )
    with pytest.raises(ToolsetError, match=r"failed to import: .*Conn.* \(at line 9\)$") as failed:
        load_toolset(path)
    assert "\n" not in str(failed.value)


def test_taskdecomp_tools_lists_every_kind(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = cli(capsys, "tools", str(MIXED), "--json")
    assert code == 0
    listed = {entry["name"]: entry for entry in json.loads(out)["tools"]}
    assert list(listed) == ["word_count", "shout", "lookup", "add", "scale", "convert", "send"]
    assert listed["send"]["side_effects"] == "idempotent"
    assert listed["add"]["side_effects"] == "unsafe"


def test_taskdecomp_run_uses_a_toolset_file_of_every_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = [step(n, name, args) for n, (name, args, _) in enumerate(EVERY_KIND, 1)]
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "rules": [{"match": "max_plan_steps", "response": plan_of(*steps)}],
                "default": "all done",
            }
        )
    )
    code, out, _ = cli(
        capsys,
        "run",
        "use them all",
        "--tools",
        str(MIXED),
        "--model",
        f"scripted:{script}",
        "--max-plan-steps",
        "8",
        "--json",
    )
    result = json.loads(out)
    assert (code, result["stop_reason"], result["answer"]) == (0, "success", "all done")
    observations = [entry["observation"] for entry in result["history"]]
    assert observations == [expected for _, _, expected in EVERY_KIND]


@pytest.mark.parametrize(
    ("toolset", "message"),
    [
        ("context_tool.py", "TOOLS[1]: tool 'greet': parameter 'ctx' is a pydantic-ai RunContext"),
        ("opaque_param.py", "TOOLS[0]: tool 'query': parameter 'connection' has type Connection"),
    ],
)
@pytest.mark.parametrize("command", ["tools", "run"])
def test_a_tool_the_engine_cannot_serve_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], toolset: str, message: str, command: str
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["never asked"]))
    argv = {
        "tools": ["tools", str(HERE / toolset)],
        "run": ["run", "goal", "--tools", str(HERE / toolset), "--model", f"scripted:{script}"],
    }[command]
    code, out, err = cli(capsys, *argv)
    assert code == 2
    assert out == ""
    [line] = err.strip().splitlines()
    assert message in line


def test_loading_a_plain_toolset_imports_no_framework() -> None:
    program = (
        "import sys\n"
        "import taskdecomp\n"
        "from taskdecomp.tools import load_toolset\n"
        f"toolset = load_toolset({str(SALES_TOOLS)!r})\n"
        "spec = taskdecomp.schema_tool({'name': 'f', 'parameters': {'type': 'object'}}, print)\n"
        "assert spec.side_effects == 'unsafe'\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in\n"
        "    ('langchain_core', 'langchain', 'pydantic_ai'))\n"
        "print(len(toolset), loaded)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.stdout.split(" ", 1)[1].strip() == "[]"
    assert int(done.stdout.split(" ", 1)[0]) == 5
