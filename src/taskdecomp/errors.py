"""The exception tree.

::

    TaskdecompError                 anything taskdecomp raises on purpose
    ├── ConfigError                 the caller must change something before running
    │   ├── ToolsetError            a toolset path/module cannot be loaded or is malformed
    │   ├── ModelNotFoundError      a model string names no provider, or a bad file
    │   ├── WorkflowError           a workflow file or guard is malformed (every problem named)
    │   └── StoreConfigError *      the store cannot be opened as given (URL, path, driver)
    │       ├── RunNotFoundError *  no stored run has that id
    │       ├── TreeNotFoundError * no stored plan tree or node has that id
    │       └── RunLeasedError *    another live process owns the run (its lease has not expired)
    ├── StoreError                  the run store failed in use: unreachable, full, refused a write
    │   ├── StoreConfigError *      (and the three under it)
    │   ├── StoreValueError         a value cannot be stored (too long for the store)
    │   ├── CorruptRecordError      a stored row does not decode; it is never guessed at
    │   └── LeaseLostError          this process's lease on a run was taken over; nothing written
    ├── ModelError                  a model call failed (adapters convert SDK errors here)
    │   └── ModelTimeoutError       the model did not answer in time
    └── StrictJSONError             a value has no strict JSON form (NaN, infinity, not JSON)

``*``: both a :class:`ConfigError` (the command line exits 2: the command can be fixed) and a
:class:`StoreError` (``except StoreError`` catches every store problem); any other store
error is a failure at run time (exit 1).

Signals are outside the tree: a tool raises :class:`~taskdecomp.tools.Retry` to ask the
gateway to call it again (``@tool(retries=N)``); it is not an error of taskdecomp's.

Run failures that belong in a result (a denied tool, a bad plan, a spent budget) are not
exceptions: they end the run with a stop reason (:mod:`taskdecomp.stops`). A
:class:`ModelError` raised inside a run becomes ``llm_error:<kind>`` or ``llm_timeout``;
a :class:`LeaseLostError` inside a run becomes ``lease_lost``.
"""

from __future__ import annotations


class TaskdecompError(Exception):
    """Base class of every error taskdecomp raises on purpose."""


class ConfigError(TaskdecompError):
    """A user or configuration error: fix the arguments, files or environment."""


class ToolsetError(ConfigError):
    """A toolset cannot be found, imported, or read."""


class ModelNotFoundError(ConfigError):
    """A model string does not resolve to a provider."""


class WorkflowError(ConfigError):
    """A workflow definition, or a guard in it, is malformed.

    Attributes:
        problems: every problem found, each naming its phase and field.
    """

    def __init__(self, message: str, problems: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems or (message,)


class StoreError(TaskdecompError):
    """The run store failed in use: it cannot be reached or written (a server gone, a full disk)."""


class StoreConfigError(StoreError, ConfigError):
    """The store cannot be used as given: fix the URL, the path, the driver or the id."""


class RunNotFoundError(StoreConfigError):
    """No stored run has the given id.

    Args:
        message: names the run and, for the command line, the store.
        run_id: the id no run has, when known (a service names only it).
    """

    def __init__(self, message: str, *, run_id: str | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id


class StoreValueError(StoreError):
    """A value cannot be stored as it is (it is longer than the store keeps)."""


class CorruptRecordError(StoreError):
    """A stored row does not decode; the run is refused rather than guessed at."""


class TreeNotFoundError(StoreConfigError):
    """No stored plan tree (or node) has the given id."""


class RunLeasedError(StoreConfigError):
    """Another process owns the run and its lease has not expired: it is in flight elsewhere.

    Args:
        message: names the run and the owner, and says when to try again.
        owner: the owner id holding the lease.
        expires_in: seconds until the lease expires, unless its owner renews it.
    """

    def __init__(self, message: str, *, owner: str, expires_in: float) -> None:
        super().__init__(message)
        self.owner = owner
        self.expires_in = expires_in


class LeaseLostError(StoreError):
    """A fenced write found the run owned by someone else (a newer epoch); nothing was written.

    Args:
        message: names the run, the new owner and both epochs.
        owner: who took the run's current epoch (it may have released the run since).
        epoch: the run's lease epoch now.
    """

    def __init__(self, message: str, *, owner: str | None, epoch: int) -> None:
        super().__init__(message)
        self.owner = owner
        self.epoch = epoch


class ModelError(TaskdecompError):
    """A model call failed.

    Args:
        kind: a short machine-readable kind, used in ``llm_error:<kind>``.
        message: what happened and how to fix it.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class ModelTimeoutError(ModelError):
    """The model did not answer within its timeout."""

    def __init__(self, message: str = "the model did not answer in time") -> None:
        super().__init__("timeout", message)


class StrictJSONError(TaskdecompError, ValueError):
    """A value has no strict JSON form: a NaN or an infinity inside it, or not JSON at all.

    Raised by :mod:`taskdecomp.jsonsafe`; the message says where the value is. It is a
    :class:`ValueError` too, like the errors of :mod:`json`.
    """
