"""The embedded model stops when asked: a cancelled call returns at once and its worker
stops between tokens, and the command exits on Ctrl-C or the deadline without waiting for
the model, a traceback or a crash.

Sized for a busy 2-core machine: every bound is generous and none is a speed claim.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import subprocess
import time

import pytest

from taskdecomp.models.local import LocalModel, busy
from tests.cli.terminal import EXE, taskdecomp
from tests.conftest import SALES_TOOLS
from tests.models.conftest import require_local_extra
from tests.models.test_local import plan_request
from tests.support import SEED_GOAL

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_a_cancelled_call_returns_at_once_and_the_worker_stops_between_tokens() -> None:
    require_local_extra()
    model = LocalModel()
    heard: list[tuple[str, int]] = []

    async def cancel_while_it_writes() -> float:
        request = dataclasses.replace(
            plan_request(), progress=lambda stage, n: heard.append((stage, n))
        )
        call = asyncio.create_task(model.complete(request))
        while not any(n >= 5 for stage, n in heard):
            await asyncio.sleep(0.05)
        cancelled = time.monotonic()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        return time.monotonic() - cancelled

    assert asyncio.run(cancel_while_it_writes()) < 1
    until = time.monotonic() + 30
    while busy() and time.monotonic() < until:
        time.sleep(0.05)
    assert not busy()  # it stopped at a token, not at the end of its answer
    answered = [n for stage, n in heard if stage == "generating"]
    assert answered == sorted(answered) and answered[-1] < 1024

    # the model file is free again: the next call gets the whole answer
    response = asyncio.run(model.complete(plan_request()))
    assert response.finish_reason == "stop" and response.tokens_out > 20


def run_local(*extra: str) -> list[str]:
    return ["run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", "local", *extra]


def test_ctrl_c_on_the_embedded_model_stops_it_and_says_how_to_resume() -> None:
    require_local_extra()
    term = taskdecomp(*run_local())
    term.read_until(re.compile(r"model plan · \d+s · \d+ tokens · local"), timeout=600)
    typed = time.monotonic()
    term.ctrl_c()
    code = term.wait(timeout=60)
    assert code == 130, term.text
    assert time.monotonic() - typed < 10, term.text
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
    started = time.monotonic()
    proc = subprocess.run(
        [str(EXE), *run_local("--max-seconds", "3")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr
    assert "stop_reason=max_seconds" in proc.stdout
    assert re.search(r"^model plan failed \([23]\.\d\ds\)$", proc.stderr, re.MULTILINE), proc.stderr
    assert elapsed < 3 + 15, elapsed  # the answer alone takes longer than that
