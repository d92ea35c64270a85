"""The sales tools of examples/sales_report, plus one a human approves: send_report.

send_report "sends" the report by writing it to outbox/ in taskdecomp's data directory
(TASKDECOMP_HOME, else the user data directory, where runs.db is), so its effect can be seen
and is harmless. ``needs_approval=True`` pauses the run before every call until a human
approves it: on the web page, with ``POST /runs/{id}/approve``, or ``taskdecomp approve``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from taskdecomp import load_toolset, tool
from taskdecomp.settings import load_settings

SALES = load_toolset(Path(__file__).resolve().parent.parent / "sales_report" / "tools.py")


@tool(needs_approval=True, side_effects="unsafe")
def send_report(manager_id: int, kpis: dict[str, Any], risk_note: str) -> dict[str, Any]:
    """Send the monthly sales report to a manager (a human approves every call)."""
    outbox = load_settings().data_dir().expanduser() / "outbox"
    outbox.mkdir(parents=True, exist_ok=True)
    path = outbox / f"sales-{kpis['month']}-manager-{manager_id}.md"
    path.write_text(
        f"To: manager {manager_id}\n"
        f"Subject: Sales summary for {kpis['month']}\n\n"
        f"Gross sales: ${kpis['gross_sales_usd']:,.2f}\n"
        f"Refunds: ${kpis['refunds_usd']:,.2f}\n"
        f"Net sales: ${kpis['net_sales_usd']:,.2f}\n"
        f"Refund rate: {kpis['refund_rate']:.2%}\n"
        f"Risk note: {risk_note}\n"
    )
    return {"sent_to": manager_id, "file": str(path)}


TOOLS = [*SALES.values(), send_report]
