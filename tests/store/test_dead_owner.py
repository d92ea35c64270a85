"""A lease whose owner died on this host is taken over at once; others wait for its expiry."""

from __future__ import annotations

import threading

import pytest

from taskdecomp import RunLeasedError, owners
from taskdecomp.run import RunId
from taskdecomp.store import NewRun, SqlStore, open_store
from tests.test_owners import exited_child_owner, forged

RUN = RunId("r1")


def stored_with_lease(store: SqlStore, owner: str) -> None:
    new = NewRun(run_id=RUN, goal="goal", model=None, tools=None, config={})
    lease = store.create_run(new, owner=owner, ttl=3600)  # an hour left: expiry is no reason
    assert lease.owner == owner


def test_a_lease_of_a_dead_process_of_this_host_is_taken_at_once(store: SqlStore) -> None:
    dead = exited_child_owner()
    stored_with_lease(store, dead)
    mine = owners.new_owner_id()
    lease = store.acquire_lease(RUN, owner=mine, ttl=30)
    assert (lease.owner, lease.epoch) == (mine, 2)
    held = store.load_run(RUN).lease
    assert held is not None and held.owner == mine


@pytest.mark.parametrize("kind", ["other host", "older form", "alive here"])
def test_a_lease_that_may_still_be_held_is_refused(timed: SqlStore, kind: str) -> None:
    dead = owners.parse(exited_child_owner())
    assert dead is not None
    owner = {
        "other host": forged(dead.pid, started=dead.started, key="00000000"),
        "older form": f"box:{dead.pid}:9f3a1c",
        "alive here": owners.new_owner_id(),
    }[kind]
    stored_with_lease(timed, owner)  # the store's clock stands still: all the hour is left
    with pytest.raises(RunLeasedError, match=r"holds the lease for 3600\.0s more") as no:
        timed.acquire_lease(RUN, owner=owners.new_owner_id(), ttl=30)
    said = "is of an older form" if kind == "older form" else "died on another host"
    assert said in str(no.value)
    held = timed.load_run(RUN).lease
    assert held is not None and (held.owner, held.epoch) == (owner, 1)


def test_two_take_overs_of_a_dead_owner_race_and_exactly_one_wins(store_url: str) -> None:
    first = open_store(store_url)
    stored_with_lease(first, exited_child_owner())
    stores = [first, open_store(store_url)]
    outcomes: list[str] = []
    barrier = threading.Barrier(len(stores))

    def take(store: SqlStore) -> None:
        me = owners.new_owner_id()
        barrier.wait()
        try:
            store.acquire_lease(RUN, owner=me, ttl=30)
        except RunLeasedError as exc:
            outcomes.append(f"refused:{exc.owner}")
        else:
            outcomes.append(f"took:{me}")

    try:
        threads = [threading.Thread(target=take, args=(store,)) for store in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        took = [o.removeprefix("took:") for o in outcomes if o.startswith("took:")]
        refused = [o.removeprefix("refused:") for o in outcomes if o.startswith("refused:")]
        assert len(took) == 1 and len(refused) == 1, outcomes
        assert refused == took  # the refusal names the winner
        held = first.load_run(RUN).lease
        assert held is not None and (held.owner, held.epoch) == (took[0], 2)
    finally:
        for store in stores:
            store.close()
