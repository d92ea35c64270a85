"""Where a ``tree`` run stands, keyed by node id: stored with every checkpoint.

The plan tree keeps the seed's fields only; how its nodes went is the run's business. The
state holds each node's status and result, the executor agent's turns of unfinished
attempts, the splits the run made, the questions it put to the decomposer and has no answer
to yet, the nodes the tree had when the run began and the ones the run wrote: the run's
nodes, whatever other runs of the plan add to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from taskdecomp.errors import CorruptRecordError
from taskdecomp.store.base import StoredRun

NodeStatus = Literal["pending", "running", "ok", "failed", "decomposed"]
"""How a node stands in a run: ``decomposed`` while the children of a split run."""

STATE_KEY = "tree"
"""The key of the strategy state in a stored run."""


@dataclass(kw_only=True)
class NodeRecord:
    """One node's place in the run."""

    status: NodeStatus = "pending"
    result: Any = None
    """The leaf's result or the inner node's roll-up, once ``ok``."""
    reason: str | None = None
    """Why it failed, or why its last attempt did (a stop reason)."""
    message: str | None = None
    attempts: int = 0
    """Attempts at it as a leaf that ended (without a result)."""
    step_no: int | None = None
    """Its step's number in the run, once it has one."""
    done: list[dict[str, Any]] = field(default_factory=list)
    """The tool calls its failed attempts made, with their results (``tool``, ``args``,
    ``result``; bounded, see :mod:`taskdecomp.strategies.tree.done`)."""

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        self.__dict__.pop("_json", None)  # changed: made again when next asked for

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the status, and each other field that is not at its default.

        Every checkpoint stores every node's record; one made is kept until the record
        changes (do not change what it returns).
        """
        made: dict[str, Any] | None = self.__dict__.get("_json")
        if made is None:
            made = {"status": self.status}
            for name, default in _DEFAULTS:
                value = getattr(self, name)
                if value != default:
                    made[name] = value
            self.__dict__["_json"] = made
        return made


_DEFAULTS: tuple[tuple[str, Any], ...] = (
    ("result", None),
    ("reason", None),
    ("message", None),
    ("attempts", 0),
    ("step_no", None),
    ("done", []),
)
"""A record's fields other than its status, with their defaults (left out of its JSON)."""


@dataclass(kw_only=True)
class Split:
    """A split of a node: asked for (in ``asking``), or made (in ``splits``).

    Asked for, it is on record before the decomposer is asked, so that a run resumed after
    a crash finds the children the decomposer wrote (from ``first_position`` on) instead of
    asking again.
    """

    first_position: int
    """The position the split's first child takes among the node's children (the ones
    before it are not the split's)."""
    reason: str
    """Why the node was split: the failure the decomposer was told about."""
    children: list[int] | None = None
    """The node's active children: the ones written (``[]``: none, the node stays a leaf),
    or, when a second split wrote none the run could take, the ones it had; ``None`` while
    asked."""
    redo: bool = False
    """A second split of an inner node whose child failed (``--redecompose``), taken or
    not: the node is not split again."""
    waiting: bool = False
    """Its children wait for a human's approval (``approve_decompositions``)."""
    old: list[int] = field(default_factory=list)
    """The node's active children when the split was asked (a second split's): none of
    them is a child the split wrote."""
    drop: list[int] = field(default_factory=list)
    """Nodes the split takes out of the stored tree and has not yet: the children it wrote
    that the run refused, or the old children its new ones replace."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "first_position": self.first_position,
            "reason": self.reason,
            "children": self.children,
            "redo": self.redo,
        } | {  # left out at their defaults
            name: value
            for name, value in (("waiting", self.waiting), ("old", self.old), ("drop", self.drop))
            if value
        }


@dataclass(kw_only=True)
class TreeState:
    """A ``tree`` run's progress (see the module docstring)."""

    plan_id: int | None = None
    """The plan tree the run works through (``None`` until a goal's tree is stored)."""
    root: int | None = None
    """The run's root node; ``None``: every root of the plan."""
    known: list[int] = field(default_factory=list)
    """The nodes of the tree when the run began."""
    created: list[int] | None = None
    """The nodes the run's own splits and upfront growth wrote and it kept. With
    ``known``, the run's nodes: whatever another run adds to the tree is not this run's.
    ``None`` in a state stored before it was kept: every node is the run's."""
    added: int = 0
    """How many nodes the run wrote into the tree, kept or not (``max_nodes``)."""
    upfront: bool = False
    """The upfront decomposition is done."""
    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    splits: dict[str, Split] = field(default_factory=dict)
    """The splits made, by node id: only their children are the node's active ones."""
    asking: dict[str, Split] = field(default_factory=dict)
    """The splits asked for and not answered yet, by node id."""
    agent_turns: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    next_step: int = 1
    """The number the next node's step gets."""

    def record(self, node_id: int) -> NodeRecord:
        """The record of ``node_id`` (a new, pending one when it has none)."""
        return self.nodes.setdefault(str(node_id), NodeRecord())

    def number(self, node_id: int) -> int:
        """The step number of ``node_id``, given the first time it is asked for."""
        record = self.record(node_id)
        if record.step_no is None:
            record.step_no, self.next_step = self.next_step, self.next_step + 1
        return record.step_no

    # The executor agent's turn log (:class:`~taskdecomp.strategies.replan.agent.TurnLog`).
    def turns(self, step_id: str) -> list[dict[str, Any]]:
        """The agent's turns so far in ``step_id``."""
        return self.agent_turns.setdefault(step_id, [])

    def finished(self, step_id: str) -> None:
        """The agent is done with ``step_id``."""
        self.agent_turns.pop(step_id, None)

    def members(self) -> set[int] | None:
        """The run's nodes (see ``created``); ``None``: every node of the tree."""
        if self.created is None:
            return None
        return {*self.known, *self.created}

    def snapshot(self) -> Mapping[str, Any]:
        """What a checkpoint stores as the strategy state."""
        return {STATE_KEY: self.to_dict()}

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "plan_id": self.plan_id,
            "root": self.root,
            "known": self.known,
            "created": self.created,
            "added": self.added,
            "upfront": self.upfront,
            "nodes": {key: record.to_dict() for key, record in self.nodes.items()},
            "splits": {key: split.to_dict() for key, split in self.splits.items()},
            "asking": {key: split.to_dict() for key, split in self.asking.items()},
            "agent_turns": self.agent_turns,
            "next_step": self.next_step,
        }

    @classmethod
    def from_stored(cls, stored: StoredRun) -> TreeState:
        """The state ``stored`` was checkpointed with (empty before its first checkpoint).

        Raises:
            CorruptRecordError: the stored state does not decode.
        """
        data = stored.state.get(STATE_KEY)
        if data is None:
            return cls()
        try:
            raw = _STATE.validate_python(data)
            return cls(
                plan_id=_ID.validate_python(raw.get("plan_id")),
                root=_ID.validate_python(raw.get("root")),
                known=_IDS.validate_python(raw.get("known") or []),
                created=_SOME_IDS.validate_python(raw.get("created")),
                added=_ID.validate_python(raw.get("added")) or 0,
                upfront=bool(raw.get("upfront")),
                nodes=_NODES.validate_python(raw.get("nodes") or {}),
                splits=_SPLITS.validate_python(raw.get("splits") or {}),
                asking=_SPLITS.validate_python(raw.get("asking") or {}),
                agent_turns=_TURNS.validate_python(raw.get("agent_turns") or {}),
                next_step=_ID.validate_python(raw.get("next_step")) or 1,
            )
        except ValidationError as exc:
            problem = str(exc).strip().splitlines()[0]
            raise CorruptRecordError(
                f"the stored tree state does not decode ({problem}); refusing to use it"
            ) from exc


_STATE: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])
_ID: TypeAdapter[int | None] = TypeAdapter(int | None)
_IDS: TypeAdapter[list[int]] = TypeAdapter(list[int])
_SOME_IDS: TypeAdapter[list[int] | None] = TypeAdapter(list[int] | None)
_NODES: TypeAdapter[dict[str, NodeRecord]] = TypeAdapter(dict[str, NodeRecord])
_SPLITS: TypeAdapter[dict[str, Split]] = TypeAdapter(dict[str, Split])
_TURNS: TypeAdapter[dict[str, list[dict[str, Any]]]] = TypeAdapter(dict[str, list[dict[str, Any]]])
