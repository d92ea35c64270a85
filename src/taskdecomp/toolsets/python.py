"""Toolsets from Python: a ``.py`` file or an importable module (``--tools tools.py``).

Its tools are the functions listed in its ``TOOLS`` if it defines one, else every public
top-level function with type hints. ``ISOLATION = "process"`` runs them in a worker process.
A file is imported under a private module name (:data:`TOOLSET_MODULE_PREFIX`), so two
files with one name never collide.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from taskdecomp.argmodels import TOOLSET_MODULE_PREFIX
from taskdecomp.errors import ToolsetError
from taskdecomp.tools import ISOLATIONS, Toolset
from taskdecomp.toolsets.frameworks import adapt


def load_python_toolset(source: str | Path) -> Toolset:
    """Load a toolset from a Python file path or an importable module name.

    Without a ``TOOLS`` list, a public function without type hints is not a tool: it is
    listed in :attr:`Toolset.skipped` with the reason, so a caller can say so.

    Raises:
        ToolsetError: the file or module does not exist, fails to import, or defines no tool.
    """
    module = _import_source(source)
    listed = getattr(module, "TOOLS", None)
    skipped: dict[str, str] = {}
    if listed is not None:
        if not isinstance(listed, list | tuple):
            raise ToolsetError(
                f"{source}: TOOLS must be a list of tools (functions, ToolSpecs, or tools of "
                f"another framework), got {type(listed).__name__}"
            )
        functions: list[Any] = list(listed)
    else:
        functions, skipped = _public_functions(module)
    if not functions:
        why = f" (skipped, without type hints: {', '.join(skipped)})" if skipped else ""
        raise ToolsetError(
            f"{source}: no tools found{why}; define typed public functions or a TOOLS list"
        )
    isolation = getattr(module, "ISOLATION", None)
    if isolation is not None and isolation not in ISOLATIONS:
        raise ToolsetError(f"{source}: ISOLATION must be 'none' or 'process', got {isolation!r}")
    path = Path(source)
    name = str(path.resolve()) if path.is_file() else str(source)
    parts = [_tools_of(source, index, item, isolation) for index, item in enumerate(functions)]
    specs = (spec for part in parts for spec in part.values())
    return Toolset(specs, source=name, skipped=skipped)


def _tools_of(source: str | Path, index: int, item: Any, isolation: Any) -> Toolset:
    """The tools of one item of a toolset; an error names the item, by its place in TOOLS."""
    try:
        tools = Toolset.from_functions([item], isolation=isolation)
    except ToolsetError as exc:
        where = "" if inspect.isfunction(item) else f"TOOLS[{index}]: "
        raise ToolsetError(f"{source}: {where}{exc}") from None
    if isolation == "process" and adapt(item) is not None:
        raise ToolsetError(
            f"{source}: TOOLS[{index}]: ISOLATION = 'process' cannot isolate a tool of another "
            "framework (it is not a function a worker process can import); move it to a "
            "toolset without ISOLATION"
        )
    return tools


UNTYPED = "it has no type hints; annotate its parameters (or list it in TOOLS) to make it a tool"
"""Why a public function of a toolset without ``TOOLS`` is not a tool."""


def _public_functions(module: ModuleType) -> tuple[list[Any], dict[str, str]]:
    """The module's own public functions: those with type hints, and the rest with why."""
    tools: list[Any] = []
    skipped: dict[str, str] = {}
    for name, obj in vars(module).items():
        if name.startswith("_") or not inspect.isfunction(obj):
            continue
        if obj.__module__ != module.__name__:
            continue
        if obj.__annotations__:
            tools.append(obj)
        else:
            skipped[name] = UNTYPED
    return tools, skipped


def _import_source(source: str | Path) -> ModuleType:
    text = str(source)
    looks_like_path = text.endswith(".py") or "/" in text or "\\" in text
    if looks_like_path:
        return import_file(Path(text))
    try:
        return importlib.import_module(text)
    except ModuleNotFoundError as exc:
        if exc.name and text.startswith(exc.name):
            raise ToolsetError(
                f"toolset {text!r} is neither a .py file nor an importable module"
            ) from exc
        raise ToolsetError(f"toolset {text!r} failed to import: {exc}") from exc
    except Exception as exc:
        raise ToolsetError(f"toolset {text!r} failed to import: {exc}") from exc


def import_file(path: Path) -> ModuleType:
    """Import a toolset file under a private module name.

    Raises:
        ToolsetError: the file does not exist or fails to import.
    """
    if not path.is_file():
        raise ToolsetError(f"toolset file {str(path)!r} does not exist")
    resolved = path.resolve()
    module_name = f"{TOOLSET_MODULE_PREFIX}{abs(hash(str(resolved))):x}"
    spec = importlib.util.spec_from_file_location(module_name, resolved)
    if spec is None or spec.loader is None:
        raise ToolsetError(f"toolset file {str(path)!r} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise ToolsetError(
            f"toolset file {str(path)!r} failed to import: {_first_line(exc)}"
            f"{_at_line(exc, resolved)}"
        ) from exc
    return module


def _at_line(exc: BaseException, path: Path) -> str:
    """`` (line N)``: the file's last line in the traceback, if it is there."""
    line = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == str(path):
            line = lineno
    return f" (at line {line})" if line is not None else ""


def _first_line(exc: BaseException) -> str:
    """The exception's message up to its first line break (pydantic's run to a page)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
