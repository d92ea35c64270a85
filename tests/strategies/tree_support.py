"""Builders for the ``tree`` strategy's tests: scripted answers per phase, logged tools, stores.

The executor's request names its node as ``"step": {"id": "node-<id>", "title": <name>``,
the decomposer's as ``"target_task": {"id": <id>, "name": <name>``, a roll-up's as
``"task": {"name": <name>``: the regexes below answer one node's calls by its name.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from taskdecomp import ModelRequest, NewNode, ScriptedModel, TreeRepository, tool
from taskdecomp.store import SqlStore, open_store
from taskdecomp.tree import NodeId, PlanTree
from tests.store.conftest import pg_url, sqlite_url

__all__ = ["pg_url", "sqlite_url"]  # fixtures, used by name through `store`


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest) -> Iterator[SqlStore]:
    """A fresh store: a SQLite file, then a schema of its own on the real PostgreSQL."""
    url: str = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    opened = open_store(url)
    yield opened
    opened.close()


def finish(result: Any) -> dict[str, Any]:
    """The executor finishes its task with ``result``."""
    return {"kind": "finish", "result": result}


def call(name: str, /, **args: Any) -> dict[str, Any]:
    """The executor calls tool ``name``."""
    return {"kind": "call", "tool": name, "args": args}


def wants_split(reason: str = "it has several parts") -> dict[str, Any]:
    """The executor asks for its task to be split."""
    return {"kind": "decompose", "reason": reason}


def child(name: str, *, leaf: bool = True, dependencies: Sequence[int] = ()) -> dict[str, Any]:
    """One child in a decomposer's answer."""
    return {
        "name": name,
        "instruction": f"do {name}",
        "leaf": leaf,
        "dependencies": list(dependencies),
    }


def kids(*names: str, leaf: bool = True) -> dict[str, Any]:
    """A decomposer's answer with these children."""
    return {"children": [child(name, leaf=leaf) for name in names]}


def node(name: str) -> str:
    """A regex for the executor's requests about the node called ``name``."""
    return r'"step": \{"id": "node-\d+(\.\d+)?", "title": ' + re.escape(json.dumps(name))


def first_turn(name: str) -> str:
    """A regex for the first turn of an attempt at the node called ``name``."""
    return node(name) + r'.*"turns": \[\]'


def retry(name: str) -> str:
    """A regex for the second attempt at the node called ``name``."""
    return r'"step": \{"id": "node-\d+\.2", "title": ' + re.escape(json.dumps(name))


def target(name: str) -> str:
    """A regex for the decomposer's requests about the node called ``name``."""
    return r'"target_task": \{"id": \d+, "name": ' + re.escape(json.dumps(name))


def rolling(name: str) -> str:
    """A regex for the roll-up of the node called ``name``."""
    return r'"task": \{"name": ' + re.escape(json.dumps(name))


def model(*rules: tuple[str, Any, str]) -> ScriptedModel:
    """A scripted model: ``(regex, answer, phase)`` rules, first match answers."""
    return ScriptedModel(rules=list(rules))


def phases(scripted: ScriptedModel) -> list[str]:
    """The phases of the calls ``scripted`` got, in order."""
    return [request.phase for request in scripted.calls]


def payload(request: ModelRequest) -> dict[str, Any]:
    """The JSON user message of a request (a repair's is before the refused answer)."""
    asked = [m["content"] for m in request.messages if m["role"] == "user"]
    last = asked[-2] if asked[-1].startswith("Your answer was refused") else asked[-1]
    parsed: dict[str, Any] = json.loads(last)
    return parsed


def asked_to_split(scripted: ScriptedModel) -> list[dict[str, Any]]:
    """The decomposer's requests (their JSON), in order."""
    return [payload(r) for r in scripted.calls if r.phase == "decompose"]


def executed(scripted: ScriptedModel) -> list[str]:
    """The titles of the executor's requests, one per turn, in order."""
    return [payload(r)["step"]["title"] for r in scripted.calls if r.phase == "execute"]


class Log:
    """Tools that write down each call, thread-safe (sync tools run on worker threads)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        self._failures: dict[str, int] = {}

    def note(self, name: str, value: Any) -> None:
        with self._lock:
            self.calls.append((name, value))

    def named(self, name: str) -> list[Any]:
        """The arguments of every call of tool ``name``."""
        return [value for called, value in self.calls if called == name]

    def fail_first(self, key: str, times: int) -> None:
        """Make ``flaky(key)`` raise its first ``times`` calls."""
        self._failures[key] = times

    def tools(self) -> list[Any]:
        log = self

        def lookup(key: str) -> str:
            """Look ``key`` up."""
            log.note("lookup", key)
            return f"found {key}"

        def broken(key: str) -> str:
            """Always fails."""
            log.note("broken", key)
            raise RuntimeError(f"the service is down for {key}")

        def flaky(key: str) -> str:
            """Fails its first calls for a key (see :meth:`Log.fail_first`)."""
            log.note("flaky", key)
            with log._lock:
                left = log._failures.get(key, 0)
                log._failures[key] = left - 1
            if left > 0:
                raise RuntimeError(f"flaky {key} failed")
            return f"flaky {key} ok"

        @tool(needs_approval=True, side_effects="unsafe")
        def send(to: str) -> str:
            """Send a message (a human approves each)."""
            log.note("send", to)
            return f"sent to {to}"

        return [lookup, broken, flaky, send]


def stored_tree(store: SqlStore, title: str, shape: dict[str, Any]) -> PlanTree:
    """Store a plan titled ``title`` whose roots and children are the nested ``shape``.

    ``shape`` maps a name to its children's ``shape`` (``{}`` for a leaf); dependencies are
    added afterwards with :func:`depend`.
    """
    repository = TreeRepository(store)
    tree = repository.create_plan(title, [NewNode(name=name) for name in shape])
    _write(repository, tree, shape, parent=None)
    return repository.get_plan_tree(tree.id)


def _write(
    repository: TreeRepository, tree: PlanTree, shape: dict[str, Any], parent: NodeId | None
) -> None:
    current = repository.get_plan_tree(tree.id)
    for name, below in shape.items():
        here = next(n for n in current.children(parent) if n.name == name)
        if below:
            repository.write_children(
                tree.id,
                here.id,
                [NewNode(name=kid, instruction=f"do {kid}") for kid in below],
            )
            _write(repository, tree, below, parent=here.id)


def by_name(tree: PlanTree, name: str) -> NodeId:
    """The id of the (only) node called ``name``."""
    found = [n.id for n in tree.nodes if n.name == name]
    assert len(found) == 1, f"{len(found)} nodes called {name!r}"
    return found[0]


def depend(store: SqlStore, tree: PlanTree, name: str, *on: str) -> None:
    """Make the node called ``name`` depend on the nodes called ``on`` (straight in the store)."""
    from sqlalchemy import update

    from taskdecomp.store.codec import encode_json
    from taskdecomp.store.schema import plan_nodes

    ids = [by_name(tree, other) for other in on]
    with store.write() as conn:
        conn.execute(
            update(plan_nodes)
            .where(plan_nodes.c.id == by_name(tree, name))
            .values(dependencies=encode_json(ids, what="dependencies"))
        )
