"""bench/providers.py in its small mode: both tables are printed, every provider in each.

The figures are the benchmark's business (docs/benchmarks.md); here the script runs as a user
runs it, and the tables' shape is checked: a row per provider and call kind, times that are
times, the ratio computed from the medians, and an import row per provider module.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

PROVIDERS = ["openai", "groq", "anthropic", "google"]
MODULES = [f"taskdecomp.models.{name}" for name in ("openai", "hosts", "anthropic", "google")]


@pytest.fixture(scope="module")
def output() -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "providers.py"), "--small"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert done.stderr == ""  # no warning from an SDK, no unclosed client
    return done.stdout


def rows(out: str, header: str) -> list[list[str]]:
    """The cells of the table whose header starts with ``header``, up to a blank line."""
    lines = out.splitlines()
    start = next(no for no, line in enumerate(lines) if line.startswith(header))
    assert lines[start + 1].startswith("|---")
    found = []
    for line in lines[start + 2 :]:
        if not line.strip():
            break
        found.append([cell.strip() for cell in line.strip("|").split("|")])
    return found


def test_every_provider_has_a_plain_and_a_streamed_row(output: str) -> None:
    table = rows(output, "| provider | mode | ours ms | ours p90 | raw SDK ms | raw p90 | ratio |")
    assert [(row[0], row[1]) for row in table] == [
        (provider, mode) for provider in PROVIDERS for mode in ("plain", "streamed")
    ]
    for row in table:
        ours, ours_p90, raw, raw_p90, ratio, new = map(float, row[2:])
        assert 0 < ours <= ours_p90 and 0 < raw <= raw_p90 and new > 0
        assert ratio == pytest.approx(ours / raw, abs=0.02)


def test_every_provider_module_and_its_sdk_have_an_import_time(output: str) -> None:
    table = rows(output, "| module | import ms | SDK | SDK import ms |")
    assert [row[0] for row in table] == MODULES
    assert [row[2] for row in table] == ["openai", "openai", "anthropic", "google.genai"]
    assert all(float(row[1]) > 0 and float(row[3]) > 0 for row in table)


def test_the_run_says_what_it_measured(output: str) -> None:
    assert output.startswith("providers, native mode, 5 calls each after 1 left out")
