"""The engine: every run starts, continues and is decided here, whatever its strategy.

- :func:`run` starts a run of a goal with a registered strategy
  (:mod:`taskdecomp.strategies.registry`);
- :func:`resume` continues a stored run that crashed, was killed, or stopped on its
  deadline or a cancel; :func:`approve` continues one that waits for a human, and
  :func:`reject` ends it (:mod:`~taskdecomp.engine.decisions`);
- :func:`continue_run` is what resume, approve and a queue worker share: take the run's
  lease, rebuild its strategy from the store, and go on in a new segment.

Each has a blocking form for code without an event loop (``run_sync``, ``resume_sync``,
``approve_sync``) or an async one (``reject_async``). They take the store, the lease, the
durability, the clock and the subscribers as one :class:`Environment`, built once at the
edge; the command line, the service, the chat agent and the queue workers call only these.
"""

from taskdecomp.engine.decisions import approve, approve_sync, reject, reject_async
from taskdecomp.engine.environment import Environment
from taskdecomp.engine.runs import continue_run, resume, resume_sync, run, run_sync

__all__ = [
    "Environment",
    "approve",
    "approve_sync",
    "continue_run",
    "reject",
    "reject_async",
    "resume",
    "resume_sync",
    "run",
    "run_sync",
]
