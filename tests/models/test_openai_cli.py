"""The openai provider through the command line, against a misbehaving server of our own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from stub_servers.openai_server import FakeOpenAI, Reply, completion

from tests.clitools import cli
from tests.conftest import SALES_TOOLS
from tests.support import SEED_GOAL, seed_plan


@pytest.mark.parametrize(
    ("raw", "content_type"),
    [
        (b"<html><head><title>Sign in</title></head><body>proxy login</body></html>", "text/html"),
        (json.dumps(completion(json.dumps(seed_plan()))).encode()[:90], "application/json"),
    ],
    ids=["html", "cut-off-json"],
)
def test_a_200_that_is_not_a_chat_completion_is_a_stored_stop(
    fake_openai: FakeOpenAI,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    raw: bytes,
    content_type: str,
) -> None:
    fake_openai.fallback = Reply(raw=raw, content_type=content_type)
    db = f"sqlite:///{tmp_path / 'store' / 'runs.db'}"

    code, out, err = cli(
        capsys, "run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", "openai:fake-model",
        "--base-url", fake_openai.url, "--json", "--db", db,
    )  # fmt: skip

    assert code == 1
    assert "Traceback" not in err
    result = json.loads(out)
    assert (result["status"], result["stop_reason"]) == ("stopped", "llm_error:bad_response")
    assert result["llm_phase"] == "plan"
    assert content_type in result["message"] and fake_openai.url in result["message"]
    assert len(fake_openai.requests) == 1

    code, out, _ = cli(capsys, "show", result["run_id"], "--json", "--db", db)

    assert code == 0
    shown = json.loads(out)
    assert (shown["status"], shown["stop_reason"]) == ("stopped", "llm_error:bad_response")
    assert shown["message"] == result["message"]

    code, out, _ = cli(capsys, "run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model",
                       "openai:fake-model", "--base-url", fake_openai.url, "--db", db)  # fmt: skip

    assert code == 1
    assert "llm_error:bad_response" in out  # the readable summary says it too
