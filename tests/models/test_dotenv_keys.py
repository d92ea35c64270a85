"""A key read from ``.env`` is as secret as an exported one: no run records it."""

from __future__ import annotations

import json
from pathlib import Path

from taskdecomp import run_sync
from taskdecomp.models.openai import openai_model
from taskdecomp.store import SqlStore
from tests.conftest import SALES_TOOLS
from tests.models.conftest import FakeOpenAI
from tests.models.test_openai import PLAN, ok
from tests.support import SEED_GOAL

KEY = "sk-dotenv-secret-0123456789abcdef"


def test_a_key_from_dotenv_is_redacted_in_the_result_and_the_store(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    (Path.cwd() / ".env").write_text(f"OPENAI_API_KEY={KEY}\n")  # cwd: a fresh directory
    fake_openai.queue(ok(PLAN), ok(f"Done. (debug: my key is {KEY})"))
    model = openai_model("fake-model", base_url=fake_openai.url)

    store = SqlStore(f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        result = run_sync(SEED_GOAL, tools=SALES_TOOLS, model=model, store=store)
        stored = repr(store.load_run(result.run_id)) + repr(store.load_events(result.run_id))
    finally:
        store.close()

    assert result.stop_reason == "success"
    assert fake_openai.headers[0]["authorization"] == f"Bearer {KEY}"  # the key was used
    assert result.answer == "Done. (debug: my key is [redacted])"
    assert KEY not in json.dumps(result.to_dict())
    assert "[redacted]" in stored and KEY not in stored
