"""Run event streams: replay from the store, Last-Event-ID, live delivery, the end."""

from __future__ import annotations

import threading

from tests.server.support import Served, sse_events, sse_iter, wait_for


def start(client, goal: str) -> str:
    response = client.post("/runs", json={"goal": goal, "toolset": "demo"})
    assert response.status_code == 202, response.text
    return str(response.json()["run_id"])


def ended(client, run_id: str) -> dict:
    return wait_for(
        lambda: (v := client.get(f"/runs/{run_id}").json())["status"] in ("ok", "stopped") and v
    )


def test_a_finished_run_replays_every_event_in_order_then_ends(served: Served) -> None:
    with served.client() as client:
        run_id = start(client, "dag")
        ended(client, run_id)
        messages = sse_events(client, f"/runs/{run_id}/events")
    events, end = messages[:-1], messages[-1]
    assert [m["id"] for m in events] == list(range(1, len(events) + 1))
    assert [m["data"]["seq"] for m in events] == [m["id"] for m in events]
    kinds = [m["event"] for m in events]
    assert kinds[0] == "RunStarted" and kinds[-1] == "RunStopped"
    assert kinds.count("StepFinished") == 4 and "PlanCreated" in kinds
    finished = {m["data"]["data"]["step_id"] for m in events if m["event"] == "StepFinished"}
    assert finished == {"a", "b", "c", "d"}
    assert end == {"event": "end", "data": {"status": "ok", "last_seq": len(events)}}


def test_last_event_id_resumes_exactly_after_that_event(served: Served) -> None:
    with served.client() as client:
        run_id = start(client, "dag")
        ended(client, run_id)
        everything = sse_events(client, f"/runs/{run_id}/events")[:-1]
        for cut in (0, 1, 5, len(everything) - 1, len(everything)):
            rest = sse_events(client, f"/runs/{run_id}/events", last_event_id=cut)[:-1]
            assert rest == everything[cut:], cut
        query = sse_events(client, f"/runs/{run_id}/events?after=3")[:-1]
        assert query == everything[3:]


def test_a_client_that_reconnects_mid_run_misses_nothing(tmp_path, config) -> None:
    import dataclasses

    from tests.server.support import run_model

    slow = dataclasses.replace(config, models=(run_model(tmp_path, seconds=0.3),))
    with Served(slow) as server, server.client() as client:
        run_id = start(client, "dag")
        first = sse_events(client, f"/runs/{run_id}/events", limit=3)
        assert [m["id"] for m in first] == [1, 2, 3]
        rest = sse_events(client, f"/runs/{run_id}/events", last_event_id=3)
        whole = sse_events(client, f"/runs/{run_id}/events")
    assert first + rest == whole
    assert rest[-1]["event"] == "end" and rest[-2]["event"] == "RunStopped"


def test_events_arrive_while_the_run_is_in_flight(tmp_path, config) -> None:
    import dataclasses

    from tests.server.support import run_model

    slow = dataclasses.replace(config, models=(run_model(tmp_path, seconds=0.5),))
    seen: list[tuple[str, str]] = []
    with Served(slow) as server, server.client() as client:
        run_id = start(client, "dag")

        def status() -> str:
            return str(client.get(f"/runs/{run_id}").json()["status"])

        for message in sse_iter(client, f"/runs/{run_id}/events"):
            seen.append((message["event"], status()))
            if message["event"] == "end":
                break
    steps = [state for kind, state in seen if kind == "StepFinished"]
    assert steps and steps[0] == "running"  # the first step arrived before the run ended
    assert seen[-1][0] == "end"


def test_a_paused_run_keeps_its_stream_open_until_it_ends(served: Served) -> None:
    with served.client() as client:
        run_id = start(client, "approval")
        wait_for(lambda: client.get(f"/runs/{run_id}").json()["status"] == "paused")
        got: list[dict] = []

        def read() -> None:
            with served.client() as own:
                for message in sse_iter(own, f"/runs/{run_id}/events"):
                    got.append(message)
                    if message["event"] == "end":
                        return

        reader = threading.Thread(target=read)
        reader.start()
        wait_for(lambda: any(m["event"] == "ApprovalRequested" for m in got))
        assert reader.is_alive()  # paused: the stream waits for what comes next
        assert client.post(f"/runs/{run_id}/approve").status_code == 202
        reader.join(timeout=30)
        assert not reader.is_alive()
    kinds = [m["event"] for m in got]
    assert kinds.index("ApprovalRequested") < kinds.index("ApprovalDecided")
    assert kinds[-2:] == ["RunStopped", "end"] and got[-1]["data"]["status"] == "ok"
    assert [m["id"] for m in got[:-1]] == list(range(1, len(got)))
