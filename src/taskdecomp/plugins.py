"""Registries: strategies, model providers and toolset sources found by name.

Each registry belongs to one entry-point group. The built-ins are declared in taskdecomp's
own ``pyproject.toml`` exactly as a third-party package declares its plugins::

    [project.entry-points."taskdecomp.strategies"]
    my_strategy = "my_package.strategy:STRATEGY"

and registered here under the same names, as ``module:attribute`` references, so a checkout
that was never installed still has them. Nothing is imported until it is asked for by name,
and the installed packages' entry points are read once, the first time a name is not a
built-in or the names are listed. An entry point never replaces a built-in or another
entry point of the same name (the first wins); :meth:`Registry.register`, called in code,
replaces whatever had the name.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar, cast

from taskdecomp.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """Plugins of one kind, by name.

    Args:
        group: the entry-point group, e.g. ``taskdecomp.strategies``.
        kind: what a plugin is, in messages (``strategy``).
        builtins: built-in plugins by name, as ``module:attribute`` references.
        missing: the error raised for an unknown name (given the message).
    """

    def __init__(
        self,
        *,
        group: str,
        kind: str,
        builtins: Mapping[str, str],
        missing: Callable[[str], ConfigError] = ConfigError,
    ) -> None:
        self.group = group
        self.kind = kind
        self.builtins: Mapping[str, str] = dict(builtins)
        """The built-in plugins' references (``pyproject.toml`` declares the same)."""
        self._refs: dict[str, str] = dict(builtins)
        self._loaded: dict[str, T] = {}
        self._scanned = False
        self._scan_lock = threading.Lock()
        self._missing = missing

    def register(self, name: str, plugin: T) -> None:
        """Make ``plugin`` available as ``name``, in place of any plugin of that name."""
        self._refs.pop(name, None)
        self._loaded[name] = plugin

    def get(self, name: str) -> T:
        """The plugin called ``name``.

        Raises:
            ConfigError: no plugin has that name (the message lists the known ones), or its
                entry point cannot be loaded.
        """
        if name in self._loaded:
            return self._loaded[name]
        if name not in self._refs:
            self._scan()
        ref = self._refs.get(name)
        if ref is None:
            raise self._missing(
                f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}"
                + (
                    f" (a package adds one through the {self.group!r} entry-point group)"
                    if self.group
                    else ""
                )
            )
        plugin = cast(T, _load(ref, f"{self.kind} {name!r}", self._missing))
        self._loaded[name] = plugin
        return plugin

    def names(self) -> tuple[str, ...]:
        """Every registered name, sorted."""
        self._scan()
        return tuple(sorted({*self._refs, *self._loaded}))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names()

    def _scan(self) -> None:
        # Runs of a worker resolve names on several threads at once: a thread that finds the
        # scan done must find its names too, so the flag is set only after they are in.
        if self._scanned:
            return
        with self._scan_lock:
            if self._scanned:
                return
            from importlib.metadata import entry_points  # 20 ms: once a name is not built in

            for entry in entry_points(group=self.group):
                if entry.name not in self._loaded:
                    self._refs.setdefault(entry.name, entry.value)
            self._scanned = True


def _load(ref: str, what: str, missing: Callable[[str], ConfigError]) -> object:
    """Import ``module:attribute``."""
    module_name, _, attribute = ref.partition(":")
    try:
        target: object = importlib.import_module(module_name.strip())
        for part in attribute.strip().split(".") if attribute.strip() else ():
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise missing(f"{what} cannot be loaded from {ref!r}: {exc}") from exc
    return target
