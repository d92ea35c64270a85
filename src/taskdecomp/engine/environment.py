"""Where and how runs are kept: one object built at the edge and handed to the engine.

The command line builds it from its settings and flags, the service from its
configuration, a queue worker from its own; :mod:`taskdecomp.engine`'s verbs take it as
``env=`` instead of the same five keywords each time. A keyword given to a verb as well
wins over the environment's value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from taskdecomp.durability import DEFAULT_DURABILITY, DEFAULT_LEASE_SECONDS, Durability
from taskdecomp.errors import ConfigError

if TYPE_CHECKING:
    from taskdecomp.events import Event, Subscriber
    from taskdecomp.runtime import Clock
    from taskdecomp.store.base import Store


@dataclass(frozen=True, kw_only=True, slots=True)
class Environment:
    """The store, the lease, the durability, the clock and the subscribers of runs."""

    store: Store | None = None
    """Where runs are kept; ``None``: a run is kept in memory only (resume needs one)."""
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    """How long a run's lease outlives a process that died (renewed every third of it)."""
    durability: Durability = DEFAULT_DURABILITY
    """How checkpoints reach the disk: ``async`` (grouped) or ``sync`` (each one)."""
    clock: Clock | None = None
    """The monotonic clock of runs (for tests); ``None``: the real one."""
    subscribers: Sequence[Subscriber] = ()
    """Receive every event of every run (telemetry, logs), before a call's own ``on_event``."""

    @classmethod
    def of(
        cls,
        env: Environment | None,
        *,
        store: Store | None = None,
        lease_seconds: float | None = None,
        durability: Durability | None = None,
        clock: Clock | None = None,
    ) -> Environment:
        """``env`` (default: an empty one) with the values a verb's caller gave."""
        return (env or cls()).given(
            store=store, lease_seconds=lease_seconds, durability=durability, clock=clock
        )

    def given(
        self,
        *,
        store: Store | None = None,
        lease_seconds: float | None = None,
        durability: Durability | None = None,
        clock: Clock | None = None,
    ) -> Environment:
        """This environment with the values a caller gave (``None``: keep this one's)."""
        return Environment(
            store=store if store is not None else self.store,
            lease_seconds=lease_seconds if lease_seconds is not None else self.lease_seconds,
            durability=durability if durability is not None else self.durability,
            clock=clock if clock is not None else self.clock,
            subscribers=self.subscribers,
        )

    def needs_store(self, verb: str) -> Store:
        """The store, which ``verb`` needs.

        Raises:
            ConfigError: there is none.
        """
        if self.store is None:
            raise ConfigError(f"{verb} needs a store: give store= or an environment with one")
        return self.store

    def on_event(self, own: Subscriber | None) -> Subscriber | None:
        """One subscriber for a run: the environment's, then ``own``."""
        everyone = [*self.subscribers, *([own] if own is not None else [])]
        if len(everyone) <= 1:
            return everyone[0] if everyone else None

        def each(event: Event) -> None:
            for subscriber in everyone:
                subscriber(event)

        return each
