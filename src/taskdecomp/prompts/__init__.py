"""Prompts, shipped as package data so they can be read, diffed and snapshot-tested."""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from string import Template


@cache
def _read(name: str) -> str:
    return files(__name__).joinpath(f"{name}.md").read_text(encoding="utf-8").strip()


def render(name: str, **values: object) -> str:
    """The prompt ``name`` with ``$placeholders`` filled in.

    Raises:
        KeyError: a placeholder has no value.
    """
    return Template(_read(name)).substitute(values)
