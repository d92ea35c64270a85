"""Tools for launching a developer conference in Berlin (the tree strategy's example).

Every tool works on made-up data and has no effect outside the run. ``open_ticket_sales``
opens one ticket tier per call: asked for several at once it fails, and a run of the tree
strategy then splits the task that called it (one tier per subtask).
"""

from __future__ import annotations

from typing import Any

from taskdecomp import tool

VENUES = {
    "Berlin": [
        {"id": "bcc-hall-b", "name": "bcc Hall B", "seats": 350, "free": ["2027-06-10"]},
        {"id": "kosmos", "name": "Kosmos", "seats": 250, "free": ["2027-06-10", "2027-06-17"]},
    ]
}

TIER_PRICES_EUR = {"early-bird": 149, "regular": 249, "student": 49}


def find_venues(city: str, seats: int) -> dict[str, Any]:
    """Venues in a city with at least this many seats, and the dates they are free."""
    found = [venue for venue in VENUES.get(city, []) if venue["seats"] >= seats]
    return {"city": city, "venues": found}


@tool(side_effects="idempotent")
def book_venue(venue_id: str, date: str) -> dict[str, Any]:
    """Book a venue for a date (booking the same venue and date again changes nothing)."""
    venue = next((v for city in VENUES.values() for v in city if v["id"] == venue_id), None)
    if venue is None:
        raise ValueError(f"no venue {venue_id!r}; find_venues lists them")
    if date not in venue["free"]:
        raise ValueError(f"{venue['name']} is not free on {date}; free: {', '.join(venue['free'])}")
    return {"booking": f"BV-{venue_id}-{date}", "venue": venue["name"], "date": date}


def invite_speaker(name: str, talk: str) -> dict[str, Any]:
    """Invite a speaker to give a talk; returns the invitation."""
    return {"invited": name, "talk": talk, "status": "accepted"}


def open_call_for_papers(closes: str) -> dict[str, Any]:
    """Open the call for papers until a date (YYYY-MM-DD)."""
    return {"call_for_papers": "https://example.org/cfp", "closes": closes}


def open_ticket_sales(tiers: list[str], seats: int) -> dict[str, Any]:
    """Open ticket sales for one tier (early-bird, regular or student) with a number of seats."""
    if len(tiers) != 1:
        raise ValueError(f"the ticket shop opens one tier per call, got {len(tiers)}: {tiers}")
    (tier,) = tiers
    if tier not in TIER_PRICES_EUR:
        raise ValueError(f"no tier {tier!r}; tiers: {', '.join(TIER_PRICES_EUR)}")
    return {"tier": tier, "seats": seats, "price_eur": TIER_PRICES_EUR[tier], "on_sale": True}


TOOLS = [find_venues, book_venue, invite_speaker, open_call_for_papers, open_ticket_sales]
