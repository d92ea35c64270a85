"""Two-resume toolset: an order is fetched, waits for approval, then is invoiced once.

``INVOICE_DIR`` holds the files: ``wait_for_approval`` touches ``waiting.<pid>`` and blocks
until ``open`` exists; ``send_invoice`` (``unsafe``) appends its process id to ``invoices``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from taskdecomp import tool


def _dir() -> Path:
    return Path(os.environ["INVOICE_DIR"])


@tool(side_effects="read_only")
def fetch_order(n: int) -> dict[str, int]:
    """Read an order."""
    return {"order": n, "amount": 120}


@tool(side_effects="read_only")
def wait_for_approval(n: int) -> dict[str, int]:
    """Block until a human approves (the ``open`` file exists)."""
    (_dir() / f"waiting.{os.getpid()}").touch()
    while not (_dir() / "open").exists():
        time.sleep(0.02)
    return {"approved": n}


@tool(side_effects="unsafe")
def send_invoice(n: int) -> dict[str, int]:
    """Send the invoice: must happen at most once."""
    with open(_dir() / "invoices", "a", encoding="utf-8") as ledger:
        ledger.write(f"{os.getpid()}\n")
        ledger.flush()
        os.fsync(ledger.fileno())
    return {"sent": n}


TOOLS = [fetch_order, wait_for_approval, send_invoice]
