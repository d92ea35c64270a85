"""One brain for the stub model servers: what a model would answer, by what it is asked.

The three servers of ``tests/models`` (OpenAI's Chat Completions, Anthropic's Messages,
the Gemini API) answer from queues of canned replies, in order. A strategy whose calls run
at the same time (the tree's leaves, a replan wave's instruction steps) cannot be served
that way: which call comes first is up to the event loop. A :class:`Responder` answers by
what a request *is* instead: its phase, told by the system prompt the engine sends (the
planner, the replanner, an executor agent, the decomposer, a roll-up, the combiner, a
workflow agent), and the request's own payload (the step, the turns so far, the results).
Each server reads its wire format into an :class:`Asked` and writes the :class:`Answer`
back in it (text, a tool call, structured JSON), so the same brain serves all three.

The brain knows one job, the seed's sales report for April 2026 over
``examples/sales_report/tools.py``: it plans the KPI tools, calls them, and answers with
the KPIs the tools returned, read from the request (so an answer that holds them proves the
tools ran and their results reached the model). Told to break a phase's rule (``breaks``),
its answers in that phase name a tool outside the allowlist until a request carries the
engine's repair feedback, which gets the right answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from taskdecomp.models import outputs

MONTH = "2026-04"
GOAL = "Prepare the April 2026 sales KPIs (gross sales, refunds, net sales) in USD."
ANSWER = "April 2026: gross 28195.0 USD, refunds 1370.0 USD, net 26825.0 USD."
"""What every strategy answers for :data:`GOAL`, from the tools' results."""
KPIS = {"gross_sales_usd": 28195.0, "refunds_usd": 1370.0, "net_sales_usd": 26825.0}
"""The KPIs ``calculate_monthly_kpis`` returns for April 2026 (the ones :data:`ANSWER` says)."""
REPORT = "report.md"
"""The file the workflow's agent writes :data:`ANSWER` to."""
REFUSED = "Your answer was refused: it breaks the rule"
"""How the engine's repair feedback begins (:func:`taskdecomp.repairs.repair_messages`)."""

Phase = Literal[
    "plan", "replan_plan", "replan", "execute", "decompose", "rollup", "finalize", "workflow"
]

PHASES: tuple[tuple[str, Phase], ...] = (
    ("You are a task decomposition planner.", "plan"),
    ("You are a planning agent.", "replan_plan"),
    ("You review the progress toward an objective", "replan"),
    ("You are a diligent and meticulous executor agent.", "execute"),
    ("You are a task decomposer.", "decompose"),
    ("You combine the results of the subtasks", "rollup"),
    ("You are a reporting assistant.", "finalize"),
    ("You are one agent of a workflow", "workflow"),
)
"""The first words of each phase's system prompt, as the engine's built-in prompts say them."""

TOOL_WORDS = (
    ("kpi", "calculate_monthly_kpis"),
    ("risk", "detect_risk_signals"),
    ("refund", "fetch_refund_data"),
    ("sales", "fetch_sales_data"),
)
"""Which tool an executor agent calls for a step, by a word of its title or instruction."""

_NUMBER = r"(\d+(?:\.\d+)?)"
_FACTS = (
    re.compile(
        r"\W+".join(("gross_sales_usd", _NUMBER, "refunds_usd", _NUMBER, "net_sales_usd", _NUMBER))
    ),
    re.compile(f"gross {_NUMBER} USD, refunds {_NUMBER} USD, net {_NUMBER} USD"),
)
"""The KPIs as ``calculate_monthly_kpis`` returns them (JSON), and as :func:`say` writes them."""


@dataclass(frozen=True, kw_only=True)
class Asked:
    """A request, whatever the wire format it came in."""

    system: str
    """The system prompt, as sent (in ``json`` and ``prompt`` modes with the schema stated)."""
    turns: tuple[tuple[str, str], ...]
    """The other messages, ``(role, text)``, in order (``user`` and ``assistant``)."""
    schema: Mapping[str, Any] | None = None
    """The schema the answer must match, when the request asks for structured output."""

    @property
    def payload(self) -> dict[str, Any]:
        """The first user message as JSON (the engine's payload); ``{}`` when it is not."""
        first = next((text for role, text in self.turns if role == "user"), "")
        try:
            value = json.loads(first)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    @property
    def repairing(self) -> bool:
        """Whether the engine sent an earlier answer back with the rule it broke."""
        return any(role == "user" and text.startswith(REFUSED) for role, text in self.turns)

    @property
    def phase(self) -> Phase:
        """Which call this is, by the opening of its system prompt."""
        for opening, phase in PHASES:
            if self.system.startswith(opening):
                return phase
        raise AssertionError(
            f"no phase's prompt opens {self.system[:60]!r}: add its first words to PHASES"
        )

    def text(self) -> str:
        """Every message's text, the system prompt first."""
        return "\n".join([self.system, *(text for _, text in self.turns)])


@dataclass(frozen=True, kw_only=True)
class Answer:
    """What the model says: a JSON value (structured) or text."""

    value: Any

    @property
    def text(self) -> str:
        """The answer as the text of a message."""
        return self.value if isinstance(self.value, str) else json.dumps(self.value)


class Responder:
    """Answers a request by its phase and payload; safe to share between threads.

    Args:
        breaks: the phases (``plan``, ``replan_plan``, ``execute``) whose answers name a
            tool outside the allowlist (a rule the model can repair) unless the request
            carries the engine's repair feedback.
        stubborn: break those rules even when the engine asks for a repair.
    """

    def __init__(self, *, breaks: Collection[Phase] = (), stubborn: bool = False) -> None:
        self.breaks = frozenset(breaks)
        self.stubborn = stubborn

    def answer(self, asked: Asked) -> Answer:
        """The answer to ``asked``."""
        brains: dict[Phase, Callable[[Asked], Any]] = {
            "plan": self._plan,
            "replan_plan": self._replan_plan,
            "replan": self._replan,
            "execute": self._execute,
            "decompose": self._decompose,
            "rollup": lambda a: say(facts(a.text())),
            "finalize": self._finalize,
            "workflow": self._workflow,
        }
        return Answer(value=brains[asked.phase](asked))

    def _broken(self, asked: Asked) -> bool:
        return asked.phase in self.breaks and (self.stubborn or not asked.repairing)

    def _plan(self, asked: Asked) -> dict[str, Any]:
        tools = ["fetch_sales_data", "fetch_refund_data", "calculate_monthly_kpis"]
        if self._broken(asked):
            tools[1] = "delete_refunds"  # not in the allowlist: a rule the model can repair
        return {"kind": "plan", "steps": [tool_step(n, t) for n, t in enumerate(tools, 1)]}

    def _replan_plan(self, asked: Asked) -> dict[str, Any]:
        """Two data steps at once, then an instruction step that needs both."""
        sales, refunds = tool_step(1, "fetch_sales_data"), tool_step(2, "fetch_refund_data")
        if self._broken(asked):
            refunds["tool"] = "delete_refunds"
        kpis = {
            "id": "s3",
            "title": "Compute the KPIs",
            "instruction": f"Calculate the KPIs for {MONTH} from the sales and refunds.",
            "depends_on": ["s1", "s2"],
        }
        return {"kind": "plan", "steps": [sales | {"depends_on": []}, refunds, kpis]}

    def _replan(self, asked: Asked) -> dict[str, Any]:
        remaining = asked.payload.get("remaining_steps") or []
        if remaining:
            return {"kind": "plan", "steps": remaining}
        return {"kind": "respond", "response": say(facts(asked.text()))}

    def _execute(self, asked: Asked) -> dict[str, Any]:
        payload = asked.payload
        step = payload.get("step") or {}
        if len(payload.get("path") or ()) == 1:  # the tree's root, the goal: too big at once
            return {"kind": "decompose", "reason": "The KPIs and the risk check are two jobs."}
        if not payload.get("turns"):
            words = " ".join(str(step.get(k) or "") for k in ("title", "name", "instruction"))
            tool = next(t for w, t in TOOL_WORDS if w in words.lower())
            if self._broken(asked):
                tool = "delete_refunds"
            return {"kind": "call", "tool": tool, "args": {"month": MONTH}}
        result = payload["turns"][-1]["result"]
        found = facts(json.dumps(result))
        return {"kind": "finish", "result": say(found) if found else json.dumps(result)}

    def _decompose(self, asked: Asked) -> dict[str, Any]:
        payload = asked.payload
        children = [
            ("Compute the KPIs", f"Calculate the monthly KPIs for {MONTH}."),
            ("Check the risks", f"Look for risk signals in the refunds of {MONTH}."),
        ]
        return {
            "target_node_id": payload["target_task"]["id"],
            "mode": payload.get("mode_hint", "subtasks"),
            "should_stop": False,
            "reason": None,
            "children": [
                {
                    "name": name,
                    "instruction": instruction,
                    "dependencies": [],
                    "context": {"combined": None, "sections": [], "meta": {}},
                    "leaf": True,
                }
                for name, instruction in children
            ],
        }

    def _finalize(self, asked: Asked) -> Any:
        found = facts(asked.text())
        if asked.schema is None:
            return say(found)
        return {name: found.get(name) for name in asked.schema.get("properties", {})}

    def _workflow(self, asked: Asked) -> dict[str, Any]:
        turns = asked.payload.get("turns") or []
        if not turns:
            return {"kind": "call", "tool": "calculate_monthly_kpis", "args": {"month": MONTH}}
        answer = say(facts(json.dumps(turns)))
        if len(turns) == 1:
            return {
                "kind": "call",
                "tool": "write_file",
                "args": {"path": REPORT, "content": answer},
            }
        return {"kind": "finish", "result": answer}


def tool_step(n: int, tool: str) -> dict[str, Any]:
    """Step ``n`` of a plan: ``tool`` for April 2026."""
    return {"id": f"s{n}", "title": f"Run {tool}", "tool": tool, "args": {"month": MONTH}}


def facts(text: str) -> dict[str, float]:
    """The KPIs ``text`` holds, as a tool's JSON result or as :func:`say` writes them."""
    for pattern in _FACTS:
        match = pattern.search(text)
        if match:
            return dict(zip(KPIS, map(float, match.groups()), strict=True))
    return {}


def say(found: Mapping[str, float]) -> str:
    """The KPIs in words (:data:`ANSWER` for April 2026), or that they are missing."""
    if not found:
        return "The KPIs are missing."
    gross, refunds, net = (found[k] for k in ("gross_sales_usd", "refunds_usd", "net_sales_usd"))
    return f"April 2026: gross {gross} USD, refunds {refunds} USD, net {net} USD."


def stated_schema(system: str) -> tuple[str, dict[str, Any] | None]:
    """The system prompt without the schema a ``json``/``prompt`` request states, and it.

    The schema is ``None`` when none is stated.
    """
    opening = outputs.schema_instructions({}).removesuffix("{}")
    before, found, after = system.partition(opening)
    if not found:
        return system, None
    schema, end = json.JSONDecoder().raw_decode(after)
    return (before + after[end:]).rstrip(), schema


def fenced(answer: Answer) -> str:
    """A structured answer as a model without JSON mode writes one: prose, then a fence."""
    return f"Here is my answer.\n```json\n{json.dumps(answer.value, indent=1)}\n```\nDone."
