"""The PlanDecomposer: both modes, budgets, retries, failures, concurrency, atomic writes."""

from __future__ import annotations

import asyncio
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from taskdecomp import ModelRequest, ModelResponse, ScriptedModel
from taskdecomp.decomposition import DecompOptions
from taskdecomp.errors import TreeNotFoundError
from taskdecomp.store import SqlStore
from taskdecomp.store.trees import TreeRepository
from taskdecomp.strategies.decompose import PlanDecomposer
from taskdecomp.tree import NewNode, NodeId, PlanTree

TARGET = re.compile(r'"target_task": \{"id": (\d+), "name": "((?:[^"\\]|\\.)*)"')


def target(request: ModelRequest) -> tuple[int, str]:
    match = TARGET.search(request.messages[1]["content"])
    assert match, request
    return int(match.group(1)), json.loads(f'"{match.group(2)}"')


class TreeModel:
    """Answers every node with ``width`` children named after the parent; optional delays."""

    def __init__(self, width: int = 3, *, delays: bool = False, seed: int = 0) -> None:
        self.width = width
        self.calls: list[str] = []
        self._delays = random.Random(seed) if delays else None
        self.overrides: dict[str, list[Any]] = {}

    @property
    def name(self) -> str:
        return "tree"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        node_id, name = target(request)
        self.calls.append(name)
        if self._delays is not None:
            await asyncio.sleep(self._delays.random() * 0.02)
        queued = self.overrides.get(name)
        if queued:
            answer = queued.pop(0)
            return ModelResponse(text=answer if isinstance(answer, str) else json.dumps(answer))
        children = [{"name": f"{name}.{i}"} for i in range(1, self.width + 1)]
        return ModelResponse(text=json.dumps({"target_node_id": node_id, "children": children}))


@pytest.fixture
def repo(tmp_path: Path) -> TreeRepository:
    return TreeRepository(SqlStore(f"sqlite:///{tmp_path / 'plans.db'}"))


def shape(tree: PlanTree) -> list[tuple[str, int, int]]:
    return [(node.name, depth, node.position) for node, depth in tree.walk()]


def decompose(repo: TreeRepository, model: Any, title: str = "R", **options: Any) -> Any:
    decomposer = PlanDecomposer(repo, model, options=DecompOptions(**options))
    tree, result = asyncio.run(decomposer.create_plan(title))
    return repo.get_plan_tree(tree.id), result


def test_plan_bfs_grows_the_tree_level_by_level(repo: TreeRepository) -> None:
    model = TreeModel(width=2)
    tree, result = decompose(repo, model, max_depth=2)
    assert shape(tree) == [
        ("R", 0, 0),
        ("R.1", 1, 0),
        ("R.1.1", 2, 0),
        ("R.1.2", 2, 1),
        ("R.2", 1, 1),
        ("R.2.1", 2, 0),
        ("R.2.2", 2, 1),
    ]
    assert model.calls == ["R", "R.1", "R.2"]
    assert result.mode == "plan_bfs" and result.root_node_id is None
    assert [tree.node(n).name for n in result.processed_nodes] == ["R", "R.1", "R.2"]
    assert [n.name for n in result.created_tasks] == [
        "R.1",
        "R.2",
        "R.1.1",
        "R.1.2",
        "R.2.1",
        "R.2.2",
    ]
    assert result.failed_nodes == ()
    assert result.stopped_reason == "max_depth"  # the depth-2 nodes were left as they are
    assert result.stats["llm_calls"] == 3 and result.stats["nodes_created"] == 6
    assert result.summary().startswith(f"Plan #{tree.id} got 6 subtasks")
    data = json.loads(json.dumps(result.to_dict()))
    assert set(data) == {
        "plan_id",
        "mode",
        "root_node_id",
        "processed_nodes",
        "created_tasks",
        "failed_nodes",
        "stopped_reason",
        "stats",
    }


def test_leaf_children_are_not_decomposed_and_no_depth_stop(repo: TreeRepository) -> None:
    model = TreeModel()
    model.overrides["R"] = [{"children": [{"name": "a", "leaf": True}, {"name": "b"}]}]
    model.overrides["b"] = [{"children": [{"name": "b1", "leaf": True}]}]
    tree, result = decompose(repo, model)
    assert model.calls == ["R", "b"]
    assert [n.name for n in tree.nodes] == ["R", "a", "b", "b1"]
    assert result.stopped_reason is None


def test_an_empty_plan_does_nothing(repo: TreeRepository) -> None:
    model = TreeModel()
    plan = repo.create_plan("empty")
    result = asyncio.run(PlanDecomposer(repo, model).run_plan(plan.id))
    assert (model.calls, result.created_tasks, result.stopped_reason) == ([], (), None)


def test_a_leaf_root_is_skipped_in_plan_mode(repo: TreeRepository) -> None:
    model = TreeModel()
    plan = repo.create_plan("p", [NewNode(name="done", leaf=True), NewNode(name="todo")])
    asyncio.run(PlanDecomposer(repo, model, options=DecompOptions(max_depth=1)).run_plan(plan.id))
    assert model.calls == ["todo"]


def test_node_budget_holds_exactly_and_truncates_in_order(repo: TreeRepository) -> None:
    model = TreeModel(width=3)
    tree, result = decompose(repo, model, total_node_budget=7, max_depth=3)
    assert len(result.created_tasks) == 7 == len(tree.nodes) - 1
    assert result.stopped_reason == "max_nodes"
    # level 1: R -> 3; level 2: only as many nodes asked as could still get a child (4)
    assert model.calls == ["R", "R.1", "R.2", "R.3"]
    assert [n.name for n in tree.children(tree.roots()[0].id)] == ["R.1", "R.2", "R.3"]
    kids = {n.name: [c.name for c in tree.children(n.id)] for n in tree.nodes}
    assert (kids["R.1"], kids["R.2"], kids["R.3"]) == (["R.1.1", "R.1.2", "R.1.3"], ["R.2.1"], [])
    assert "stopped at the node budget" in result.summary()


def test_concurrent_answers_write_the_same_tree_as_sequential(tmp_path: Path) -> None:
    shapes = []
    for concurrency, seed in ((1, 0), (8, 1), (8, 2), (3, 3)):
        repo = TreeRepository(SqlStore(f"sqlite:///{tmp_path / f'c{concurrency}-{seed}.db'}"))
        model = TreeModel(width=3, delays=True, seed=seed)
        tree, result = decompose(repo, model, total_node_budget=20, concurrency=concurrency)
        shapes.append((shape(tree), result.stopped_reason, len(result.created_tasks)))
        if concurrency == 1:
            assert (
                model.calls
                == [
                    "R",
                    "R.1",
                    "R.2",
                    "R.3",
                    *[f"R.{i}.{j}" for i in (1, 2, 3) for j in (1, 2, 3)],
                ][: len(model.calls)]
            )
    assert all(s == shapes[0] for s in shapes)
    assert shapes[0][2] == 20


def test_rule_scripts_stay_deterministic_under_concurrency(tmp_path: Path) -> None:
    script = {
        "rules": [
            {
                "match": r'"target_task": \{"id": \d+, "name": "Conf"',
                "response": {"children": [{"name": "Venue"}, {"name": "Speakers"}]},
            },
            {
                "match": r'"target_task": \{"id": \d+, "name": "Venue"',
                "response": {
                    "children": [
                        {"name": "Shortlist", "leaf": True},
                        {"name": "Book", "leaf": True},
                    ]
                },
            },
            {
                "match": r'"target_task": \{"id": \d+, "name": "Speakers"',
                "response": {"children": [{"name": "CFP", "leaf": True}]},
            },
        ],
        "latency_ms": 30,
    }
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    trees = []
    for concurrency in (1, 8):
        repo = TreeRepository(SqlStore(f"sqlite:///{tmp_path / f'r{concurrency}.db'}"))
        tree, result = decompose(repo, f"scripted:{path}", "Conf", concurrency=concurrency)
        assert result.stopped_reason is None and result.failed_nodes == ()
        trees.append(shape(tree))
    assert trees[0] == trees[1]
    assert [name for name, _, _ in trees[0]] == [
        "Conf",
        "Venue",
        "Shortlist",
        "Book",
        "Speakers",
        "CFP",
    ]


def test_retry_then_success(repo: TreeRepository) -> None:
    model = TreeModel(width=1)
    model.overrides["R"] = ["not json at all"]
    tree, result = decompose(repo, model, max_depth=1)
    assert result.failed_nodes == () and result.stats["retries"] == 1
    assert [n.name for n in tree.nodes] == ["R", "R.1"]
    assert model.calls == ["R", "R"]


def test_retry_then_failure_goes_on_with_the_rest(repo: TreeRepository) -> None:
    model = TreeModel(width=2)
    model.overrides["R.1"] = ["{bad", "still bad"]
    tree, result = decompose(repo, model, max_depth=2)
    failed = tree.node(result.failed_nodes[0])
    assert failed is not None and failed.name == "R.1"
    assert [n.name for n in tree.children(failed.id)] == []
    assert [n.name for n in result.created_tasks] == ["R.1", "R.2", "R.2.1", "R.2.2"]
    assert result.stats["failures"][str(failed.id)]["reason"].startswith(
        "invalid_children:non_json"
    )
    assert (
        f"node {failed.id} was not processed because the model's answer was invalid"
        in result.summary()
    )


def test_a_model_that_never_answers_is_reported_in_plain_words(repo: TreeRepository) -> None:
    script = ScriptedModel(rules=[(r'"name": "R"', {"error": "timeout"})])
    tree, result = decompose(repo, script, retry_limit=2)
    root = tree.roots()[0]
    assert result.failed_nodes == (root.id,)
    assert result.stats["llm_calls"] == 3 and result.stats["retries"] == 2
    assert result.summary() == (
        f"Plan #{tree.id} got 0 subtasks; node {root.id} was not processed because the "
        "model did not answer."
    )


@pytest.mark.parametrize(
    ("answer", "rule"),
    [
        ({"target_node_id": 999, "children": [{"name": "a"}]}, "wrong_target"),
        ({"mode": "single_node", "children": [{"name": "a"}]}, "wrong_mode"),
        ({"children": [{"name": str(i)} for i in range(7)]}, "too_many"),
        ({"children": [{"name": "a", "dependencies": [424242]}]}, "unknown_dependency:424242"),
        ({"children": [{"name": "a", "priority": 1}]}, "schema"),
        ({"children": [{"name": "a", "status": "todo"}]}, "schema"),
        ({"children": [{"name": "a"}, {"name": "a "}]}, "duplicate_name"),
        ({"children": [{"name": ""}]}, "schema"),
        ({"kids": []}, "schema"),
        ("[1, 2", "non_json"),
        ('{"children": [{"name": "a", "context": {"meta": {"weight": 1e400}}}]}', "non_json"),
        ('{"children": [{"name": "a", "context": {"sections": [-1e999]}}]}', "non_json"),
        ('{"children": [{"name": "a", "dependencies": [1e400]}]}', "non_json"),
    ],
)
def test_invalid_answers_are_rejected_with_a_reason(
    repo: TreeRepository, answer: Any, rule: str
) -> None:
    model = TreeModel()
    model.overrides["R"] = [answer]
    tree, result = decompose(repo, model, retry_limit=0)
    assert len(tree.nodes) == 1
    assert result.stats["failures"][str(tree.roots()[0].id)]["reason"] == f"invalid_children:{rule}"


def test_dependencies_on_existing_nodes_are_kept(repo: TreeRepository) -> None:
    plan = repo.create_plan("p", [NewNode(name="A", leaf=True), NewNode(name="B")])
    a = plan.roots()[0]
    model = TreeModel()
    model.overrides["B"] = [{"children": [{"name": "B1", "dependencies": [a.id, a.id]}]}]
    asyncio.run(PlanDecomposer(repo, model, options=DecompOptions(max_depth=1)).run_plan(plan.id))
    (b1,) = repo.get_plan_tree(plan.id).children(plan.roots()[1].id)
    assert b1.dependencies == (a.id,)


def test_stop_on_empty_false_retries_an_empty_answer(repo: TreeRepository) -> None:
    model = TreeModel()
    model.overrides["R"] = [{"children": []}, {"children": []}]
    _, result = decompose(repo, model, stop_on_empty=False)
    assert result.stats["failures"][str(result.failed_nodes[0])]["reason"].startswith(
        "invalid_children:empty"
    )
    model = TreeModel()
    model.overrides["R"] = [{"children": []}]
    _, result = decompose(repo, model)
    assert result.failed_nodes == () and len(result.processed_nodes) == 1


def test_should_stop_keeps_children_out_of_the_queue(repo: TreeRepository) -> None:
    model = TreeModel()
    model.overrides["R"] = [{"should_stop": True, "reason": "small", "children": [{"name": "x"}]}]
    tree, result = decompose(repo, model)
    assert model.calls == ["R"] and [n.name for n in tree.nodes] == ["R", "x"]
    assert result.stopped_reason is None


def test_single_node_appends_by_default_and_can_expand(repo: TreeRepository) -> None:
    plan = repo.create_plan("p", [NewNode(name="R")])
    root = plan.roots()[0]
    repo.write_children(plan.id, root.id, [NewNode(name="keep")])
    model = TreeModel(width=2)
    decomposer = PlanDecomposer(repo, model)
    result = asyncio.run(decomposer.decompose_node(plan.id, root.id))
    assert result.mode == "single_node" and result.root_node_id == root.id
    assert [n.name for n in repo.get_plan_tree(plan.id).children(root.id)] == ["keep", "R.1", "R.2"]
    assert model.calls == ["R"]
    more = asyncio.run(decomposer.decompose_node(plan.id, root.id, DecompOptions(expand_depth=2)))
    assert model.calls == ["R", "R", "R.1", "R.2"]
    assert len(more.created_tasks) == 6


def test_single_node_overwrite_replaces_the_old_subtree(repo: TreeRepository) -> None:
    plan = repo.create_plan("p", [NewNode(name="R", leaf=True)])
    root = plan.roots()[0]
    old = repo.write_children(plan.id, root.id, [NewNode(name="old")])
    repo.write_children(plan.id, old[0].id, [NewNode(name="old.child")])
    model = TreeModel(width=1)
    asyncio.run(
        PlanDecomposer(repo, model).decompose_node(plan.id, root.id, DecompOptions(replace=True))
    )
    assert [n.name for n in repo.get_plan_tree(plan.id).nodes] == ["R", "R.1"]


def test_skip_existing_walks_below_nodes_that_have_children(repo: TreeRepository) -> None:
    plan = repo.create_plan("p", [NewNode(name="R")])
    repo.write_children(plan.id, plan.roots()[0].id, [NewNode(name="c")])
    model = TreeModel(width=1)
    asyncio.run(PlanDecomposer(repo, model, options=DecompOptions(max_depth=2)).run_plan(plan.id))
    assert model.calls == ["c"]
    model = TreeModel(width=1)
    asyncio.run(
        PlanDecomposer(
            repo, model, options=DecompOptions(max_depth=2, skip_existing=False)
        ).run_plan(plan.id)
    )
    assert model.calls[0] == "R"


def test_a_failed_write_leaves_no_partial_children(repo: TreeRepository, tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'plans.db'}")
    with engine.begin() as conn:
        conn.execute(
            text(
                "CREATE TRIGGER poison BEFORE INSERT ON plan_nodes WHEN NEW.name = 'poison' "
                "BEGIN SELECT RAISE(ABORT, 'disk says no'); END"
            )
        )
    engine.dispose()
    model = TreeModel()
    model.overrides["R"] = [{"children": [{"name": "A"}, {"name": "B"}]}]
    model.overrides["A"] = [{"children": [{"name": "A1"}, {"name": "poison"}, {"name": "A3"}]}]
    model.overrides["B"] = [{"children": [{"name": "B1", "leaf": True}]}]
    tree, result = decompose(repo, model, max_depth=2)
    a = next(n for n in tree.nodes if n.name == "A")
    assert tree.children(a.id) == []  # A1 was written before the failure and rolled back
    assert result.failed_nodes == (a.id,)
    assert result.stats["failures"][str(a.id)]["reason"].startswith("store_error:write")
    assert [n.name for n in tree.children(next(n.id for n in tree.nodes if n.name == "B"))] == [
        "B1"
    ]
    assert "its children could not be written" in result.summary()


def test_deadline(repo: TreeRepository) -> None:
    model = ScriptedModel(rules=[(".", {"children": [{"name": "x"}]})], latency_ms=500)
    _, result = decompose(repo, model, max_seconds=0.1)
    assert result.stopped_reason == "max_seconds"
    assert result.created_tasks == ()


def test_unknown_plan_and_node(repo: TreeRepository) -> None:
    decomposer = PlanDecomposer(repo, TreeModel())
    with pytest.raises(TreeNotFoundError):
        asyncio.run(decomposer.run_plan(12345))  # type: ignore[arg-type]
    plan = repo.create_plan("p", [NewNode(name="R")])
    with pytest.raises(TreeNotFoundError, match="has no node 777"):
        asyncio.run(decomposer.decompose_node(plan.id, NodeId(777)))


def test_auto_on_create_off_only_stores_the_root(repo: TreeRepository) -> None:
    model = TreeModel()
    tree, result = decompose(repo, model, auto_on_create=False)
    assert result is None and model.calls == [] and len(tree.nodes) == 1


def test_request_carries_path_outline_constraints_and_mode(repo: TreeRepository) -> None:
    seen: list[dict[str, Any]] = []

    class Spy(TreeModel):
        async def complete(self, request: ModelRequest) -> ModelResponse:
            seen.append(json.loads(request.messages[1]["content"]))
            assert request.json_schema is not None and request.phase == "decompose"
            return await super().complete(request)

    decompose(repo, Spy(width=1), max_depth=2, max_children=4)
    second = seen[1]
    assert second["target_task"]["path"] == ["R", "R.1"]
    assert second["mode_hint"] == "plan_bfs"
    assert second["constraints"]["max_children"] == 4
    assert "[" in second["plan_outline"] and "R.1" in second["plan_outline"]


def test_single_node_request_lists_existing_children(repo: TreeRepository) -> None:
    seen: list[dict[str, Any]] = []

    class Spy(TreeModel):
        async def complete(self, request: ModelRequest) -> ModelResponse:
            seen.append(json.loads(request.messages[1]["content"]))
            return await super().complete(request)

    plan = repo.create_plan("p", [NewNode(name="R")])
    root = plan.roots()[0]
    (kept,) = repo.write_children(plan.id, root.id, [NewNode(name="keep")])
    asyncio.run(PlanDecomposer(repo, Spy(width=1)).decompose_node(plan.id, root.id))
    assert seen[0]["mode_hint"] == "single_node"
    assert seen[0]["target_task"]["existing_children"] == [{"id": kept.id, "name": "keep"}]
