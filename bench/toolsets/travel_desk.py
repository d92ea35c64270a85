"""A travel desk toolset: travelers, bookings, flights, hotels, weather and currencies.

A second domain for ``bench/models.py``, one the planner prompt was never tuned on. Its
arguments have the shapes real toolsets have: integer ids, free-text city names, days with a
declared format (``YYYY-MM-DD``), closed sets (``Literal``) and a number. The data are a few
fixed rows; a lookup that finds nothing says so in an ``error`` key, as the sales tools do.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from taskdecomp import tool

Day = Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}$", description="a day, YYYY-MM-DD")]
Cabin = Literal["economy", "premium_economy", "business", "first"]
Reason = Literal["schedule_change", "illness", "price", "other"]
Currency = Literal["EUR", "USD", "GBP", "JPY"]

TRAVELERS = {
    77: {"id": 77, "name": "Lena Ortiz", "home_city": "Madrid", "tier": "gold", "seat": "aisle"},
    315: {"id": 315, "name": "Tom Berg", "home_city": "Lisbon", "tier": "silver", "seat": "window"},
}

BOOKINGS = {
    1042: {"id": 1042, "traveler_id": 77, "route": "Madrid-Berlin", "day": "2026-01-20"},
    2210: {"id": 2210, "traveler_id": 315, "route": "Lisbon-Berlin", "day": "2026-03-30"},
    5081: {"id": 5081, "traveler_id": 77, "route": "Rome-Paris", "day": "2026-08-15"},
}
PRICES_EUR = {1042: 184.0, 2210: 412.5, 5081: 129.9}

FARES_EUR: dict[Cabin, float] = {
    "economy": 120.0,
    "premium_economy": 260.0,
    "business": 690.0,
    "first": 1450.0,
}
EUR_RATES: dict[Currency, float] = {"EUR": 1.0, "USD": 1.08, "GBP": 0.85, "JPY": 162.0}


def get_traveler(traveler_id: int) -> dict[str, Any]:
    """A traveler's profile: name, home city, loyalty tier and seat preference."""
    traveler = TRAVELERS.get(traveler_id)
    if traveler is None:
        return {"error": f"traveler {traveler_id} not found"}
    return {"traveler": traveler}


def get_booking(booking_id: int) -> dict[str, Any]:
    """A booking: its traveler, route, day, status and price in EUR."""
    booking = BOOKINGS.get(booking_id)
    if booking is None:
        return {"error": f"booking {booking_id} not found"}
    return {"booking": {**booking, "status": "confirmed", "price_eur": PRICES_EUR[booking_id]}}


def search_flights(
    origin: str, destination: str, date: Day, cabin: Cabin = "economy"
) -> dict[str, Any]:
    """Flights from one city to another on a day, with departure times and fares in EUR."""
    fare = FARES_EUR[cabin]
    flights = [
        {"departs": f"{date}T{hour}", "cabin": cabin, "fare_eur": fare + extra}
        for hour, extra in (("07:10", 0.0), ("12:45", 35.0), ("18:30", 20.0))
    ]
    return {"origin": origin, "destination": destination, "date": date, "flights": flights}


def search_hotels(city: str, check_in: Day, nights: int) -> dict[str, Any]:
    """Hotels in a city with a room free from check_in for a number of nights."""
    if nights < 1:
        return {"error": f"nights must be at least 1, got {nights}"}
    hotels = [
        {"name": f"{city} Central", "stars": 4, "total_eur": 140.0 * nights},
        {"name": f"{city} Garden Inn", "stars": 3, "total_eur": 95.0 * nights},
    ]
    return {"city": city, "check_in": check_in, "nights": nights, "hotels": hotels}


def weather_forecast(city: str, date: Day) -> dict[str, Any]:
    """The weather forecast for a city on a day."""
    rainy = sum(map(ord, city + date)) % 3 == 0
    return {"city": city, "date": date, "sky": "rain" if rainy else "clear", "high_c": 19}


@tool(side_effects="idempotent")
def cancel_booking(booking_id: int, reason: Reason) -> dict[str, Any]:
    """Cancel a booking, giving the reason; says what is refunded."""
    if booking_id not in BOOKINGS:
        return {"error": f"booking {booking_id} not found"}
    refund = PRICES_EUR[booking_id] * (1.0 if reason == "illness" else 0.8)
    return {"booking_id": booking_id, "status": "cancelled", "refund_eur": round(refund, 2)}


def convert_currency(
    amount: float, from_currency: Currency, to_currency: Currency
) -> dict[str, Any]:
    """Convert an amount of money between EUR, USD, GBP and JPY."""
    converted = amount / EUR_RATES[from_currency] * EUR_RATES[to_currency]
    return {"amount": round(converted, 2), "currency": to_currency}


TOOLS = [
    get_traveler,
    get_booking,
    search_flights,
    search_hotels,
    weather_forecast,
    cancel_booking,
    convert_currency,
]
