"""How a ``tree`` run fails: the failure reaches every node that needs it, and only once.

A node that fails before running its subtree (a node it needs failed) ends that subtree
too, so nothing elsewhere waits for it forever, also after a resume. A leaf tried again,
or split after a failed attempt, is told what the failed attempt already did, so a call
with side effects is not made twice. A split waits for one of the run's parallel slots,
like a leaf's attempt.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from taskdecomp import (
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    TreeOptions,
    approve_sync,
    run_sync,
    tool,
)
from taskdecomp.budget import Budget
from taskdecomp.events import Event, NodeFinished
from taskdecomp.store import SqlStore
from taskdecomp.strategies.tree.view import run_tree
from tests.strategies.tree_support import (
    Log,
    asked_to_split,
    by_name,
    call,
    depend,
    finish,
    first_turn,
    kids,
    model,
    node,
    payload,
    pg_url,
    retry,
    rolling,
    sqlite_url,
    store,
    stored_tree,
    target,
    wants_split,
)

__all__ = ["pg_url", "sqlite_url", "store"]  # fixtures, used by name

DEADLINE = Budget(max_seconds=60)
"""Far more than any of these runs takes: a run that waits forever stops on it instead."""


def shown(store: SqlStore, run_id: str) -> dict[str, tuple[str, str | None]]:
    view = run_tree(store, store.load_run(run_id))
    assert view is not None
    return {entry["name"]: (entry["status"], entry["reason"]) for entry in view["nodes"]}


# -- a failure before a subtree ran ---------------------------------------------------------


def test_a_node_failed_by_what_it_needs_ends_its_subtree_for_those_waiting_on_it(
    store: SqlStore,
) -> None:
    tree = stored_tree(store, "Root", {"Root": {"D": {}, "P": {"B": {}, "C": {}}, "A": {}}})
    depend(store, tree, "P", "D")  # P fails when D does, before B and C run
    depend(store, tree, "A", "B")  # A waits for B, which never runs
    scripted = model(
        (node("D"), call("broken", key="x"), "execute"),
        (r'"title": "(B|C|A)"', finish("done"), "execute"),
    )
    result = run_sync(
        tools=Log().tools(),
        model=scripted,
        store=store,
        plan=tree.id,
        tree=TreeOptions(decompose="none", node_retries=0),
        budget=DEADLINE,
    )
    ids = {name: by_name(tree, name) for name in ("D", "P", "B")}
    assert result.stop_reason == f"node_failed:{ids['D']}", result.message
    assert shown(store, result.run_id) == {
        "Root": ("failed", f"node_failed:{ids['D']}"),
        "D": ("failed", "tool_error:broken"),
        "P": ("failed", f"node_failed:{ids['D']}"),
        "B": ("failed", f"node_failed:{ids['P']}"),
        "C": ("failed", f"node_failed:{ids['P']}"),
        "A": ("failed", f"node_failed:{ids['B']}"),
    }
    executed = [payload(r)["step"]["title"] for r in scripted.calls if r.phase == "execute"]
    assert executed == ["D"]


def test_as_needed_the_failure_reaches_the_waiting_node_after_the_splits_fail_too(
    store: SqlStore,
) -> None:
    tree = stored_tree(store, "Root", {"Root": {"D": {}, "P": {"B": {}, "C": {}}, "A": {}}})
    depend(store, tree, "P", "D")
    depend(store, tree, "A", "B")
    scripted = model(
        (node("D"), call("broken", key="x"), "execute"),
        (target("D"), {"should_stop": True, "reason": "cannot split"}, "decompose"),
        (target("Root"), {"should_stop": True, "reason": "nothing else"}, "decompose"),
        (r'"title": "(B|C|A)"', finish("done"), "execute"),
    )
    result = run_sync(
        tools=Log().tools(), model=scripted, store=store, plan=tree.id, budget=DEADLINE
    )
    assert result.stop_reason == f"node_failed:{by_name(tree, 'D')}", result.message
    assert [a["target_task"]["name"] for a in asked_to_split(scripted)] == ["D", "Root"]


def test_a_resumed_run_ends_the_subtree_of_a_node_that_failed_before_it_stopped(
    store: SqlStore,
) -> None:
    """P failed (D, which it needs, failed) before the run paused for E's call; A waits for
    E and then for B, under P: after the approval, B ends as failed for A."""
    tree = stored_tree(
        store, "Root", {"Root": {"D": {}, "P": {"B": {}, "C": {}}, "E": {}, "A": {}}}
    )
    depend(store, tree, "P", "D")
    depend(store, tree, "A", "E", "B")
    p_failed = threading.Event()

    def watch(event: Event) -> None:
        if isinstance(event, NodeFinished) and event.node_id == by_name(tree, "P"):
            p_failed.set()

    def wait_for_p(key: str) -> str:
        """Return once P failed."""
        assert p_failed.wait(30)
        return f"{key} waited"

    log = Log()
    tools = [*log.tools(), wait_for_p]
    scripted = model(
        (node("D"), call("broken", key="x"), "execute"),
        (node("E") + r'.*"call": \{"tool": "send"', finish("e sent"), "execute"),
        (first_turn("E"), call("wait_for_p", key="e"), "execute"),
        (node("E"), call("send", to="e"), "execute"),
        (r'"title": "(B|C|A)"', finish("done"), "execute"),
    )
    options = TreeOptions(decompose="none", node_retries=0)
    paused = run_sync(
        tools=tools,
        model=scripted,
        store=store,
        plan=tree.id,
        tree=options,
        budget=DEADLINE,
        on_event=watch,
    )
    assert paused.stop_reason == "awaiting_approval", paused.message
    ids = {name: by_name(tree, name) for name in ("D", "P", "B")}
    before = shown(store, paused.run_id)
    assert before["P"] == ("failed", f"node_failed:{ids['D']}")
    assert before["B"] == ("failed", f"node_failed:{ids['P']}")
    assert before["A"][0] in ("pending", "running")
    done = approve_sync(paused.run_id, store=store, tools=tools, model=scripted)
    assert done.stop_reason == f"node_failed:{ids['D']}", done.message
    after = shown(store, done.run_id)
    assert after["E"] == ("ok", None)
    assert after["A"] == ("failed", f"node_failed:{ids['B']}")
    assert log.named("send") == ["e"]


def test_a_resumed_run_ends_the_unrun_subtree_of_a_node_stored_as_failed(
    store: SqlStore,
) -> None:
    """As a run stored before the nodes below a failed node were recorded: they are
    recorded now, as failed for it, and the run ends naming the node that failed first."""
    tree = stored_tree(
        store, "Root", {"Root": {"D": {}, "P": {"B": {}, "C": {}}, "E": {}, "A": {}}}
    )
    depend(store, tree, "P", "D")
    depend(store, tree, "A", "E", "B")
    log = Log()
    scripted = model(
        (node("D"), call("broken", key="x"), "execute"),
        (first_turn("E"), call("send", to="e"), "execute"),
        (node("E"), finish("e sent"), "execute"),
        (r'"title": "(B|C|A)"', finish("done"), "execute"),
    )
    options = TreeOptions(decompose="none", node_retries=0)
    paused = run_sync(
        tools=log.tools(),
        model=scripted,
        store=store,
        plan=tree.id,
        tree=options,
        budget=DEADLINE,
    )
    assert paused.stop_reason == "awaiting_approval", paused.message
    ids = {name: by_name(tree, name) for name in ("D", "P", "B")}
    stored = store.load_run(paused.run_id)
    state: dict[str, Any] = stored.state["tree"]
    nodes = state["nodes"]
    nodes[str(ids["D"])] = {**nodes.get(str(ids["D"]), {}), "status": "failed"}
    nodes[str(ids["D"])]["reason"] = "tool_error:broken"
    nodes[str(ids["P"])] = {"status": "failed", "reason": f"node_failed:{ids['D']}"}
    for name in ("B", "C", "A"):
        nodes.pop(str(by_name(tree, name)), None)
    store.save_state(
        paused.run_id,
        stored.plan,
        {"tree": state},
        approvals=stored.approvals,
        usage=stored.usage,
        events=(),
    )
    done = approve_sync(paused.run_id, store=store, tools=log.tools(), model=scripted)
    assert done.stop_reason == f"node_failed:{ids['D']}", done.message
    after = shown(store, done.run_id)
    assert after["B"] == after["C"] == ("failed", f"node_failed:{ids['P']}")
    assert after["A"] == ("failed", f"node_failed:{ids['B']}")
    assert after["E"] == ("ok", None)


# -- what a failed attempt already did --------------------------------------------------------


def shop(charged: list[str]) -> list[Any]:
    """A card charge (unsafe: it happens once) and a carrier that is down."""

    @tool(side_effects="unsafe")
    def charge(order: str) -> str:
        """Charge the customer's card for an order."""
        charged.append(order)
        return f"charged {order}"

    def ship(order: str) -> str:
        """Ship the order."""
        raise RuntimeError("carrier API down")

    def book_courier(order: str) -> str:
        """Ship the order with a courier instead."""
        return f"courier booked for {order}"

    return [charge, ship, book_courier]


ALREADY_CHARGED = (
    r'"last_attempt": \{[^}]*"done": \[\{"tool": "charge", "args": \{"order": "7"\}, '
    r'"result": "charged 7"\}.*'
)
"""A retry's request that says the card was charged by the failed attempt (it comes before
the step in the request)."""


def test_a_retry_is_told_the_calls_the_failed_attempt_made_and_does_not_make_them_again(
    store: SqlStore,
) -> None:
    charged: list[str] = []
    tree = stored_tree(store, "Shop", {"Shop": {"Fulfil order 7": {}}})
    fulfil = "Fulfil order 7"
    scripted = model(
        (
            ALREADY_CHARGED + retry(fulfil) + r'.*"turns": \[\]',
            call("book_courier", order="7"),
            "execute",
        ),
        (
            retry(fulfil) + r'.*"call": \{"tool": "book_courier"',
            finish("charged and sent"),
            "execute",
        ),
        (first_turn(fulfil), call("charge", order="7"), "execute"),
        (node(fulfil), call("ship", order="7"), "execute"),
    )
    result = run_sync(
        tools=shop(charged),
        model=scripted,
        store=store,
        plan=tree.id,
        tree=TreeOptions(decompose="none", node_retries=1),
        budget=DEADLINE,
    )
    assert charged == ["7"]  # once, by the first attempt
    assert result.status == "ok", result.message
    assert result.answer == "charged and sent"
    again = next(payload(r) for r in scripted.calls if payload(r)["step"]["id"].endswith(".2"))
    assert again["last_attempt"] == {
        "failed": "tool_error:ship",
        "message": "RuntimeError: carrier API down",
        "done": [{"tool": "charge", "args": {"order": "7"}, "result": "charged 7"}],
    }
    assert again["turns"] == []  # the new attempt's own turns start afresh


def test_a_split_after_a_failed_attempt_is_told_what_it_already_did(store: SqlStore) -> None:
    charged: list[str] = []
    tree = stored_tree(store, "Shop", {"Shop": {"Fulfil order 7": {}}})
    fulfil = "Fulfil order 7"
    scripted = model(
        (first_turn(fulfil), call("charge", order="7"), "execute"),
        (node(fulfil), call("ship", order="7"), "execute"),
        (target(fulfil) + r'.*"failure": "[^"]*called charge', kids("Courier"), "decompose"),
        (target(fulfil), kids("Charge", "Courier"), "decompose"),
        (first_turn("Charge"), call("charge", order="7"), "execute"),
        (node("Charge"), finish("charged"), "execute"),
        (first_turn("Courier"), call("book_courier", order="7"), "execute"),
        (node("Courier"), finish("courier booked"), "execute"),
    )
    result = run_sync(
        tools=shop(charged), model=scripted, store=store, plan=tree.id, budget=DEADLINE
    )
    assert result.status == "ok", result.message
    assert charged == ["7"]
    (asked,) = asked_to_split(scripted)
    assert asked["failure"] == (
        "an attempt failed (tool_error:ship): RuntimeError: carrier API down\n"
        "Already done, not to be done again (use the results):\n"
        '- this task called charge {"order": "7"}: "charged 7"'
    )


def test_a_second_split_is_told_which_subtasks_finished_and_the_calls_that_failed(
    store: SqlStore,
) -> None:
    charged: list[str] = []
    tree = stored_tree(store, "Shop", {"Shop": {"Fulfil": {"Pay": {}, "Send": {}}}})
    depend(store, tree, "Send", "Pay")
    scripted = model(
        (first_turn("Pay"), call("charge", order="7"), "execute"),
        (node("Pay"), finish("paid: charged 7"), "execute"),
        (first_turn("Send"), call("book_courier", order="7"), "execute"),
        (node("Send"), call("ship", order="7"), "execute"),
        (target("Send"), {"should_stop": True, "reason": "one call"}, "decompose"),
        (target("Fulfil") + r".*subtask \'Pay\' finished", kids("Courier"), "decompose"),
        (target("Fulfil"), kids("Pay again", "Courier"), "decompose"),
        (node("Pay again"), call("charge", order="7"), "execute"),
        (node("Courier"), finish("sent by courier"), "execute"),
    )
    result = run_sync(
        tools=shop(charged),
        model=scripted,
        store=store,
        plan=tree.id,
        tree=TreeOptions(node_retries=0),
        budget=DEADLINE,
    )
    assert result.status == "ok", result.message
    assert result.answer == "sent by courier"
    assert charged == ["7"]
    resplit = [a for a in asked_to_split(scripted) if a["target_task"]["name"] == "Fulfil"]
    (failure,) = [a["failure"] for a in resplit]
    assert "- subtask 'Pay' finished: \"paid: charged 7\"" in failure
    assert (
        '- subtask \'Send\' called book_courier {"order": "7"}: "courier booked for 7"' in failure
    )


def test_what_was_done_is_bounded() -> None:
    from taskdecomp.strategies.tree import done

    turns = [{"call": {"tool": "look", "args": {"n": n}}, "result": "x" * 1000} for n in range(30)]
    kept = done.kept([], turns)
    assert len(kept) == done.MAX_CALLS and kept[0]["args"] == {"n": 10}
    assert all(len(call["result"]) == done.MAX_CHARS for call in kept)
    assert kept[0]["result"].endswith("\u2026")


# -- what runs at once ------------------------------------------------------------------------


class _Overlap(ScriptedModel):
    """A scripted model whose calls take a while, and that notes how many were at once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.flight = self.peak = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.flight += 1
        self.peak = max(self.peak, self.flight)
        try:
            await asyncio.sleep(0.05)
            return await super().complete(request)
        finally:
            self.flight -= 1


def test_a_split_takes_one_of_the_runs_parallel_slots(store: SqlStore) -> None:
    """A asks to be split while B works: with one slot, the decomposer's question and B's
    turns take turns."""
    tree = stored_tree(store, "Two", {"Two": {"A": {}, "B": {}}})
    scripted = _Overlap(
        rules=[
            (first_turn("A"), wants_split(), "execute"),
            (target("A"), kids("A1", "A2"), "decompose"),
            (first_turn("B"), call("lookup", key="b"), "execute"),
            (r'"title": "(A1|A2|B)"', finish("done"), "execute"),
            (rolling("A"), "a done", "rollup"),
            (rolling("Two"), "both done", "rollup"),
        ]
    )
    result = run_sync(
        tools=Log().tools(),
        model=scripted,
        store=store,
        plan=tree.id,
        budget=Budget(max_parallel=1, max_seconds=60),
    )
    assert result.status == "ok", result.message
    assert "decompose" in [request.phase for request in scripted.calls]
    assert scripted.peak == 1
