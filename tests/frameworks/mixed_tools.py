"""A toolset of every kind of tool taskdecomp reads from other frameworks.

Each tool records the arguments it was called with in ``CALLS``, so a test can tell that a
call refused by the gateway never reached it.
"""

from __future__ import annotations

from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.tools import tool as langchain_tool
from pydantic import BaseModel, Field
from pydantic_ai import Tool

from taskdecomp import framework_tool, schema_tool

CALLS: list[tuple[str, dict[str, Any]]] = []


@langchain_tool
def word_count(text: str) -> int:
    """Count the words of a text."""
    CALLS.append(("word_count", {"text": text}))
    return len(text.split())


async def _shout(text: str, times: int = 1) -> str:
    CALLS.append(("shout", {"text": text, "times": times}))
    return "!".join([text.upper()] * times)


shout = StructuredTool.from_function(
    coroutine=_shout,
    name="shout",
    description="Say a text louder.",
    args_schema={
        "type": "object",
        "properties": {"text": {"type": "string"}, "times": {"type": "integer", "minimum": 1}},
        "required": ["text"],
        "additionalProperties": False,
    },
)


class LookupArgs(BaseModel):
    """What to look up."""

    key: str = Field(description="the key, lower case", pattern="^[a-z]+$")


class Lookup(BaseTool):
    """A LangChain tool written as a class, with a pydantic model of its arguments."""

    name: str = "lookup"
    description: str = "Look a key up in the table."
    args_schema: type[BaseModel] = LookupArgs

    def _run(self, key: str) -> dict[str, Any]:
        CALLS.append(("lookup", {"key": key}))
        return {"key": key, "value": len(key)}


def add(a: int, b: int = 2) -> int:
    """Add two numbers.

    Args:
        a: the first number.
        b: the second number.
    """
    CALLS.append(("add", {"a": a, "b": b}))
    return a + b


async def scale(values: list[float], factor: float) -> list[float]:
    """Multiply every value by a factor."""
    CALLS.append(("scale", {"values": values, "factor": factor}))
    return [value * factor for value in values]


def convert(amount: float, currency: str) -> dict[str, Any]:
    CALLS.append(("convert", {"amount": amount, "currency": currency}))
    return {"amount": round(amount * 1.1, 2), "currency": currency}


CONVERT = {
    "type": "function",
    "function": {
        "name": "convert",
        "description": "Convert an amount of euros.",
        "parameters": {
            "type": "object",
            "properties": {
                "amount": {"type": "number"},
                "currency": {"type": "string", "enum": ["USD", "GBP"]},
            },
            "required": ["amount", "currency"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}


async def send(to: str, idempotency_key: str | None = None) -> dict[str, Any]:
    CALLS.append(("send", {"to": to, "idempotency_key": idempotency_key}))
    return {"sent_to": to, "key": idempotency_key}


SEND = {
    "name": "send",
    "description": "Send the report.",
    "parameters": {
        "type": "object",
        "properties": {"to": {"type": "string"}},
        "required": ["to"],
    },
}

TOOLS = [
    word_count,
    shout,
    framework_tool(Lookup(), side_effects="read_only", timeout=30),
    Tool(add),
    Tool(scale, requires_approval=False),
    (CONVERT, convert),
    schema_tool(SEND, send, side_effects="idempotent", timeout=30),
]
