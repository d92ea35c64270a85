"""A scripted model for tree runs over the service, and the plan tree it works through.

The plan is the one the test decomposer (``support.decomp_model``) grows for ``Conference``:
Venue (Shortlist, Book), Speakers (Call for papers, Programme) and Sponsors, which that
decomposer fails to split. The run's model (:func:`tree_model`) answers each phase of a
tree run by the node it is about: the executor of each leaf, the decomposer when Sponsors
asks to be split, and the roll-ups.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.server.support import tree_children, wait_for

TITLE = r'"title": "{}"'
"""The executor's request names its task so (its ``step``)."""
TARGET = r'"target_task": \{{"id": \d+, "name": "{}"'
"""The decomposer's request names the node to split so."""
TASK = r'"task": \{{"name": "{}"'
"""A roll-up's request names its node so."""

RESULTS = {
    "Shortlist": "Shortlist: Hall 7 and Kino (from the work tool)",
    "Book": "Booked Hall 7 for 12 May",
    "Call for papers": "The call for papers is out",
    "Programme": "Programme of 20 talks",
    "Find sponsors": "Found 4 sponsors",
    "Sign sponsors": "Signed 3 sponsors",
}
"""What the executor finishes each leaf with."""

SPONSORS = ("Find sponsors", "Sign sponsors")
"""The children the decomposer gives Sponsors when its executor asks for a split."""

ANSWER = "The conference is ready: Hall 7 booked, 20 talks, 3 sponsors."
"""The roll-up of Conference, the root: the run's answer."""


def finish(result: str) -> dict[str, Any]:
    return {"kind": "finish", "result": result}


def rule(phase: str, match: str, response: Any) -> dict[str, Any]:
    return {"phase": phase, "match": match, "response": response}


def tree_model(path: Path, *, latency_ms: float = 0, block: str | None = None) -> str:
    """The run's model; the leaf named ``block`` calls the ``block`` tool first."""
    called = r'.*"turns": \[\{'  # the executor's second turn: after a tool call
    shortlist = {"kind": "call", "tool": "work", "args": {"name": "shortlist"}}
    split = {"kind": "decompose", "reason": "too many sponsors to sign at once"}
    rules = [
        rule("execute", TITLE.format("Shortlist") + called, finish(RESULTS["Shortlist"])),
        rule("execute", TITLE.format("Shortlist"), shortlist),
        rule("execute", TITLE.format("Sponsors"), split),
        rule("decompose", TARGET.format("Sponsors"), tree_children(*SPONSORS, leaf=True)),
        rule("rollup", TASK.format("Conference"), ANSWER),
        rule("rollup", TASK.format("Venue"), "Venue: Hall 7, booked for 12 May"),
        rule("rollup", TASK.format("Speakers"), "Speakers: call out, 20 talks"),
        rule("rollup", TASK.format("Sponsors"), "Sponsors: 3 signed of 4 found"),
    ]
    if block is not None:
        wait = {"kind": "call", "tool": "block", "args": {"name": block}}
        rules[:0] = [
            rule("execute", TITLE.format(block) + called, finish(RESULTS[block])),
            rule("execute", TITLE.format(block), wait),
        ]
    rules += [rule("execute", TITLE.format(name), finish(text)) for name, text in RESULTS.items()]
    path.write_text(json.dumps({"rules": rules, "latency_ms": latency_ms}))
    return f"scripted:{path}"


def conference(client: Any) -> dict[str, Any]:
    """Create the Conference plan, decomposed by the server's decomposer; its tree once done."""
    created = client.post("/plans", json={"title": "Conference"})
    assert created.status_code == 202, created.text
    plan_id = created.json()["id"]
    return dict(
        wait_for(
            lambda: (
                (tree := client.get(f"/plans/{plan_id}/tree").json())["jobs"][0]["state"] == "done"
                and tree
            )
        )
    )


def node_id(tree: dict[str, Any], name: str) -> int:
    return int(next(node["id"] for node in tree["nodes"] if node["name"] == name))


def ended(client: Any, run_id: str, statuses: tuple[str, ...] = ("ok", "stopped")) -> dict:
    return dict(
        wait_for(
            lambda: (view := client.get(f"/runs/{run_id}").json())["status"] in statuses and view,
            timeout=60,
        )
    )
