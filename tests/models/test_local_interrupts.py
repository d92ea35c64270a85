"""The embedded model stops when asked: a cancelled call returns at once and its worker
stops between tokens, and the command exits on Ctrl-C or the deadline without waiting for
the model, a traceback or a crash.

Sized for a busy 2-core machine: no test measures how long anything took. A call is
cancelled while the test holds its worker between two tokens, so "at once" means "before the
worker went on", and a deadline or a Ctrl-C must cut the model call short ("model plan
failed"), not wait for its answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import subprocess
import threading
import time

import pytest

from taskdecomp.models.local import LocalModel, busy
from tests.cli.terminal import taskdecomp
from tests.clitools import EXE
from tests.conftest import SALES_TOOLS
from tests.models.conftest import require_local_extra
from tests.models.test_local import plan_request
from tests.support import SEED_GOAL

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_a_cancelled_call_returns_at_once_and_the_worker_stops_between_tokens() -> None:
    require_local_extra()
    model = LocalModel()
    heard: list[tuple[str, int]] = []
    held = threading.Event()
    release = threading.Event()

    def progress(stage: str, n: int) -> None:
        heard.append((stage, n))
        if stage == "generating" and n >= 5 and not held.is_set():
            held.set()  # the worker waits here, after its fifth token, until the test is done
            release.wait(600)

    async def cancel_while_it_writes() -> bool:
        request = dataclasses.replace(plan_request(), progress=progress)
        call = asyncio.create_task(model.complete(request))
        while not held.is_set():
            assert not call.done(), "the call ended before its fifth token"
            await asyncio.sleep(0.05)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        return busy()

    try:
        assert asyncio.run(cancel_while_it_writes())  # back while its worker is still held
    finally:
        release.set()
    until = time.monotonic() + 120  # returns as soon as the worker is done
    while busy() and time.monotonic() < until:
        time.sleep(0.05)
    assert not busy()
    answered = [n for stage, n in heard if stage == "generating"]
    assert answered == sorted(answered) and answered[-1] == 5  # it stopped at the next token

    # the model file is free again: the next call gets the whole answer
    response = asyncio.run(model.complete(plan_request()))
    assert response.finish_reason == "stop" and response.tokens_out > 20


def run_local(*extra: str) -> list[str]:
    return ["run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", "local", *extra]


def test_ctrl_c_on_the_embedded_model_stops_it_and_says_how_to_resume() -> None:
    require_local_extra()
    term = taskdecomp(*run_local())
    term.read_until(re.compile(r"model plan · \d+s · \d+ tokens · local"), timeout=600)
    term.ctrl_c()
    code = term.wait(timeout=120)
    assert code == 130, term.text
    text = " ".join(term.text.split())
    assert "Traceback" not in text and "Segmentation" not in text
    assert "stop_reason=cancelled" in text and "model plan failed" in text
    run_id = re.search(r"run ([0-9a-f]{32}) is stored as cancelled", text)
    assert run_id is not None and f"taskdecomp resume {run_id[1]}" in text


def test_two_ctrl_c_on_the_embedded_model_exit_at_once() -> None:
    require_local_extra()
    term = taskdecomp(*run_local())
    term.read_until(re.compile(r"model plan · \d+s · "), timeout=600)
    term.ctrl_c()
    time.sleep(0.2)
    term.ctrl_c()
    assert term.wait(timeout=60) == 130, term.text
    assert "Traceback" not in term.text and "Segmentation" not in term.text


def test_the_deadline_ends_the_process_without_waiting_for_the_model() -> None:
    require_local_extra()
    proc = subprocess.run(
        [str(EXE), *run_local("--max-seconds", "3")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stderr
    assert "stop_reason=max_seconds" in proc.stdout
    # cut short by the deadline: a call that had answered would not have failed
    assert re.search(r"^model plan failed \(\d+\.\d\ds\)$", proc.stderr, re.MULTILINE), proc.stderr
    assert "Traceback" not in proc.stderr and "Segmentation" not in proc.stderr
