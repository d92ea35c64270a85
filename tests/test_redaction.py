"""Secrets never reach a run's record: events, result, store, command output and logs."""

from __future__ import annotations

import io
import itertools
import json
import logging
import os
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taskdecomp import run_sync
from taskdecomp.engine import approve_sync
from taskdecomp.events import Event, StepFinished
from taskdecomp.plan import Step
from taskdecomp.redact import (
    REDACTED,
    RedactingFilter,
    Redactor,
    StreamRedactor,
    add_log_filter,
    declare,
    is_secret_name,
)
from taskdecomp.run import HistoryEntry, TraceEntry
from taskdecomp.store import open_store
from tests.clitools import CHILD, cli

LEAKY_TOOLS = '''
import logging
import os


def note(text: str) -> str:
    """Say something."""
    return text


def read_key(name: str) -> dict:
    """Read a key from the environment (and a short flag)."""
    return {"variable": name, "value": os.environ[name], "flag": os.environ["FOO_TOKEN"]}


def call_api(name: str) -> str:
    """Call an API that refuses the key, logging which key it tried."""
    key = os.environ[name]
    logging.getLogger("leaky").warning("calling upstream with key %s", key)
    raise RuntimeError("401 from upstream: key " + key + " is revoked")
'''
"""A toolset that returns the key, raises with it and logs it."""

PUBLISH_TOOLS = '''
from taskdecomp import tool


def note(text: str) -> str:
    """Say something."""
    return text


@tool(needs_approval=True)
def publish(key: str) -> str:
    """Publish with a key (a human approves every call)."""
    return "published"
'''

ANSWER_GOAL = "leak the answer"
ERROR_GOAL = "leak the error"


def _plan(middle: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "plan",
        "steps": [
            {"id": "first", "title": "start", "tool": "note", "args": {"text": "start"}},
            middle,
            {"id": "last", "title": "end", "tool": "note", "args": {"text": "end"}},
        ],
    }


def leaky_script(path: Path, secret: str) -> str:
    """A planner whose plans use the key, and a combiner whose answer repeats it."""
    key = {"name": "OPENAI_API_KEY"}
    body = {
        "rules": [
            {
                "match": ANSWER_GOAL,
                "phase": "plan",
                "response": _plan({"id": "key", "title": "k", "tool": "read_key", "args": key}),
            },
            {
                "match": ERROR_GOAL,
                "phase": "plan",
                "response": _plan({"id": "api", "title": "a", "tool": "call_api", "args": key}),
            },
            {"match": ".", "phase": "finalize", "response": f"The key is {secret}; flag 1"},
        ]
    }
    path.write_text(json.dumps(body))
    return f"scripted:{path}"


def new_secret() -> str:
    return f"sk-test-{uuid.uuid4().hex}"


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> str:
    value = new_secret()
    monkeypatch.setenv("OPENAI_API_KEY", value)
    monkeypatch.setenv("FOO_TOKEN", "1")
    return value


@pytest.fixture
def leaky(tmp_path: Path, secret: str) -> tuple[str, str]:
    """The toolset's path and the model string."""
    tools = tmp_path / "leaky_tools.py"
    tools.write_text(LEAKY_TOOLS)
    return str(tools), leaky_script(tmp_path / "leaky.json", secret)


def stored_bytes(db: Path) -> bytes:
    """The SQLite file and its write-ahead log, as they are on disk now."""
    wal = db.with_name(db.name + "-wal")
    return db.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


# -- which variables hold secrets -------------------------------------------------------


def test_secret_variables_are_known_by_name_and_suffix() -> None:
    for name in (
        "OPENAI_API_KEY",
        "TASKDECOMP_API_TOKEN",
        "ANTHROPIC_API_KEY",
        "GITHUB_TOKEN",
        "CLIENT_SECRET",
        "DB_PASSWORD",
        "AWS_SECRET_ACCESS_KEY",
        "openai_api_key",
    ):
        assert is_secret_name(name), name
    for name in ("PATH", "HOME", "OPENAI_MODEL", "TASKDECOMP_DATABASE_URL", "KEYBOARD", "TOKENS"):
        assert not is_secret_name(name), name


def test_short_and_blank_values_are_never_secrets() -> None:
    redactor = Redactor.from_environ(
        {"FOO_TOKEN": "1", "BAR_KEY": "true", "EMPTY_SECRET": "", "DB_PASSWORD": " 1234567 "}
    )
    assert not redactor and redactor.secrets == ()
    assert redactor.text("1 true 1234567") == "1 true 1234567"


def test_the_environment_gives_the_values_of_secret_variables() -> None:
    redactor = Redactor.from_environ(
        {
            "OPENAI_API_KEY": "sk-openai-0123456789",
            "TASKDECOMP_API_TOKEN": "service-token-xyz",
            "MY_PASSWORD": "hunter2-hunter2",
            "PATH": "/usr/local/bin:/usr/bin",
            "OPENAI_MODEL": "gpt-4.1-mini",
        }
    )
    assert set(redactor.secrets) == {
        "sk-openai-0123456789",
        "service-token-xyz",
        "hunter2-hunter2",
    }


def test_a_declared_variable_is_a_secret_whatever_its_name() -> None:
    environ = {"MY_LLM_CREDS_7F3A": "creds-0123456789"}
    assert not Redactor.from_environ(environ)
    assert Redactor.from_environ(environ, names=["MY_LLM_CREDS_7F3A"]).secrets
    declare("MY_LLM_CREDS_7F3A")
    assert Redactor.from_environ(environ).secrets == ("creds-0123456789",)


def test_a_connection_declares_the_variable_it_reads_its_key_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from taskdecomp.models import Connection

    monkeypatch.setenv("PLUGIN_LLM_CREDS_Q9", "plugin-key-0123456789")
    assert Connection(api_key_env="PLUGIN_LLM_CREDS_Q9").api_key() == "plugin-key-0123456789"
    assert "plugin-key-0123456789" in Redactor.from_environ().secrets


# -- what is replaced ---------------------------------------------------------------------


def test_text_is_redacted_everywhere_longest_secret_first() -> None:
    redactor = Redactor.of(["abcdefgh", "abcdefgh-long-one"])
    assert redactor.text("x abcdefgh-long-one y abcdefgh") == f"x {REDACTED} y {REDACTED}"
    clean = "nothing to see"
    assert redactor.text(clean) is clean


def test_json_like_values_are_redacted_at_any_depth_and_kept_when_clean() -> None:
    redactor = Redactor.of(["sk-abcdefgh"])
    value = {"a": [1, 2.5, None, True, ("sk-abcdefgh!",)], "sk-abcdefgh": {"b": "x"}}
    assert redactor.value(value) == {
        "a": [1, 2.5, None, True, (f"{REDACTED}!",)],
        REDACTED: {"b": "x"},
    }
    assert value["a"][4] == ("sk-abcdefgh!",)  # the original is left alone
    clean = {"a": [1, "two", {"three": (3,)}]}
    assert redactor.value(clean) is clean


def test_frozen_dataclasses_are_copied_with_redacted_fields() -> None:
    redactor = Redactor.of(["sk-abcdefgh"])
    step = Step(id="s1", title="t", tool="call", args={"key": "sk-abcdefgh"})
    entry = HistoryEntry(step_no=1, plan_step=step, observation={"echo": "sk-abcdefgh"})
    redacted = redactor.value(entry)
    assert redacted.plan_step.args == {"key": REDACTED}
    assert redacted.observation == {"echo": REDACTED}
    assert entry.plan_step.args == {"key": "sk-abcdefgh"}
    ok = TraceEntry(step_no=1, step_id="s1", tool="call", args_hash="h", ok=True)
    assert redactor.value(ok) is ok


def test_a_record_handed_on_again_comes_back_as_it_was_redacted() -> None:
    redactor = Redactor.of(["sk-abcdefgh"])
    leaked = TraceEntry(
        step_no=1, step_id="s1", tool="t", args_hash="h", ok=False, error="sk-abcdefgh"
    )
    redacted = redactor.value(leaked)
    assert redacted.error == REDACTED
    assert redactor.value(redacted) is redacted
    assert redactor.value((redacted,))[0] is redacted


def test_a_mutable_dataclass_is_looked_into_every_time() -> None:
    @dataclass
    class Box:
        text: str

    redactor = Redactor.of(["sk-abcdefgh"])
    box = Box("clean")
    assert redactor.value(box) is box
    box.text = "now sk-abcdefgh"
    assert redactor.value(box).text == f"now {REDACTED}"


def test_nothing_to_redact_returns_the_value_itself() -> None:
    value = {"key": "sk-abcdefgh"}
    assert Redactor().value(value) is value


# -- logs ------------------------------------------------------------------------------


def test_the_log_filter_redacts_messages_arguments_and_tracebacks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    secret = new_secret()
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    add_log_filter(handler, RedactingFilter(Redactor.of([secret])))
    logger = logging.getLogger("tests.redaction")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("using %s", secret)
        try:
            raise RuntimeError(f"refused {secret}")
        except RuntimeError:
            logger.exception("the call failed")
        logger.warning("nothing secret here")
        logger.warning("too many arguments for %s", secret, secret)  # reported on stderr
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    text = out.getvalue()
    assert secret not in text
    assert f"using {REDACTED}" in text and f"RuntimeError: refused {REDACTED}" in text
    assert "nothing secret here" in text
    reported = capsys.readouterr().err
    assert "too many arguments" in reported and secret not in reported


# -- a run in Python -------------------------------------------------------------------


def test_events_and_result_of_a_run_hold_no_secret(leaky: tuple[str, str], secret: str) -> None:
    tools, model = leaky
    events: list[Event] = []
    answered = run_sync(ANSWER_GOAL, tools=tools, model=model, on_event=events.append)
    failed = run_sync(ERROR_GOAL, tools=tools, model=model, on_event=events.append)
    assert answered.answer == f"The key is {REDACTED}; flag 1"
    assert answered.history[1].observation == {
        "variable": "OPENAI_API_KEY",
        "value": REDACTED,
        "flag": "1",  # FOO_TOKEN=1 is too short to be a secret
    }
    assert failed.stop_reason == "tool_error:call_api"
    assert failed.message is not None and REDACTED in failed.message
    errors = [e.entry.error for e in events if isinstance(e, StepFinished) and e.entry.error]
    assert errors and all(REDACTED in error for error in errors)
    everything = repr(events) + json.dumps([answered.to_dict(), failed.to_dict()])
    assert secret not in everything


def test_a_call_approved_with_the_key_in_its_arguments_goes_on(tmp_path: Path, secret: str) -> None:
    tools = tmp_path / "publish_tools.py"
    tools.write_text(PUBLISH_TOOLS)
    plan = _plan({"id": "pub", "title": "p", "tool": "publish", "args": {"key": secret}})
    script = tmp_path / "publish.json"
    script.write_text(json.dumps([plan, "published"]))
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    try:
        paused = run_sync("publish", tools=str(tools), model=f"scripted:{script}", store=store)
        assert paused.stop_reason == "awaiting_approval"
        assert paused.approval is not None
        assert paused.approval["subject"]["args"] == {"key": REDACTED}
        # the resumed run reads the plan as stored: the approval must still match it
        approved = approve_sync(paused.run_id, store=store)
        assert approved.stop_reason == "success", approved.message
    finally:
        store.close()
    assert secret.encode() not in stored_bytes(tmp_path / "runs.db")


# -- the command line ------------------------------------------------------------------


def test_the_command_line_never_prints_or_stores_the_key(
    capsys: pytest.CaptureFixture[str], leaky: tuple[str, str], secret: str, tmp_path: Path
) -> None:
    tools, model = leaky
    db = tmp_path / "runs.db"
    common = ("--tools", tools, "--model", model, "--db", str(db))

    code, out, err = cli(capsys, "run", ANSWER_GOAL, *common, "--json")
    assert code == 0, err
    answered = json.loads(out)
    assert answered["answer"] == f"The key is {REDACTED}; flag 1"
    assert answered["history"][1]["observation"]["flag"] == "1"
    printed = out + err

    # in a process of its own, so the logs go where they go for a user (stderr)
    argv = [*CHILD, "run", ERROR_GOAL, *common, "--debug"]
    child = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ), timeout=120)
    assert child.returncode == 1, child.stderr
    assert "RuntimeError: 401 from upstream" in child.stderr  # the tool's traceback, logged
    assert f"calling upstream with key {REDACTED}" in child.stderr  # the tool's own warning
    printed += child.stdout + child.stderr
    (failed,) = [r for r in _runs(capsys, db) if r["run_id"] != answered["run_id"]]

    for run_id in (answered["run_id"], failed["run_id"]):
        for view in (("--json",), ()):
            code, out, err = cli(capsys, "show", run_id, "--db", str(db), *view)
            assert code == 0, err
            printed += out + err
    assert secret not in printed
    assert printed.count(REDACTED) >= 6
    assert secret.encode() not in stored_bytes(db)
    assert REDACTED.encode() in stored_bytes(db)


def _runs(capsys: pytest.CaptureFixture[str], db: Path) -> list[dict[str, Any]]:
    code, out, err = cli(capsys, "runs", "--db", str(db), "--json")
    assert code == 0, err
    runs: list[dict[str, Any]] = json.loads(out)
    return runs


@given(
    before=st.text(max_size=40),
    after=st.text(max_size=40),
    cuts=st.lists(st.integers(min_value=0, max_value=120), max_size=8),
)
def test_a_streamed_text_is_redacted_as_a_whole_however_it_is_cut(
    before: str, after: str, cuts: list[int]
) -> None:
    secret = "sk-stream-0123456789abcdef"
    redactor = Redactor.of([secret])
    text = before + secret + after
    bounds = sorted({0, len(text), *(cut for cut in cuts if cut < len(text))})
    stream = StreamRedactor(redactor)
    shown = [stream.feed(text[a:b]) for a, b in itertools.pairwise(bounds)]
    shown.append(stream.flush())
    assert "".join(shown) == redactor.text(text)
    if secret[:12] not in before + after:  # no piece shows the secret's beginning either
        assert all(secret[:12] not in piece for piece in shown)


def test_a_streamed_text_is_held_back_only_where_a_secret_could_begin() -> None:
    stream = StreamRedactor(Redactor.of(["x" * 2500, "sk-short-0123456789"]))
    assert stream.feed("The total is 42. ") == "The total is 42. "  # nothing held
    assert stream.feed("Key: sk-sh") == "Key: "  # the start of a secret waits
    assert stream.feed("ort-0123456789 done") == "[redacted] done"
    assert stream.flush() == ""
