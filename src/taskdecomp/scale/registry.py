"""The names a worker knows toolsets and models by (``--tools NAME=PATH``, ``--model NAME=SPEC``).

A queued run names its toolset and model; it never carries a path to code. Every worker
loads the same registry at start-up and resolves the names a run gives. A model may also be
named by a provider string that points at no file (``openai:gpt-4o-mini``, ``local``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from taskdecomp.errors import ConfigError
from taskdecomp.models import Connection, Model, names_file, resolve_model
from taskdecomp.tools import Toolset, load_toolset


class Unavailable(LookupError):
    """The worker has nothing registered under a name a run gives."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


@dataclass(frozen=True, kw_only=True)
class Registry:
    """Toolsets and models by name."""

    tools: Mapping[str, str] = field(default_factory=dict)
    """Toolset name -> a .py file or an importable module."""
    models: Mapping[str, str] = field(default_factory=dict)
    """Model name -> a model string."""
    connection: Connection = field(default_factory=Connection)
    """Where models of a provider that connects to a server connect (``--base-url``)."""
    _loaded: dict[str, Toolset] = field(default_factory=dict, repr=False)

    @classmethod
    def parse(
        cls,
        tools: Iterable[str] = (),
        models: Iterable[str] = (),
        connection: Connection | None = None,
    ) -> Registry:
        """Build one from ``NAME=VALUE`` pairs.

        Raises:
            ConfigError: a pair without ``=`` or a name given twice.
        """
        return cls(
            tools=_pairs(tools, "--tools"),
            models=_pairs(models, "--model"),
            connection=connection or Connection(),
        )

    def load(self, *, servers: bool = True) -> None:
        """Load every toolset now, so a worker with a broken one fails at start-up.

        ``servers=False`` leaves out the toolsets that start MCP servers (a process about
        to fork loads the others only: a server's session and threads do not survive it).

        Raises:
            ToolsetError: a toolset cannot be loaded.
        """
        for name, spec in self.tools.items():
            if servers or not _starts_servers(spec):
                self.toolset(name)

    def toolset(self, name: str | None) -> Toolset:
        """The toolset registered as ``name``.

        Raises:
            Unavailable: nothing is registered under that name.
        """
        if name is None or name not in self.tools:
            known = ", ".join(sorted(self.tools)) or "none"
            raise Unavailable(str(name), f"this worker has no toolset {name!r} (it has: {known})")
        if name not in self._loaded:
            self._loaded[name] = load_toolset(self.tools[name])
        return self._loaded[name]

    def model(self, name: str | None) -> Model:
        """The model registered as ``name``, or a provider string that names no file.

        Raises:
            Unavailable: an unknown name, or a model string that points at a file.
        """
        if name is None:
            raise Unavailable("model", "the run names no model")
        spec = self.models.get(name)
        if spec is None:
            if _names_file(name):
                raise Unavailable(
                    name,
                    f"a queued run names its model; register {name!r} on the workers with "
                    "--model NAME=SPEC and submit NAME",
                )
            spec = name
        try:
            return resolve_model(spec, connection=self.connection)
        except ConfigError as exc:
            raise Unavailable(name, str(exc)) from exc


def _starts_servers(spec: str) -> bool:
    """Whether loading toolset ``spec`` starts or connects to an MCP server."""
    text = spec.strip()
    if text.startswith("["):  # a list of toolsets: any one of them
        return '"mcp' in text
    return text.partition(":")[0].startswith("mcp")


def _names_file(spec: str) -> bool:
    """Whether ``spec`` names a file (a queued run may not): only through the registry."""
    try:
        return names_file(spec)
    except ConfigError:
        return False  # an unknown provider: resolving it says so


def _pairs(items: Iterable[str], flag: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise ConfigError(f"{flag} takes NAME=VALUE, got {item!r}")
        if name.strip() in found:
            raise ConfigError(f"{flag} names {name.strip()!r} twice")
        found[name.strip()] = value.strip()
    return found
