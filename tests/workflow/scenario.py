"""A workspace holding a tiny Python package, a design for it, and a scripted model (rule
form, matched on the phase, the task, the attempt and the turn) that carries the ``default``
workflow from the design to four tasks, one of which fails its first spec check, plus one
task that completeness verification adds."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

DESIGN = """# calc: arithmetic helpers

## Goals
Small functions in the calc package, each in its own module with a test.

## Work breakdown
- add: calc/add.py with add(a, b)
- sub: calc/sub.py with sub(a, b)
- mul: calc/mul.py with mul(a, b)
- div: calc/div.py with div(a, b), raising ZeroDivisionError on b == 0
"""

FILES = {
    "T1": ("calc/add.py", "def add(a, b):\n    return a + b\n"),
    "T2": ("calc/sub.py", "def sub(a, b):\n    return a - b\n"),
    "T3": ("calc/mul.py", "def mul(a, b):\n    return a * b\n"),
    "T4": ("calc/div.py", "def div(a, b):\n    return a / b\n"),
    "T5": ("calc/__init__.py", "from calc.add import add\nfrom calc.sub import sub\n"),
}
BUGGY_SUB = "def sub(a, b):\n    return a + b\n"


def task(task_id: str, title: str, files: list[str], deps: list[str]) -> dict[str, Any]:
    """One task in the seed's form."""
    return {
        "id": task_id,
        "title": title,
        "summary": f"{title}, as the design says",
        "acceptanceCriteria": [f"{title} works"],
        "filesAllowed": files,
        "dependsOn": deps,
    }


TASKS = [
    task("T1", "add", ["calc/add.py"], []),
    task("T2", "sub", ["calc/sub.py"], []),
    task("T3", "mul", ["calc/mul.py"], ["T1"]),
    task("T4", "div", ["calc/div.py"], []),
]
ADDED = [task("T5", "exports", ["calc/__init__.py"], ["T1", "T2"])]


def call(tool: str, **args: Any) -> dict[str, Any]:
    """A call action."""
    return {"kind": "call", "tool": tool, "args": args}


def finish(result: str) -> dict[str, Any]:
    """A finish action."""
    return {"kind": "finish", "result": result}


def first(turns_left: int = 30) -> str:
    """Matches the first turn of a phase run (the turns left are counted down)."""
    return f'"turns_left": {turns_left}'


def rules(*, out_of_scope: bool = False) -> list[dict[str, Any]]:
    """The script's rules, most specific first.

    With ``out_of_scope``, T4's first implementation also writes README.md outside its
    files through a user tool (behind the workspace tools' back).
    """
    phase = '"phase": "{}"'.format
    on = '"task": {{"id": "{}"'.format
    out: list[tuple[str, Any]] = [
        (f"{phase('design_draft')}.*{first()}", call("read_file", path=".taskdecomp/input.md")),
        (
            f"{phase('design_draft')}.*{first(29)}",
            call("write_file", path=".taskdecomp/design.md", content=DESIGN),
        ),
        (phase("design_draft"), finish("design written")),
        (
            f"{phase('design_review')}.*{first()}",
            call("set_status", fields={"designApproved": True}),
        ),
        (phase("design_review"), finish("approved")),
        (f"{phase('task_decomposition')}.*{first()}", call("put_tasks", tasks=TASKS)),
        (
            f"{phase('task_decomposition')}.*{first(29)}",
            call("set_status", fields={"taskDecompositionComplete": True}),
        ),
        (phase("task_decomposition"), finish("4 tasks")),
        # T2's first implementation is wrong; its second, after the feedback, is right
        (
            f'{phase("implement_task")}.*{on("T2")}.*"attempt": 1.*{first()}',
            call("write_file", path=FILES["T2"][0], content=BUGGY_SUB),
        ),
        (
            f'{phase("task_spec_check")}.*{on("T2")}.*"attempt": 1.*{first()}',
            call("update_task", task_id="T2", status="failed", feedback="sub(3, 1) gives 4"),
        ),
    ]
    if out_of_scope:
        out.append(
            (
                f'{phase("implement_task")}.*{on("T4")}.*"attempt": 1.*{first(29)}',
                call("scribble", path="README.md", text="changed behind the tools"),
            )
        )
    for task_id, (path, content) in FILES.items():
        out += [
            (
                f"{phase('implement_task')}.*{on(task_id)}.*{first()}",
                call("write_file", path=path, content=content),
            ),
            (f"{phase('implement_task')}.*{on(task_id)}", finish(f"{task_id} done")),
            (
                f"{phase('task_spec_check')}.*{on(task_id)}.*{first()}",
                call("update_task", task_id=task_id, status="passed"),
            ),
            (f"{phase('task_spec_check')}.*{on(task_id)}", finish(f"{task_id} passed")),
        ]
    out += [
        # the second verification sees T5 in the list, and is satisfied
        (f'{phase("completeness_verification")}.*"id": "T5".*{first()}', finish("complete")),
        (f"{phase('completeness_verification')}.*{first()}", call("add_tasks", tasks=ADDED)),
        (phase("completeness_verification"), finish("T5 added")),
        (f"{phase('code_review')}.*{first()}", call("set_status", fields={"reviewClean": True})),
        (phase("code_review"), finish("clean")),
    ]
    return [{"match": pattern, "response": response} for pattern, response in out]


def write_script(path: Path, **kwargs: Any) -> str:
    """Write the script; return its model string."""
    path.write_text(json.dumps({"rules": rules(**kwargs)}), encoding="utf-8")
    return f"scripted:{path}"


def make_workspace(root: Path) -> tuple[Path, Path]:
    """A git repository with the package's first file; and the design outside it."""
    ws = root / "ws"
    (ws / "calc").mkdir(parents=True)
    (ws / "calc" / "__init__.py").write_text("")
    (ws / "README.md").write_text("calc\n")
    git(ws, "init", "-q", "-b", "main")
    git(ws, "add", "-A")
    git(ws, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    design = root / "design.md"
    design.write_text(DESIGN)
    return ws, design


def git(root: Path, *args: str) -> str:
    """Run git in ``root``; its output."""
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
    return done.stdout
