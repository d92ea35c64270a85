"""What the operator chose when ``taskdecomp mcp`` started: the only choices a client uses.

A client names a goal, a strategy, budgets and tools from the toolset; it never gives a
path, a module or a model string, so no request can make the server read a file, import
a module or call a model the operator did not name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from taskdecomp.budget import Budget
from taskdecomp.decomposition import DecompOptions
from taskdecomp.durability import DEFAULT_DURABILITY, Durability
from taskdecomp.models.connection import Connection
from taskdecomp.tools import Toolset


@dataclass(frozen=True, kw_only=True, slots=True)
class MCPConfig:
    """How one ``taskdecomp mcp`` process is set up."""

    toolset: Toolset
    """The tools every run may use (a client narrows them with ``allow``)."""
    model: str
    """The model string of every run (planner and every role)."""
    decomp_model: str | None = None
    """The decomposer's model string; default: :attr:`model`."""
    connection: Connection = field(default_factory=Connection)
    """Where models of a provider that connects to a server connect."""
    budget: Budget = field(default_factory=Budget)
    """The limits of a run whose client gives none."""
    decomp: DecompOptions = field(default_factory=DecompOptions)
    """The decomposer's budgets."""
    lease_seconds: float | None = None
    """How long a run's lease outlives this process if it dies; default: the engine's."""
    durability: Durability = DEFAULT_DURABILITY
    """How checkpoints reach the disk."""
