"""An example taskdecomp plugin, built only on taskdecomp's public pieces.

- the ``one_call`` strategy: no planner; one step calls the tool its options name, and the
  answer is that tool's result. It is stored, checkpointed and resumed like any run.
- the ``echo`` model provider (``echo:WORD``): plans three calls of ``note`` with WORD and
  answers with the last result and the server it was pointed at (``--base-url``).
- the ``notes`` toolset source (``--tools notes:DIR``): tools that read and write notes in
  DIR; ``wait`` blocks until DIR holds a file named ``go``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taskdecomp import ModelRequest, ModelResponse, tool
from taskdecomp.models import Connection
from taskdecomp.models.providers import provider
from taskdecomp.plan import Plan, Step, TaskId
from taskdecomp.scheduler import execute_plan
from taskdecomp.strategies.registry import DataclassOptions, Setup
from taskdecomp.tools import Toolset

# -- the strategy ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class OneCallOptions:
    """What the one step calls."""

    tool: str
    """The tool to call."""
    args: dict[str, Any] = field(default_factory=dict)
    """Its arguments."""


class OneCall(DataclassOptions):
    """One tool call, no planner: the answer is what the tool returned."""

    name = "one_call"
    summary = "call one tool with the given arguments; the answer is its result"
    starts_from_goal = True
    options_type = OneCallOptions

    def start(self, setup: Setup, options: OneCallOptions) -> Any:
        return _phases(options, done=frozenset())

    def resume(self, setup: Setup, options: OneCallOptions, stored: Any, tools: Any) -> Any:
        return None, _phases(options, done=stored.finished_steps())


def _phases(options: OneCallOptions, *, done: frozenset[TaskId]) -> Any:
    async def phases(ctx: Any, outcome: Any) -> None:
        plan = Plan(
            steps=(
                Step(id=TaskId("call"), title=f"call {options.tool}", tool=options.tool,
                     args=options.args),
            )
        )  # fmt: skip
        if outcome.plan is None:  # a resumed run has its plan stored already
            ctx.plan_created(plan)
        outcome.plan = plan
        await execute_plan(plan, ctx, max_parallel=1, done=done)
        outcome.answer = json.dumps(ctx.history[-1].observation, sort_keys=True)

    return phases


STRATEGY = OneCall()

# -- the model provider ---------------------------------------------------------------------


class EchoModel:
    """Plans three ``note`` calls with its word; answers with what the last one returned."""

    streams = False

    def __init__(self, word: str, connection: Connection) -> None:
        self.word = word or "hello"
        self.server = connection.base_url or "nowhere"

    @property
    def name(self) -> str:
        return f"echo:{self.word}"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if request.phase == "plan":
            steps = [
                {"id": f"s{n}", "title": f"note {n}", "tool": "note",
                 "args": {"text": f"{self.word} {n}"}}
                for n in (1, 2, 3)
            ]  # fmt: skip
            text = json.dumps({"kind": "plan", "steps": steps})
        else:
            text = f"{self.word} said three times, via {self.server}"
        return ModelResponse(text=text, tokens_in=1, tokens_out=1)


@provider(connects=True)
def echo(name: str, connection: Connection) -> EchoModel:
    """The ``echo`` provider: it connects to a server (so ``--base-url`` reaches it)."""
    return EchoModel(name, connection)


# -- the toolset source ---------------------------------------------------------------------


def notes(folder: str) -> Toolset:
    """``notes:DIR``: tools that keep notes in DIR."""
    root = Path(folder)

    @tool(side_effects="idempotent")
    def note(text: str) -> dict[str, Any]:
        """Write a note; return how many notes there are."""
        root.mkdir(parents=True, exist_ok=True)
        with open(root / "notes.txt", "a", encoding="utf-8") as out:
            out.write(text + "\n")
        return {"notes": len((root / "notes.txt").read_text().splitlines()), "last": text}

    @tool(side_effects="read_only")
    def wait(label: str) -> dict[str, Any]:
        """Wait until a file named 'go' is in the folder."""
        root.mkdir(parents=True, exist_ok=True)
        (root / f"waiting.{label}").touch()
        while not (root / "go").exists():
            time.sleep(0.02)
        return {"waited": label}

    return Toolset.from_functions([note, wait], source=f"notes:{folder}")
