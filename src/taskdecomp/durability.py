"""How a stored run is kept: how its checkpoints reach the disk, how long its lease lasts.

Plain values that import nothing, so that settings and the command line can name them
without loading the journal (:mod:`taskdecomp.durable`) or the store's SQL. Both of those
re-export what they use, so ``from taskdecomp.durable import Durability`` keeps working.
"""

from __future__ import annotations

from typing import Literal

Durability = Literal["async", "sync"]
"""How a run's checkpoints reach the disk (see :mod:`taskdecomp.durable`)."""
DURABILITIES: tuple[Durability, ...] = ("async", "sync")
DEFAULT_DURABILITY: Durability = "async"

DEFAULT_LEASE_SECONDS = 30.0
"""How long a run's lease lasts without a renewal (renewed every third of it)."""
