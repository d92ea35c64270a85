"""The tool gateway: the only way a plan reaches a tool.

Checks, in the seed's order: the tool-call budget, the allowlist (deny by default), the
registry, loop detection on tool + argument hash; then it validates the arguments against
the tool's schema, calls the tool with its timeout and makes the observation JSON-safe.
Every refusal or failure raises :class:`~taskdecomp.stops.StopRun` with the seed's reason
code; whatever a tool raises (``BaseException`` included) is ``tool_error:<name>``.

A tool with retries (``@tool(retries=N)``) is called again when a call raised
:class:`~taskdecomp.tools.Retry` or timed out: after an exponential backoff with jitter (or
the wait the ``Retry`` asked for), each attempt counted against ``max_tool_calls``, with the
same arguments and idempotency key, and without loop detection (a retry is not a repeat).

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
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextvars import ContextVar
from typing import Any

from pydantic_core import to_jsonable_python

from taskdecomp import isolation, jsonsafe, stops
from taskdecomp.argmodels import IDEMPOTENCY_PARAM
from taskdecomp.budget import Meter
from taskdecomp.stops import StopRun, with_detail
from taskdecomp.tools import BadToolArgs, Retry, Toolset, ToolSpec

logger = logging.getLogger(__name__)

MAX_BACKOFF_S = 60.0
"""The longest backoff between two attempts (a ``Retry(after=...)`` may ask for more)."""

RetryHook = Callable[[int, StopRun, float], Awaitable[None]]
"""Told of a failed attempt about to be tried again: its number (from 1), why it failed,
and the seconds the gateway waits before the next one (the trace records it)."""


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
        on_retry: RetryHook | None = None,
    ) -> Any:
        """Call tool ``name`` with ``args`` and return its JSON-safe observation.

        ``digest`` is ``args_hash(args)`` when the caller has already computed it.
        ``on_retry`` is awaited before each retry of a tool with retries.

        Raises:
            StopRun: ``max_tool_calls``, ``tool_denied:<n>``, ``tool_missing:<n>``,
                ``loop_detected``, ``tool_bad_args:<n>``, ``tool_timeout:<n>`` or
                ``tool_error:<n>``.
        """
        spec = self._admit(name, args, digest or args_hash(args))
        try:
            kwargs = spec.check_args(args)
        except BadToolArgs as exc:
            raise StopRun(with_detail("tool_bad_args", name), message=str(exc)) from exc
        if spec.takes_idempotency_key:
            kwargs[IDEMPOTENCY_PARAM] = idempotency_key
        result = await self._attempts(spec, kwargs, on_retry)
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

    async def _attempts(
        self, spec: ToolSpec, kwargs: dict[str, Any], on_retry: RetryHook | None
    ) -> Any:
        """The call, tried again while it fails transiently and the tool has retries left.

        The deadline cancels a backoff like a call: the run never waits past it.
        """
        attempt = 1
        while True:
            try:
                return await self._invoke(spec, kwargs)
            except StopRun as stop:
                delay = retry_delay(spec, stop, attempt)
                if delay is None:
                    raise
                self._count_retry(spec, stop, attempt)
                if on_retry is not None:
                    await on_retry(attempt, stop, delay)
                logger.debug("retrying tool %r in %.3fs: %s", spec.name, delay, stop.message)
                await asyncio.sleep(delay)
                attempt += 1

    def _count_retry(self, spec: ToolSpec, stop: StopRun, attempt: int) -> None:
        """Count the next attempt as a tool call; a spent budget says what failed."""
        try:
            self.meter.count_tool_call()
        except StopRun as spent:
            raise StopRun(
                spent.reason,
                message=f"attempt {attempt} at tool {spec.name!r} failed ({stop.reason}: "
                f"{stop.message}) and another would pass max_tool_calls="
                f"{self.meter.budget.max_tool_calls}",
            ) from stop

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


def retry_delay(spec: ToolSpec, stop: StopRun, attempt: int) -> float | None:
    """Seconds to wait before trying ``spec`` again after ``attempt`` failed with ``stop``.

    ``None`` when it is not tried again: the tool has no retries left, or the failure is not
    transient (only a :class:`~taskdecomp.tools.Retry` or the tool's timeout is). The wait
    is a ``Retry(after=...)``'s, else ``backoff_s`` doubled per attempt, capped at
    :data:`MAX_BACKOFF_S`, with jitter (between half of it and all of it).
    """
    cause = stop.__cause__
    raised_retry = isinstance(cause, Retry) and stop.reason == with_detail("tool_error", spec.name)
    timed_out = stop.reason == with_detail("tool_timeout", spec.name)
    if attempt > spec.retries or not (raised_retry or timed_out):
        return None
    if isinstance(cause, Retry) and cause.after is not None:
        return cause.after
    backoff = min(spec.backoff_s * 2.0 ** (attempt - 1), MAX_BACKOFF_S)
    return backoff * random.uniform(0.5, 1.0)  # jitter: calls that failed together part ways
