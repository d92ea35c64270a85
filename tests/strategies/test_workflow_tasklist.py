"""Task lists from an agent: the seed's schema, checked like a plan."""

from __future__ import annotations

from typing import Any

import pytest

from taskdecomp.strategies.workflow.tasklist import TaskListError, parse_tasks


def task(n: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"T{n}",
        "title": f"task {n}",
        "summary": "do it",
        "acceptanceCriteria": [f"criterion {n}"],
        "filesAllowed": [f"src/pkg/mod{n}.py"],
        "dependsOn": [f"T{n - 1}"] if n > 1 else [],
        "status": "pending",
        **extra,
    }


def tasks(*items: dict[str, Any], count: int = 5) -> dict[str, Any]:
    listed = list(items) or [task(n) for n in range(1, count + 1)]
    return {"schemaVersion": 1, "decomposedFrom": "docs/design.md", "tasks": listed}


def test_a_good_list_round_trips_in_the_seeds_form() -> None:
    raw = tasks()
    parsed = parse_tasks(raw)
    assert parsed.to_json() == raw
    assert [t.id for t in parsed.ready()] == ["T1"]  # the others wait for their dependency
    done = parsed.with_status("T1", "passed")
    assert [t.id for t in done.ready()] == ["T2"] and parsed.get("T1").status == "pending"


@pytest.mark.parametrize(
    ("raw", "rule", "message"),
    [
        (tasks(count=4), "task_count", "4 tasks; give between 5 and 15"),
        (tasks(count=16), "task_count", "16 tasks"),
        (tasks(*[task(1)] * 5), "duplicate_id:T1", "two tasks have the id 'T1'"),
        (
            tasks(task(1, dependsOn=["T9"]), *[task(n) for n in range(2, 6)]),
            "unknown_dependency:T9",
            "'T1' depends on 'T9'",
        ),
        (
            tasks(task(1, dependsOn=["T5"]), *[task(n) for n in range(2, 6)]),
            "cycle",
            "cycle: ",
        ),
        (
            tasks(task(1, acceptanceCriteria=[" "]), *[task(n) for n in range(2, 6)]),
            "no_criteria:T1",
            "no acceptance criteria",
        ),
        (tasks(task(1, colour="red"), *[task(n) for n in range(2, 6)]), "schema", "colour"),
        ({"tasks": "all of them"}, "schema", "tasks"),
        ({**tasks(), "schemaVersion": 2}, "schema", "schemaVersion"),
    ],
)
def test_a_bad_list_is_refused_with_a_rule_the_agent_can_act_on(
    raw: Any, rule: str, message: str
) -> None:
    with pytest.raises(TaskListError) as refused:
        parse_tasks(raw)
    assert refused.value.rule == rule
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("glob", "why"),
    [
        ("/etc/passwd", "absolute"),
        ("C:/Windows/x", "absolute"),
        ("\\\\server\\share", "absolute"),
        ("../outside/**", "'..'"),
        ("src/../../x", "'..'"),
        ("src\\..\\..\\x", "'..'"),
        (".git/hooks/*", ".git"),
        ("sub/.GIT/config", ".git"),
        ("", "empty"),
        ("src/\x00x", "NUL"),
    ],
)
def test_globs_must_stay_inside_the_workspace(glob: str, why: str) -> None:
    raw = tasks(task(1, filesAllowed=[glob]), *[task(n) for n in range(2, 6)])
    with pytest.raises(TaskListError) as refused:
        parse_tasks(raw)
    assert refused.value.rule == "bad_glob:T1" and why in str(refused.value)


def test_the_range_of_tasks_can_be_changed() -> None:
    assert len(parse_tasks(tasks(count=4), min_tasks=4).tasks) == 4
    with pytest.raises(TaskListError, match="give between 1 and 3"):
        parse_tasks(tasks(count=4), min_tasks=1, max_tasks=3)
