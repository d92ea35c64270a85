"""A pydantic-ai tool that needs the agent's RunContext, which taskdecomp does not give."""

from pydantic_ai import RunContext, Tool


def greet(ctx: RunContext[str], name: str) -> str:
    """Greet someone on behalf of the agent's user."""
    return f"{ctx.deps} greets {name}"


def plain(name: str) -> str:
    """Say a name."""
    return name


TOOLS = [Tool(plain), Tool(greet)]
