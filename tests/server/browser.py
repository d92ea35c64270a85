"""Debian's ``chromium`` driven by Playwright for the page tests (never a downloaded browser)."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
)  # fmt: skip


@contextlib.contextmanager
def chromium_page(
    profile: Path, *, args: tuple[str, ...] = (), init_script: str | None = None
) -> Iterator[Any]:
    """A fresh page of Debian's chromium, its profile in ``profile``; ``args`` added to
    :data:`ARGS`, ``init_script`` run in every document before its own scripts."""
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed (apt-get install chromium)")
    from playwright import sync_api

    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, args=[*ARGS, *args], headless=True
        )
        if init_script is not None:
            context.add_init_script(init_script)
        page = context.new_page()
        page.set_default_timeout(30_000)
        try:
            yield page
        finally:
            context.close()
