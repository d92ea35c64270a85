"""``taskdecomp run`` exports its spans over OTLP/HTTP to a receiver on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.clitools import CHILD
from tests.conftest import SALES_TOOLS
from tests.support import SEED_GOAL, seed_plan
from tests.telemetry.receiver import receiving


def test_a_cli_run_exports_its_span_tree_over_otlp_http(tmp_path: Path) -> None:
    script = tmp_path / "model.json"
    script.write_text(json.dumps([seed_plan(), "Net sales were $26,825."]))
    with receiving() as receiver:
        env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
        env.pop("OTEL_SERVICE_NAME", None)
        argv = ["run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", f"scripted:{script}"]
        done = subprocess.run(
            [*CHILD, *argv, "--json"], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        run_id = json.loads(done.stdout)["run_id"]
        spans = receiver.wait(lambda got: any(s.name.startswith("invoke_agent") for s in got))

    names = sorted(span.name for span in spans)
    assert names == sorted(
        ["invoke_agent plan_execute", "chat model.json", "chat model.json"]
        + [f"execute_tool {step['tool']}" for step in seed_plan()["steps"]]
    )
    top = next(span for span in spans if span.name.startswith("invoke_agent"))
    assert top.attributes["taskdecomp.run.id"] == run_id
    assert top.attributes["taskdecomp.stop_reason"] == "success"
    assert top.service == "taskdecomp"
    assert {span.trace_id for span in spans} == {top.trace_id}
    assert {span.parent_id for span in spans if span is not top} == {top.span_id}
    assert "2026-04" not in json.dumps([span.attributes for span in spans])  # no arguments


def test_without_the_sdk_an_export_asked_for_is_one_warning_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    script = tmp_path / "model.json"
    script.write_text(json.dumps([seed_plan(), "Net sales were $26,825."]))
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
        "PYTHONPATH": os.pathsep.join(
            [os.environ.get("PYTHONPATH", ""), str(tmp_path / "sitecustom")]
        ),
    }
    (tmp_path / "sitecustom").mkdir()
    # the SDK package made unimportable, as where the otel extra is not installed
    (tmp_path / "sitecustom" / "sitecustomize.py").write_text(
        "import sys\nsys.modules['opentelemetry.sdk'] = None\n"
    )
    done = subprocess.run(
        [*CHILD, "run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", f"scripted:{script}"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]
    assert warnings == [
        "taskdecomp: warning: the OpenTelemetry SDK is not installed; "
        "pip install 'taskdecomp[otel]'; spans are not exported"
    ]


def test_console_spans_go_to_stderr_and_leave_json_output_whole(tmp_path: Path) -> None:
    script = tmp_path / "model.json"
    script.write_text(json.dumps([seed_plan(), "Net sales were $26,825."]))
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "console"}
    argv = ["run", SEED_GOAL, "--tools", str(SALES_TOOLS), "--model", f"scripted:{script}"]
    done = subprocess.run(
        [*CHILD, *argv, "--json"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["stop_reason"] == "success"  # stdout is the JSON alone
    assert '"name": "invoke_agent plan_execute"' in done.stderr  # the spans were printed
