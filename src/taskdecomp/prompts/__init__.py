"""Prompts, shipped as package data so they can be read, diffed and snapshot-tested.

A prompt is a Markdown file with ``$placeholders``. A directory given by the user (``--prompts
DIR``) may replace any of them: ``DIR/<name>.md`` is used instead of the packaged file, with
the same placeholders (unknown ``$`` text is left as it is).
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from pathlib import Path
from string import Template

from taskdecomp.errors import ConfigError


@cache
def _read(name: str) -> str:
    return files(__name__).joinpath(f"{name}.md").read_text(encoding="utf-8").strip()


def render(name: str, *, directory: Path | None = None, **values: object) -> str:
    """The prompt ``name`` with ``$placeholders`` filled in.

    Args:
        name: the prompt, e.g. ``planner`` or ``replan/executor``.
        directory: a directory whose ``<basename>.md`` replaces the packaged prompt.
        values: the placeholders' values.

    Raises:
        KeyError: a placeholder of a packaged prompt has no value.
        ConfigError: the replacement file cannot be read.
    """
    if directory is not None:
        custom = directory / f"{name.rpartition('/')[2]}.md"
        if custom.is_file():
            try:
                text = custom.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"cannot read the prompt file {str(custom)!r}: {exc}") from exc
            return Template(text).safe_substitute(values)
    return Template(_read(name)).substitute(values)


def check_directory(directory: Path, names: tuple[str, ...]) -> list[str]:
    """The prompt files of ``names`` that ``directory`` replaces.

    Raises:
        ConfigError: ``directory`` does not exist or replaces none of them.
    """
    if not directory.is_dir():
        raise ConfigError(f"prompt directory {str(directory)!r} does not exist")
    found = [name for name in names if (directory / f"{name}.md").is_file()]
    if not found:
        wanted = ", ".join(f"{name}.md" for name in names)
        raise ConfigError(f"prompt directory {str(directory)!r} has none of: {wanted}")
    return found
