"""The tool gateway: the only way a plan reaches a tool.

Checks, in the seed's order: the tool-call budget, the allowlist (deny by default), the
registry, loop detection on tool + argument hash; then it validates the arguments against
the tool's schema, calls the tool with its timeout and makes the observation JSON-safe.
Every refusal or failure raises :class:`~taskdecomp.stops.StopRun` with the seed's reason
code; whatever a tool raises (``BaseException`` included) is ``tool_error:<name>``.

A call never outlives its timeout or the run's cancellation (the deadline): the gateway stops
waiting and abandons it (see :mod:`taskdecomp.isolation`: sync tools run on daemon threads,
async tools in tasks of their own, ``isolation="process"`` tools in worker processes that are
killed).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from typing import Any

from pydantic import ValidationError
from pydantic_core import to_jsonable_python

from taskdecomp import isolation, jsonsafe, stops
from taskdecomp.budget import Meter
from taskdecomp.stops import StopRun, with_detail
from taskdecomp.tools import IDEMPOTENCY_PARAM, Toolset, ToolSpec

logger = logging.getLogger(__name__)


def args_hash(args: Mapping[str, Any]) -> str:
    """The seed's argument hash: sha256 of sorted, compact JSON, first 12 hex digits."""
    raw = json.dumps(
        args or {}, sort_keys=True, ensure_ascii=True, separators=(",", ":"), default=str
    )
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:12]


LOOP_SCOPE: ContextVar[str] = ContextVar("taskdecomp_loop_scope", default="")
"""Where loop detection compares calls: the whole run (``""``), or one part of it that
sets its own scope (a workflow's phase run: agents running at once each have theirs)."""


class ToolGateway:
    """Calls tools on behalf of a run, enforcing the allowlist and budgets.

    Args:
        allow: tool names that may be called; everything else is denied.
        toolset: the registry of tools.
        meter: the run's budget meter (counts tool calls).
        max_workers: accepted for compatibility; sync tools run on a shared pool of daemon
            threads, and the scheduler's ``max_parallel`` bounds how many run at once.
    """

    def __init__(
        self, *, allow: Iterable[str], toolset: Toolset, meter: Meter, max_workers: int = 8
    ) -> None:
        self.allow = frozenset(allow)
        self.toolset = toolset
        self.meter = meter
        self._seen_calls: set[str] = set()
        self._denied: set[str] = set()
        self._max_workers = max_workers
        self._jobs: set[isolation.Job] = set()

    def deny(self, name: str) -> None:
        """Revoke a tool for the rest of the run (kill switch): later calls get ``tool_denied``."""
        self._denied.add(name)

    def remember(self, name: str, args: Mapping[str, Any]) -> None:
        """Count a call made before a resume, so loop detection sees it."""
        self.remember_call(name, args_hash(args))

    def remember_call(self, name: str, digest: str, *, scope: str = "") -> None:
        """Count a call made before a resume, by its argument hash (as in the trace).

        ``scope`` is the :data:`LOOP_SCOPE` it was made in (a step id), when there was one.
        """
        self._seen_calls.add(f"{scope}|{name}:{digest}" if scope else f"{name}:{digest}")

    def forget_calls(self, scope: str) -> None:
        """Start loop detection afresh in ``scope`` (a workflow phase run whose files changed).

        Calls are compared within the :data:`LOOP_SCOPE` they were made in; other scopes'
        calls are kept.
        """
        prefix = f"{scope}|"
        self._seen_calls = {seen for seen in self._seen_calls if not seen.startswith(prefix)}

    async def call(
        self,
        name: str,
        args: Mapping[str, Any],
        *,
        idempotency_key: str | None = None,
        digest: str | None = None,
    ) -> Any:
        """Call tool ``name`` with ``args`` and return its JSON-safe observation.

        ``digest`` is ``args_hash(args)`` when the caller has already computed it.

        Raises:
            StopRun: ``max_tool_calls``, ``tool_denied:<n>``, ``tool_missing:<n>``,
                ``loop_detected``, ``tool_bad_args:<n>``, ``tool_timeout:<n>`` or
                ``tool_error:<n>``.
        """
        spec = self._admit(name, args, digest or args_hash(args))
        try:
            kwargs = spec.args_model.model_validate(dict(args)).model_dump()
        except ValidationError as exc:
            raise StopRun(
                with_detail("tool_bad_args", name), message=_validation_message(exc)
            ) from exc
        if spec.takes_idempotency_key:
            kwargs[IDEMPOTENCY_PARAM] = idempotency_key
        result = await self._invoke(spec, kwargs)
        try:
            jsonsafe.check_finite(result)  # first: pydantic writes some NaNs as null
            observation = to_jsonable_python(result)
            jsonsafe.check_strict(observation)
        except Exception as exc:
            raise StopRun(
                with_detail("tool_error", name),
                message=f"returned a value that is not strict JSON: {exc}",
            ) from exc
        return observation

    def _admit(self, name: str, args: Mapping[str, Any], digest: str) -> ToolSpec:
        self.meter.count_tool_call()
        if name not in self.allow or name in self._denied:
            raise StopRun(with_detail("tool_denied", name), message=f"tool {name!r} is denied")
        spec = self.toolset.get(name)
        if spec is None:
            known = ", ".join(sorted(self.toolset)) or "(none)"
            raise StopRun(
                with_detail("tool_missing", name),
                message=f"tool {name!r} is allowed but not registered; registered: {known}",
            )
        signature = f"{name}:{digest}"
        scope = LOOP_SCOPE.get()
        if scope:
            signature = f"{scope}|{signature}"
        if signature in self._seen_calls:
            raise StopRun(stops.LOOP_DETECTED, message=f"repeated call {signature}")
        self._seen_calls.add(signature)
        return spec

    async def _invoke(self, spec: ToolSpec, kwargs: dict[str, Any]) -> Any:
        job = isolation.start(spec, kwargs)
        self._jobs.add(job)
        try:
            outcome = await job.outcome(spec.timeout)
        except TimeoutError as exc:  # the tool's own exceptions come back in the outcome
            job.abandon()
            raise StopRun(
                with_detail("tool_timeout", spec.name),
                message=f"tool {spec.name!r} ran longer than {spec.timeout}s",
            ) from exc
        except asyncio.CancelledError:  # the run's deadline, or its caller: never wait on
            job.abandon()
            raise
        finally:
            self._jobs.discard(job)
        if outcome.error is not None:
            # the traceback, file and line included, for whoever turned debug logging on
            logger.debug("tool %r raised", spec.name, exc_info=outcome.error)
            raise StopRun(
                with_detail("tool_error", spec.name), message=isolation.describe(outcome.error)
            ) from outcome.error
        return outcome.value

    def close(self) -> None:
        """Abandon calls still in flight (a tool that ignores this is left to finish)."""
        for job in list(self._jobs):
            job.abandon()
        self._jobs.clear()


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(p) for p in error["loc"]) or "(arguments)"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)
