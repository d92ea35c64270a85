"""Values read from a goal, and the arguments they fit."""

from __future__ import annotations

import datetime
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taskdecomp.models.goal_values import (
    GoalValues,
    extract_values,
    restrict_arguments,
    values_for,
)
from taskdecomp.models.schemas import plan_schema
from taskdecomp.tools import Toolset

Currency = Literal["EUR", "USD", "GBP", "JPY"]

MONTH_NAMES = [datetime.date(2000, m, 1).strftime("%B") for m in range(1, 13)]


@pytest.mark.parametrize(
    "goal",
    [
        "Prepare an April 2026 monthly sales summary",
        "sales for april 2026",
        "sales for APRIL 2026.",
        "sales for Apr 2026",
        "sales for Apr. 2026",
        "sales for April, 2026",
        "sales for April of 2026",
        "sales for 2026-04",
        "sales for 2026/04",
        "sales for 04/2026",
        "sales for 4/2026",
        "sales for 4-2026",
        "(month=2026-04)",
        "sales for month=April 2026",
    ],
)
def test_a_month_in_any_usual_form_is_yyyy_mm(goal: str) -> None:
    values = extract_values(goal)

    assert values.months == ("2026-04",)
    assert values.dates == ()
    assert 2026 not in values.integers
    assert 4 not in values.integers


@pytest.mark.parametrize(
    "goal",
    [
        "meet on March 3rd 2026",
        "meet on March 3rd, 2026",
        "meet on March 3, 2026",
        "meet on Mar. 3 2026",
        "meet on 3 March 2026",
        "meet on 3rd of March 2026",
        "meet on 3rd March, 2026",
        "meet on 2026-03-03",
        "meet on 2026/03/03",
        "meet on 03/03/2026",
        "meet on 2026-03-03T10:30",
    ],
)
def test_a_date_in_any_usual_form_is_iso(goal: str) -> None:
    values = extract_values(goal)

    assert values.dates == ("2026-03-03",)
    assert values.months == ()
    assert values.integers == ()


@pytest.mark.parametrize(
    ("goal", "dates"),
    [
        ("due 15/03/2026", ("2026-03-15",)),  # day first: 15 is no month
        ("due 03/15/2026", ("2026-03-15",)),  # month first: 15 is no month
        ("due 15.03.2026", ("2026-03-15",)),
        ("due 03/04/2026", ()),  # 3 April or March 4: neither
        ("due 2026-02-30", ()),  # no such day
        ("due 31/02/2026", ()),
    ],
)
def test_a_numeric_date_is_read_only_when_unambiguous(goal: str, dates: tuple[str, ...]) -> None:
    values = extract_values(goal)

    assert values.dates == dates
    assert values.integers == ()  # its numbers are no integers either


@pytest.mark.parametrize(
    ("goal", "integers"),
    [
        ("invite 2026 people", (2026,)),  # a year alone is a number, not a month
        ("plans for Q2", ()),
        ("compare abc123 with x86_64 and 7up", ()),
        ("the 3rd report", ()),
        ("a rate of 2.5 at 10:30", ()),
        ("pages 5-6", ()),
        ("version 1.2.3", ()),
        ("budget 1,000 for 3, 4 and -2 units", (1000, 3, 4, -2)),
        ("ids 1,2,3", (1, 2, 3)),
        ("customer 42.", (42,)),
        ("order #1042 and ticket 7", (1042, 7)),
        ("May brings 12% more", (12,)),
        ("in May of this year", ()),
        ("in April", ()),
    ],
)
def test_integers_are_standalone_numbers(goal: str, integers: tuple[int, ...]) -> None:
    values = extract_values(goal)

    assert values.integers == integers
    assert values.months == ()


def test_integers_carry_the_words_beside_them() -> None:
    values = extract_values("for manager_id=42, customer 1042 and order #77 in April 2026")

    assert values.integers == (42, 1042, 77)
    assert values.months == ("2026-04",)
    assert values.pairs == {"manager_id": "42"}
    assert values.labels == (
        ("manager_id", 42),
        ("customer", 1042),
        ("and", 1042),
        ("order", 77),
        ("in", 77),
    )


def test_quoted_strings_and_pairs() -> None:
    values = extract_values(
        "Email \"Weekly numbers\" to team='Retail East' about “Q2 plan”; don't use it's "
        'region=US limit=5. name="A B"'
    )

    assert values.strings == ("Weekly numbers", "Retail East", "Q2 plan", "A B")
    assert values.pairs == {"team": "Retail East", "region": "US", "limit": "5", "name": "A B"}
    assert ("Email", "Weekly numbers") in values.labels
    assert values.integers == (5,)


def test_repeats_are_listed_once_in_order() -> None:
    values = extract_values("May 2026 vs April 2026 vs 2026-05; ids 9, 3, 9")

    assert values.months == ("2026-05", "2026-04")
    assert values.integers == (9, 3)


def test_a_goal_without_values_is_empty() -> None:
    values = extract_values("Summarise the quarter for the board")

    assert not values
    assert values == GoalValues(text="Summarise the quarter for the board")


@given(
    month=st.integers(1, 12),
    year=st.integers(1900, 2999),
    form=st.sampled_from(["{name} {year}", "{abbr}. {year}", "{year}-{mm}", "{mm}/{year}"]),
)
def test_every_month_of_every_year(month: int, year: int, form: str) -> None:
    name = MONTH_NAMES[month - 1]
    text = form.format(name=name, abbr=name[:3], year=year, mm=f"{month:02d}")

    assert extract_values(f"report for {text} please").months == (f"{year:04d}-{month:02d}",)


@given(day=st.dates(datetime.date(1900, 1, 1), datetime.date(2999, 12, 31)))
def test_every_day_in_words_and_iso(day: datetime.date) -> None:
    forms = [f"{day:%B} {day.day}, {day.year}", f"{day.day} {day:%B} {day.year}", day.isoformat()]

    for form in forms:
        assert extract_values(f"due {form} ok").dates == (day.isoformat(),), form


# -- values_for ---------------------------------------------------------------------------

SALES = extract_values("Prepare an April 2026 monthly sales summary for manager_id=42")
MONTH_PATTERN = {"type": "string", "pattern": r"^\d{4}-\d{2}$"}


def test_a_month_pattern_takes_the_months() -> None:
    assert values_for(MONTH_PATTERN, SALES) == ("2026-04",)
    assert values_for({"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"}, SALES) == ()


def test_a_date_format_takes_the_dates() -> None:
    values = extract_values("between 2026-03-01 and March 9th 2026, in April 2026")

    assert values_for({"type": "string", "format": "date"}, values) == ("2026-03-01", "2026-03-09")


def test_an_integer_takes_the_integers() -> None:
    assert values_for({"type": "integer"}, SALES) == (42,)
    assert values_for({"type": "integer", "minimum": 100}, SALES) == ()
    assert values_for({"type": "integer"}, extract_values("in April 2026")) == ()


def test_an_integer_prefers_the_ones_its_name_labels() -> None:
    values = extract_values("top 5 orders of customer 1042 for manager_id=42")

    assert values_for({"type": "integer"}, values, name="customer_id") == (1042,)
    assert values_for({"type": "integer"}, values, name="manager_id") == (42,)
    assert values_for({"type": "integer"}, values, name="customerId") == (1042,)
    assert values_for({"type": "integer"}, values, name="limit") == (5, 1042, 42)


def test_an_integer_another_argument_names_is_left_to_it() -> None:
    values = extract_values("Traveler 77 needs a hotel from 2026-09-19 for 5 nights")
    names = ["traveler_id", "booking_id", "nights", "amount"]

    def offered(name: str) -> tuple[Any, ...]:
        return values_for({"type": "integer"}, values, name=name, others=names)

    assert offered("traveler_id") == (77,)
    assert offered("nights") == (5,)  # the word after it names it
    assert offered("booking_id") == ()  # 77 is the traveler's, 5 the nights'
    assert offered("amount") == ()
    assert values_for({"type": "integer"}, values, name="booking_id") == (77, 5)  # no others


def test_an_unlabelled_integer_stays_open_to_every_argument() -> None:
    values = extract_values("How much is 250 USD in euros?")
    names = ["traveler_id", "amount"]

    assert values_for({"type": "integer"}, values, name="amount", others=names) == (250,)
    assert values_for({"type": "integer"}, values, name="traveler_id", others=names) == (250,)


def test_calendar_names_pick_calendar_parts() -> None:
    values = extract_values("April 2026 and 2026-05-17 for manager 42")

    assert values_for({"type": "integer"}, values, name="year") == (2026,)
    assert values_for({"type": "integer"}, values, name="month") == (5, 4)
    assert values_for({"type": "integer"}, values, name="day") == (17,)
    assert values_for({"type": "string", "maxLength": 120}, values, name="month") == ("2026-04",)
    assert values_for({"type": "string"}, values, name="start_date") == ("2026-05-17",)


def test_a_free_text_string_takes_only_what_names_it() -> None:
    values = extract_values('search "climate" in April 2026 with note="call Anna"')
    text = {"type": "string", "maxLength": 120}

    assert values_for(text, values, name="body") == ()
    assert values_for(text, values) == ()
    assert values_for(text, values, name="note") == ("call Anna",)
    assert values_for(text, values, name="search") == ("climate",)
    assert values_for({"type": "string", "maxLength": 5}, values, name="note") == ()


def test_a_pair_names_the_argument_it_is_for() -> None:
    values = extract_values("limit=7 for customer 1042 region=us")

    assert values_for({"type": "integer"}, values, name="limit") == (7,)
    assert values_for({"type": "integer"}, values, name="LIMIT") == (7,)
    assert values_for({"type": "integer"}, values, name="region") == (7, 1042)  # not a number
    assert values_for({"enum": ["US", "EU"]}, values, name="region") == ("US",)


def test_an_enum_takes_the_members_the_goal_mentions() -> None:
    values = extract_values("Net sales and refund rate for the EU, not gross")
    kpis = {"type": "string", "enum": ["gross_sales", "net_sales", "refund-rate", "orders"]}

    assert values_for(kpis, values) == ("net_sales", "refund-rate")
    assert values_for({"enum": ["US", "EU"]}, values) == ("EU",)
    assert values_for({"enum": ["ne"]}, values) == ()  # not inside a word
    assert values_for({"enum": [1, 2, 42]}, SALES) == (42,)
    assert values_for({"enum": ["US", "EU"]}, SALES) == ()


def test_a_member_named_only_inside_a_longer_members_name_is_not_taken() -> None:
    cabins = {"enum": ["economy", "premium_economy", "business"]}

    assert values_for(cabins, extract_values("Premium economy to Oslo")) == ("premium_economy",)
    both = extract_values("premium economy out, economy back")
    assert values_for(cabins, both) == ("economy", "premium_economy")


def test_an_optional_argument_is_read_through_its_null() -> None:
    optional = {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None}

    assert values_for(optional, SALES) == (42,)
    assert values_for({"anyOf": [MONTH_PATTERN, {"type": "null"}]}, SALES) == ("2026-04",)


def test_other_types_take_nothing() -> None:
    for schema in ({"type": "boolean"}, {"type": "number"}, {"type": "array"}, {"const": 42}):
        assert values_for(schema, SALES) == (), schema


def test_a_pattern_python_cannot_read_takes_nothing() -> None:
    assert values_for({"type": "string", "pattern": r"^\p{L}+$"}, SALES) == ()


# -- restrict_arguments -----------------------------------------------------------------


def fetch(month: str, manager_id: int, note: str = "", region: str | None = None) -> None:
    """A tool with a month, an id and two free-text strings."""


def test_tool_arguments_become_enums_of_their_goal_values() -> None:
    catalog = Toolset.from_functions([fetch]).catalog(["fetch"])
    schema = plan_schema(catalog, min_steps=1, max_steps=2)

    restricted = restrict_arguments(schema, SALES)

    props = restricted["$defs"]["tool__fetch__args"]["properties"]
    assert props["month"] == {"enum": ["2026-04"]}
    assert props["manager_id"] == {"enum": [42]}
    assert props["note"] == schema["$defs"]["tool__fetch__args"]["properties"]["note"]
    assert props["region"] == schema["$defs"]["tool__fetch__args"]["properties"]["region"]
    assert restricted["$defs"]["step_1"] == schema["$defs"]["step_1"]  # titles stay free
    assert schema["$defs"]["tool__fetch__args"]["properties"]["month"]["type"] == "string"


def book(booking_id: int) -> None:
    """A tool whose id another tool's argument must not take."""


def stay(city: str, nights: int) -> None:
    """A tool with a count."""


def test_an_integer_goes_to_the_argument_of_any_tool_that_names_it() -> None:
    catalog = Toolset.from_functions([book, stay]).catalog(["book", "stay"])
    schema = plan_schema(catalog, min_steps=1, max_steps=2)

    restricted = restrict_arguments(schema, extract_values("Rome for 3 nights, booking 1042"))

    assert restricted["$defs"]["tool__book__args"]["properties"]["booking_id"] == {"enum": [1042]}
    assert restricted["$defs"]["tool__stay__args"]["properties"]["nights"] == {"enum": [3]}


def convert(amount: float, from_currency: Currency, to_currency: Currency) -> None:
    """A tool whose two arguments share one enum."""


def test_an_enum_shared_by_two_arguments_is_restricted_only_when_the_goal_names_two() -> None:
    catalog = Toolset.from_functions([convert]).catalog(["convert"])
    schema = plan_schema(catalog, min_steps=1, max_steps=1)

    def props(goal: str) -> dict[str, Any]:
        restricted = restrict_arguments(schema, extract_values(goal))
        found: dict[str, Any] = restricted["$defs"]["tool__convert__args"]["properties"]
        return found

    one = props("How much is 250 USD in euros?")  # "euros" names no member
    free = schema["$defs"]["tool__convert__args"]["properties"]
    assert one["from_currency"] == free["from_currency"]  # both keep every member
    assert one["to_currency"] == free["to_currency"]
    assert free["to_currency"]["enum"] == ["EUR", "USD", "GBP", "JPY"]
    two = props("Convert 100 USD to GBP")
    assert two["from_currency"] == two["to_currency"] == {"enum": ["USD", "GBP"]}


def test_inline_args_and_enum_definitions_are_restricted_too() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "tool": {"enum": ["paint"]},
            "args": {
                "type": "object",
                "properties": {
                    "color": {"$ref": "#/$defs/Color"},
                    "size": {"type": "integer"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                },
            },
            "size": {"type": "integer"},
        },
        "$defs": {"Color": {"enum": ["red", "green"], "type": "string"}},
    }

    restricted = restrict_arguments(schema, extract_values("paint it Green, size 3"))

    args = restricted["properties"]["args"]["properties"]
    assert args["color"] == {"enum": ["green"]}
    assert args["size"] == {"enum": [3]}
    assert args["tags"] == {"type": "array", "items": {"type": "string"}}
    assert restricted["properties"]["size"] == {"type": "integer"}  # not an argument


def test_a_goal_without_values_changes_nothing() -> None:
    catalog = Toolset.from_functions([fetch]).catalog(["fetch"])
    schema = plan_schema(catalog, min_steps=1, max_steps=2)

    assert restrict_arguments(schema, extract_values("just do it")) == schema
