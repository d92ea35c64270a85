"""Toolsets: loading, @tool options, argument schemas from type hints."""

from __future__ import annotations

import gc
import http.server
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import Field, ValidationError

from taskdecomp import Toolset, ToolsetError, ToolSpec, load_toolset, tool
from taskdecomp.answertype import answer_type
from taskdecomp.errors import ConfigError
from taskdecomp.schemacheck import SchemaMismatch, schema_checker
from tests.conftest import SALES_TOOLS
from tests.support import SEED_TOOLS

Day = Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}$", description="a day")]


def test_the_seed_toolset_loads_unchanged() -> None:
    toolset = load_toolset(SALES_TOOLS)
    assert sorted(toolset) == sorted(SEED_TOOLS)
    schema = toolset["get_manager_profile"].args_schema()
    assert schema["properties"]["manager_id"]["type"] == "integer"
    assert schema["required"] == ["manager_id"]
    assert toolset["fetch_sales_data"].side_effects == "read_only"


def test_an_argument_schema_is_a_copy_of_its_own_each_time() -> None:
    spec = load_toolset(SALES_TOOLS)["get_manager_profile"]
    first = spec.args_schema()
    first["properties"]["manager_id"]["type"] = "string"  # a caller that edits its copy
    first["required"].clear()
    again = spec.args_schema()
    assert again["properties"]["manager_id"]["type"] == "integer"
    assert again["required"] == ["manager_id"]
    pydantic = spec.args_model.model_json_schema()
    assert again == {key: value for key, value in pydantic.items() if key != "title"}


def test_catalog_lists_only_allowed_tools_in_definition_order() -> None:
    toolset = load_toolset(SALES_TOOLS)
    names = [
        e["name"] for e in toolset.catalog(["detect_risk_signals", "get_manager_profile", "x"])
    ]
    assert names == ["get_manager_profile", "detect_risk_signals"]


def test_tool_options_and_hidden_idempotency_key() -> None:
    @tool(description="Send the report", timeout=2.5, side_effects="idempotent")
    def send(to: str, idempotency_key: str | None = None) -> str:
        """Docstring line."""
        return to

    spec = ToolSpec.from_function(send)
    assert (spec.description, spec.timeout, spec.side_effects) == (
        "Send the report",
        2.5,
        "idempotent",
    )
    assert spec.takes_idempotency_key
    assert "idempotency_key" not in spec.args_schema()["properties"]
    assert send("x") == "x"  # the function stays callable


def test_declared_argument_formats_reach_the_schema_and_are_checked() -> None:
    def forecast(city: str, date: Day) -> str:
        return city

    spec = ToolSpec.from_function(forecast)
    date = spec.args_schema()["properties"]["date"]
    assert (date["pattern"], date["description"]) == (r"^\d{4}-\d{2}-\d{2}$", "a day")
    assert spec.args_model.model_validate({"city": "Oslo", "date": "2026-12-24"})
    with pytest.raises(ValidationError, match="pattern"):
        spec.args_model.model_validate({"city": "Oslo", "date": "2026-12-24T10:00"})


def test_description_defaults_to_the_docstring() -> None:
    @tool
    def lookup(key: str) -> str:
        """Look a key up.

        More words.
        """
        return key

    assert ToolSpec.from_function(lookup).description == "Look a key up."


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"side_effects": "risky"}, "side_effects"), ({"timeout": 0}, "timeout")],
)
def test_bad_tool_options_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tool(**kwargs)  # type: ignore[arg-type]


def test_tools_list_wins_over_public_functions(tmp_path: Path) -> None:
    path = tmp_path / "mytools.py"
    path.write_text(
        "def a(x: int) -> int:\n    return x\n\n"
        "def b(x: int) -> int:\n    return x\n\n"
        "TOOLS = [b]\n"
    )
    assert list(load_toolset(path)) == ["b"]


def test_only_typed_public_functions_defined_in_the_file_count(tmp_path: Path) -> None:
    path = tmp_path / "mytools.py"
    path.write_text(
        "from os.path import join\n\n"
        "def typed(x: int) -> int:\n    return x\n\n"
        "def untyped(x):\n    return x\n\n"
        "def _private(x: int) -> int:\n    return x\n"
    )
    assert list(load_toolset(str(path))) == ["typed"]


def test_a_module_name_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pkg_tools_mod.py").write_text("def hello(name: str) -> str:\n    return name\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert list(load_toolset("pkg_tools_mod")) == ["hello"]


@pytest.mark.parametrize(
    ("content", "source", "message"),
    [
        (None, "missing.py", "does not exist"),
        (None, "no_such_module_xyz", "neither a .py file nor an importable module"),
        ("raise RuntimeError('bad import')\n", "broken.py", "failed to import: bad import"),
        ("X = 1\n", "empty.py", "no tools found"),
        ("TOOLS = 3\n", "weird.py", "TOOLS must be a list"),
        ("def f(x: 'Nope') -> int:\n    return 1\n", "hint.py", "cannot read its type hints"),
        ("def f(x: int, /) -> int:\n    return 1\n", "posonly.py", "positional-only"),
    ],
)
def test_bad_toolsets_are_config_errors(
    tmp_path: Path, content: str | None, source: str, message: str
) -> None:
    if content is not None:
        (tmp_path / source).write_text(content)
    target = str(tmp_path / source) if source.endswith(".py") else source
    with pytest.raises(ToolsetError, match=message):
        load_toolset(target)


def test_duplicate_names_are_refused() -> None:
    def a(x: int) -> int:
        return x

    with pytest.raises(ToolsetError, match="defined twice"):
        Toolset.from_functions([a, a])


@pytest.fixture
def schema_host() -> Iterator[tuple[str, list[str]]]:
    """A local HTTP server that serves a schema to any GET, and the paths it was asked for."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            body = b'{"type": "integer"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


def test_a_remote_schema_reference_is_refused_and_never_fetched(
    schema_host: tuple[str, list[str]],
) -> None:
    url, asked = schema_host
    remote = {"type": "object", "properties": {"x": {"$ref": f"{url}/latest/meta-data/iam"}}}
    with pytest.raises(ToolsetError) as refused:
        ToolSpec(
            name="t", fn=lambda x: x, description="t", timeout=None, side_effects="read_only",
            input_schema=remote, is_async=False,
        )  # fmt: skip
    assert "tool 't'" in str(refused.value) and "/latest/meta-data/iam" in str(refused.value)
    assert "never fetched" in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(ConfigError, match="answer schema refers to"):
        answer_type(remote)
    with pytest.raises(ConfigError, match="'#/\\$defs/gone'"):
        schema_checker({"$ref": "#/$defs/gone"}, what="s", extra="tools")
    assert asked == []


def test_local_schema_references_resolve_and_are_checked() -> None:
    local = {
        "$defs": {"n": {"type": "integer"}},
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/n"}, "y": {"$ref": "#/tail"}},
        "tail": {"$ref": "http://127.0.0.1:9/never"},  # reached only through "#/tail"
    }
    check = schema_checker(local, what="s", extra="tools")
    check({"x": 1})
    with pytest.raises(SchemaMismatch, match="integer"):
        check({"x": "one"})
    with pytest.raises(SchemaMismatch, match="refers to 'http://127"):
        check({"y": 2})


def test_a_toolset_file_loaded_again_reuses_its_argument_models(tmp_path: Path) -> None:
    path = tmp_path / "tools.py"
    path.write_text(
        "from pydantic import BaseModel\n\n\n"
        "class Order(BaseModel):\n    n: int\n\n\n"
        "def plain(n: int, note: str = 'x') -> int:\n    return n\n\n\n"
        "def ordered(order: Order) -> int:\n    return order.n\n"
    )
    first, again = load_toolset(path), load_toolset(path)
    assert first["plain"].fn is not again["plain"].fn  # the file was imported again
    assert first["plain"].args_model is again["plain"].args_model
    assert first["ordered"].args_model is not again["ordered"].args_model  # a new Order
    assert again["plain"].check_args({"n": 3}) == {"n": 3, "note": "x"}
    with pytest.raises(ValueError, match="order"):
        again["ordered"].check_args({"order": {"n": "many"}})


def test_argument_models_of_types_a_toolset_file_defines_are_not_kept(tmp_path: Path) -> None:
    path = tmp_path / "tools.py"
    path.write_text(
        "import enum\n"
        "from typing import Annotated\n"
        "from pydantic import AfterValidator, BaseModel\n\n\n"
        "class Order(BaseModel):\n    n: int\n\n\n"
        "class Size(enum.Enum):\n    S = 's'\n\n\n"
        "def same(n: int) -> int:\n    return n\n\n\n"
        "def direct(order: Order) -> int:\n    return order.n\n\n\n"
        "def inside(orders: list[Order] | None = None) -> int:\n    return 0\n\n\n"
        "def by_default(size: object = Size.S) -> str:\n    return str(size)\n\n\n"
        "def checked(n: Annotated[int, AfterValidator(same)]) -> int:\n    return n\n"
    )
    names = ("direct", "inside", "by_default", "checked")
    loaded = load_toolset(path)
    models = [weakref.ref(loaded[name].args_model) for name in names]
    del loaded
    gc.collect()
    assert [model() for model in models] == [None] * len(names)  # nothing keeps this load's


def test_a_toolset_file_changed_to_equal_types_or_defaults_gets_new_models(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tools.py"
    path.write_text(
        "from typing import Literal\n\n\n"
        "def f(x: int | float, w: tuple[float, ...] = (1, 2)) -> str:\n    return ''\n\n\n"
        "def g(m: Literal['a', 'b']) -> str:\n    return m\n"
    )
    load_toolset(path)
    path.write_text(
        "from typing import Literal\n\n\n"
        "def f(x: float | int, w: tuple[float, ...] = (1.0, 2.0)) -> str:\n    return ''\n\n\n"
        "def g(m: Literal['b', 'a']) -> str:\n    return m\n"
    )  # each equal to the one before, yet described and validated differently
    changed = load_toolset(path)
    assert repr(changed["f"].check_args({"x": "2"})) == "{'x': 2.0, 'w': (1.0, 2.0)}"
    assert changed["g"].args_schema()["properties"]["m"]["enum"] == ["b", "a"]
