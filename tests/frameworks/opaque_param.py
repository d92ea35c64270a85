"""A LangChain tool with a parameter pydantic cannot describe as JSON schema."""

from langchain_core.tools import tool


class Connection:
    """Not data: nothing a planner could write."""


@tool
def query(sql: str, connection: Connection) -> list[str]:
    """Run a query."""
    return [sql]


TOOLS = [query]
