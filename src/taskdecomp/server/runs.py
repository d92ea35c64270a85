"""Runs the service executes: started, resumed, approved and cancelled in the background.

A new run is stored ``queued`` and answered at once; it starts when one of the server's
``max_running`` slots is free, behind at most ``max_queued`` others (:mod:`.admission`,
:mod:`.queued`).

With ``--executor queue`` a new run is submitted to a queue instead (see
``docs/scale-out.md``) and ``taskdecomp worker`` processes execute it; its events, status
and cancel go through the store like those of any other run.

Every run goes through the engine's own verbs (:func:`~taskdecomp.engine.continue_run`
for a queued run, as a queue worker does; :func:`taskdecomp.resume`,
:func:`taskdecomp.approve`, :func:`taskdecomp.reject`) with the service's store, so a run
the service starts is stored, checkpointed and leased exactly like one the CLI starts, and
either can see (and, once it is free, continue) the other's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

from taskdecomp import stops
from taskdecomp.answertype import answer_type
from taskdecomp.budget import Budget
from taskdecomp.engine import Environment, approve, reject, resume
from taskdecomp.errors import ConfigError, CorruptRecordError, StoreError
from taskdecomp.events import Event, Subscriber
from taskdecomp.models import Model, names_file, prices, resolve_model
from taskdecomp.run import RunId, RunResult, new_run_id
from taskdecomp.server import paging, queued, trim
from taskdecomp.server.admission import Admission, Full, Waiting
from taskdecomp.server.config import ServerConfig
from taskdecomp.server.problems import Problem, one_line
from taskdecomp.server.reading import Reads
from taskdecomp.server.schemas import BudgetIn, RunIn, RunStatus
from taskdecomp.store import RunState, RunSummary, SqlStore, StoredRun
from taskdecomp.store.base import NewRun
from taskdecomp.strategies import registry
from taskdecomp.strategies.tree.view import run_tree
from taskdecomp.tools import Toolset

logger = logging.getLogger(__name__)

Start = Callable[[Subscriber], Coroutine[Any, Any, RunResult]]
"""Starts one segment of a run, handing its events to the subscriber."""

CANCEL_WAIT = 10.0
"""Seconds ``cancel`` waits for a run to store itself as cancelled."""

STATUSES = ("queued", "running", "interrupted", "paused", "ok", "stopped")
"""The statuses the API shows: the stored ones, plus ``interrupted`` for a run stored as
running that no live process owns (its process died; a queued run's workers deliver it
again)."""


def canonical_model(spec: str) -> str:
    """The name a run stores for ``spec`` (a scripted model's file path made absolute)."""
    provider, _, rest = spec.partition(":")
    try:
        if names_file(spec):
            return f"{provider}:{Path(rest).expanduser().absolute()}"
    except ConfigError:
        pass  # an unknown provider: resolving it at start-up says so
    return spec


RETRY_FIRST_SECONDS = 0.5
RETRY_MAX_SECONDS = 30.0
"""How long a queued run waits before it tries to start again after a store failure:
doubled at each failure, up to the maximum."""

_WRAP_UP_SECONDS = 5.0
"""How long a request waits for a run task that has stored its end to finish wrapping up."""


class RunService:
    """The runs of one service process.

    Args:
        config: the operator's choices.
        store: the run store.
        toolsets: the registered toolsets, loaded.
        reads: the threads store reads run on (shared with the rest of the service).
    """

    def __init__(
        self,
        config: ServerConfig,
        store: SqlStore,
        toolsets: Mapping[str, Toolset],
        *,
        reads: Reads | None = None,
    ):
        self.config = config
        self.store = store
        self.reads = reads or Reads()
        """Where the routes' store reads run: off the event loop."""
        self.env = Environment(
            store=store, lease_seconds=config.lease_seconds, durability=config.durability
        )
        """The engine's environment of every run this server starts or continues."""
        self.toolsets = dict(toolsets)
        self.models = {canonical_model(spec): spec for spec in config.models}
        """Canonical model name -> the operator's model string."""
        self._toolset_names = {ts.source: name for name, ts in self.toolsets.items()}
        self._active: dict[RunId, asyncio.Task[RunResult | None]] = {}
        self._made: set[str] = set()
        self._listeners: dict[RunId, set[asyncio.Event]] = {}
        self._queue_client: Any = None
        self.admission = Admission(max_running=config.max_running, max_queued=config.max_queued)
        """The line of runs this server starts, and how many execute at once."""
        self._submitter = queued.Submitter(store, self._settled)
        self._trimmer = trim.Trimmer()
        self._dispatching = False
        self.closing = False
        self.workflow_view: Callable[[StoredRun], dict[str, Any] | None] | None = None
        """A workflow run's phases and tasks for :meth:`view` (set by the workflow routes)."""

    def listen(self, run_id: str) -> asyncio.Event:
        """An event set whenever run ``run_id`` emits one here (or the server shuts down).

        Event streams wait on it instead of polling the store while the run is quiet.
        """
        bell = asyncio.Event()
        self._listeners.setdefault(RunId(run_id), set()).add(bell)
        return bell

    def unlisten(self, run_id: str, bell: asyncio.Event) -> None:
        """Stop ringing ``bell``."""
        bells = self._listeners.get(RunId(run_id))
        if bells is not None:
            bells.discard(bell)
            if not bells:
                del self._listeners[RunId(run_id)]

    def _ring(self, run_id: RunId) -> None:
        for bell in self._listeners.get(run_id, ()):
            bell.set()

    def is_active(self, run_id: str) -> bool:
        """Whether this process is executing ``run_id`` now."""
        return RunId(run_id) in self._active

    async def start(self, body: RunIn) -> RunId:
        """Start a run in the background; return its id once it is stored.

        Raises:
            Problem: as :meth:`post`.
        """
        return RunId((await self.post(body))["run_id"])

    async def post(self, body: RunIn) -> dict[str, Any]:
        """Start a run in the background; return it as the API shows it, once it is stored.

        Raises:
            Problem: 422 for an unknown toolset, an unlisted model, a tool not in the
                toolset or a budget out of range; 429 when the queue is full; 503 while
                shutting down.
        """
        toolset = self._toolset(body.toolset)
        model = self._model(body.model)
        allow = self._allow(toolset, body.toolset, body.allow)
        budget = self._budget(body.budget)
        options = _options(body)
        _answer_schema(body)
        self._priced(model, budget)
        if self.config.executor == "queue":
            return await self.show(await self._submit(body, model, allow, budget, options))
        if body.idempotency_key is not None:
            raise Problem(
                422, "idempotency_key needs a server that queues runs (serve --executor queue)"
            )
        if not body.goal.strip():
            raise Problem(422, "goal: the goal is empty; say in words what the run should achieve")
        new = queued.new_run(
            new_run_id(),
            body.goal,
            toolset=toolset,
            model=canonical_model(model),
            allow=allow,
            budget=budget,
            strategy=body.strategy,
            options=options,
            answer_schema=body.answer_schema,
        )
        self._makes(model)
        waiting = Waiting(run_id=new.run_id, toolset=toolset, model=model)
        queued_at = await self._enqueue(new, waiting)
        return self._shown(queued.as_stored(new, queued_at), (queued_at, None))

    async def _enqueue(self, new: NewRun, waiting: Waiting) -> float:
        """Store ``new`` as queued, to start when a slot is free; return when it was queued.

        Raises:
            Problem: 503 while shutting down; 429 with ``Retry-After`` when every slot and
                every place in the line is taken (nothing is stored).
        """
        if self.closing:
            raise Problem(503, "the server is shutting down; try again when it is back")
        try:
            self.admission.reserve()
        except Full as full:
            raise Problem(
                429,
                f"the server is at its limit: {self.admission.running} runs execute and "
                f"{self.admission.waiting} wait (serve --max-running, --max-queued); "
                f"try again in {full.retry_after}s",
                headers={"Retry-After": str(full.retry_after)},
            ) from None
        return await self._submitter.submit(new, waiting)

    def _settled(self, waiting: Waiting, stored: bool) -> None:
        """A posted run is on disk (it takes its place in the line), or failed to be."""
        if not stored:
            self.admission.unreserve()
            return
        self.admission.add(waiting)
        if not self._dispatching:  # once the requests that posted them have their answer
            self._dispatching = True
            asyncio.get_running_loop().call_soon(self._dispatch)

    def readmit(self) -> int:
        """Line up the runs a stopped server left queued in its own queue; how many.

        A run whose toolset or model this server does not offer stays queued (for
        ``taskdecomp resume``, or a server that offers them).
        """
        if self.config.executor != "process":
            return 0
        found = 0
        for stale in self.store.stale_runs(queued.LOCAL_QUEUE, grace=0.0):
            if stale.started or self.admission.holds(stale.run_id):
                continue  # a run its process was executing shows as interrupted
            try:
                toolset, model = self._stored_parts(self.store.load_run(stale.run_id))
            except Problem:
                continue
            if toolset is None:
                continue  # workflow runs start at once, never from this line
            self.admission.add(
                Waiting(run_id=stale.run_id, toolset=toolset, model=model), reserved=False
            )
            found += 1
        self._dispatch()
        return found

    def _dispatch(self) -> None:
        """Start waiting runs while slots are free."""
        self._dispatching = False
        while not self.closing and (waiting := self.admission.next()) is not None:
            run_id = waiting.run_id
            began = asyncio.get_running_loop().time()
            task = asyncio.create_task(self._execute(waiting), name=f"taskdecomp run {run_id}")
            self._active[run_id] = task
            task.add_done_callback(functools.partial(self._freed, run_id, began))
            self._ring(run_id)

    async def _execute(self, waiting: Waiting) -> RunResult | None:
        """Run ``waiting`` in its slot.

        A model that cannot be made ends the run ``unavailable:<model>``. A store that fails
        before the run's first write leaves it ``queued``: it is tried again, in its slot,
        with a growing pause, until it starts or is no longer queued (cancelled, taken by
        ``taskdecomp resume``), so no run stays queued with nothing to start it.
        """
        run_id = waiting.run_id
        pause = RETRY_FIRST_SECONDS
        while not self.closing:
            try:
                model = self._resolved(waiting.model)
            except ConfigError as exc:
                reason = stops.with_detail("unavailable", waiting.model)
                return await queued.refuse(
                    run_id, store=self.store, env=self.env, reason=reason, message=str(exc)
                )
            try:
                return await queued.execute(
                    run_id,
                    store=self.store,
                    tools=waiting.toolset,
                    model=model,
                    on_event=lambda _event: self._ring(run_id),
                    env=self.env,
                )
            except StoreError as exc:
                if isinstance(exc, ConfigError | CorruptRecordError):
                    raise  # taken by another process, gone, unreadable: nothing to retry
                logger.warning("run %s could not start (%s); trying again", run_id, exc)
            except ConfigError as exc:  # the stored run cannot start here (its cost budget)
                reason = stops.with_detail("unavailable", waiting.model)
                return await queued.refuse(
                    run_id, store=self.store, env=self.env, reason=reason, message=str(exc)
                )
            if not await self._still_queued(run_id):
                return None  # it moved on without this server: its stored state says how
            await asyncio.sleep(pause)
            pause = min(pause * 2, RETRY_MAX_SECONDS)
        return None

    async def _still_queued(self, run_id: RunId) -> bool:
        """Whether ``run_id`` is still stored ``queued``, once the store answers again."""
        pause = RETRY_FIRST_SECONDS
        while not self.closing:
            try:
                stored = await asyncio.to_thread(self.store.load_run, run_id)
            except StoreError as exc:
                if isinstance(exc, ConfigError | CorruptRecordError):
                    return False
                await asyncio.sleep(pause)
                pause = min(pause * 2, RETRY_MAX_SECONDS)
                continue
            return stored.summary.status == "queued"
        return False

    def _freed(self, run_id: RunId, began: float, task: asyncio.Task[RunResult | None]) -> None:
        """``run_id``'s task ended: its slot goes to the next waiting run.

        The last run of a burst gives the allocator's free pages back (see :mod:`.trim`).
        """
        self._ended(run_id, task)
        loop = asyncio.get_running_loop()
        self.admission.done(run_id, loop.time() - began)
        self._dispatch()
        idle = self.admission.running == 0 and self.admission.waiting == 0
        if self._trimmer.ended(idle=idle) and not self.closing:
            loop.run_in_executor(None, trim.trim)

    async def launch(self, run_id: RunId, start: Start) -> None:
        """Start a run another entry point builds (a workflow run) the way :meth:`start` does.

        Raises:
            Problem: 503 while shutting down; 409 when the run executes here already.
        """
        await self._launch(run_id, start)

    async def _submit(
        self,
        body: RunIn,
        model: str,
        allow: list[str] | None,
        budget: Budget,
        options: Any,
    ) -> RunId:
        """Queue the run for the workers; return its id once it is stored."""
        if self.closing:
            raise Problem(503, "the server is shutting down; try again when it is back")
        from taskdecomp.scale import engine
        from taskdecomp.scale.submit import submit

        if self._queue_client is None:
            self._queue_client = await asyncio.to_thread(engine.client, self.config.store_url)
        run_id, _new = await asyncio.to_thread(
            functools.partial(
                submit,
                body.goal,
                store=self.store,
                db=self.config.store_url,
                tools=body.toolset,
                model=model,
                queue=self.config.queue,
                idempotency_key=body.idempotency_key,
                allow=allow,
                budget=budget,
                strategy=body.strategy,
                options=options,
                client=self._queue_client,
                answer_schema=body.answer_schema,
            )
        )
        self._ring(run_id)
        return run_id

    async def resume(self, run_id: str) -> None:
        """Continue a run that was interrupted or stopped on its deadline or a cancel.

        Raises:
            Problem: 409 when the run waits for approval, has ended, runs here already, or
                was started with a toolset or model this server does not offer.
        """
        stored = await self._idle(run_id)
        if stored.summary.status == "paused":
            raise Problem(
                409,
                f"run {run_id!r} waits for approval; POST /runs/{run_id}/approve or "
                f"/runs/{run_id}/reject",
            )
        if not stored.resumable:
            summary = stored.summary
            raise Problem(
                409,
                f"run {run_id!r} already ended ({summary.status}, {summary.stop_reason}); "
                "nothing to resume",
            )
        await self._continue(stored, resume)

    async def approve(self, run_id: str, plan: Any) -> None:
        """Approve what a paused run waits for and continue it in the background.

        Raises:
            Problem: 409 when the run is not paused or runs here.
            ConfigError: the edited plan is refused (409, nothing written).
        """
        stored = await self._idle(run_id)
        await self._continue(stored, approve, plan=plan)

    async def _continue(
        self, stored: StoredRun, action: Callable[..., Coroutine[Any, Any, RunResult]], **extra: Any
    ) -> None:
        """Run ``action`` (resume, approve) on ``stored`` in the background, with its parts."""
        toolset, model = self._stored_parts(stored)
        await self._launch(
            stored.run_id,
            lambda on_event: action(
                stored.run_id,
                tools=toolset,
                model=self._resolved(model),
                on_event=on_event,
                env=self.env,
                **extra,
            ),
        )

    async def reject(self, run_id: str, reason: str) -> RunResult:
        """End a paused run with ``approval_rejected``.

        Raises:
            ConfigError: the run is not waiting for approval (409).
        """
        await self._idle(run_id)
        return await asyncio.to_thread(
            functools.partial(reject, run_id, reason=reason, env=self.env)
        )

    async def cancel(self, run_id: str) -> None:
        """Cancel a run; it stores itself as ``cancelled`` (resumable).

        A run this process executes is cancelled at once; a queued run (in this server's
        queue or the workers') ends before it starts, or within a second on the worker
        that runs it.

        Raises:
            Problem: 409 when the run is neither executing here nor queued.
        """
        rid = RunId(run_id)
        self.admission.withdraw(rid)  # it never starts here
        task = self._active.get(rid)
        if task is not None:
            task.cancel()
            await asyncio.wait({task}, timeout=CANCEL_WAIT)
        stored = await self.reads(self.store.load_run, rid)
        status = stored.summary.status
        queue = await self.reads(self.store.queue_of, rid)
        if queue is not None and (status == "queued" or queue != queued.LOCAL_QUEUE):
            from taskdecomp.scale.submit import cancel

            done = await asyncio.to_thread(cancel, run_id, store=self.store)
            self._ring(rid)
            if done == "ended":
                raise Problem(409, f"run {run_id!r} already ended; nothing to cancel")
            return
        if task is None:
            raise Problem(
                409,
                f"run {run_id!r} is not executing in this server (status "
                f"{await self.reads(self.status, stored.summary, stored)}); only a running "
                "run can be cancelled",
            )

    def status(self, summary: RunSummary, stored: StoredRun | None = None) -> str:
        """The status the API shows for a run (see :data:`STATUSES`).

        A run stored as ``running`` runs here, or in another process that holds its lease
        (the CLI, another server); with no live lease its process died: ``interrupted``.
        """
        if summary.status != "running" or summary.run_id in self._active:
            return summary.status
        if stored is None:
            stored = self.store.load_run(summary.run_id)
        lease = stored.lease
        return _shown(summary, leased=lease is not None and lease.expires_at > self.store.now())

    def view(self, run_id: str) -> dict[str, Any]:
        """The stored run as the API shows it (a blocking read: see :meth:`show`).

        Raises:
            RunNotFoundError: no run has this id (404).
        """
        stored = self.store.load_run(RunId(run_id))
        return self._shown(stored, self.store.queue_times(stored.run_id))

    def _shown(self, stored: StoredRun, times: tuple[float, float | None] | None) -> dict[str, Any]:
        """``stored`` as the API shows it; ``times``: when it was queued and started.

        A ``tree`` run's tree is read from the store: off the event loop, unless the run has
        not started (it has no tree yet, and nothing is read).
        """
        data = stored.to_dict()
        data["stored_status"] = data["status"]
        data["status"] = self.status(stored.summary, stored)
        data["toolset"] = self._toolset_name(stored.tools)
        data["active"] = self.is_active(stored.run_id)
        data["workflow"] = self.workflow_view(stored) if self.workflow_view else None
        data["tree"] = run_tree(self.store, stored)  # no read for any other run
        data.update(self._queueing(stored.run_id, times))
        data.pop("tools", None)  # a file path on the server: the toolset's name says enough
        return data

    def _queueing(self, run_id: RunId, times: tuple[float, float | None] | None) -> dict[str, Any]:
        """When the run was queued, how long it waited (or has waited so far), its place."""
        if times is None:
            return {"queued_at": None, "queued_seconds": None, "queue_position": None}
        queued_at, started_at = times
        waited = (started_at if started_at is not None else self.store.now()) - queued_at
        return {
            "queued_at": queued_at,
            "queued_seconds": round(max(waited, 0.0), 3),
            "queue_position": self.admission.position(run_id),
        }

    async def show(self, run_id: str) -> dict[str, Any]:
        """:meth:`view`, read on a worker thread (the event loop goes on meanwhile).

        Raises:
            RunNotFoundError: no run has this id (404).
        """
        return await self.reads(self.view, run_id)

    async def listing(
        self, *, status: RunStatus | None, limit: int, cursor: str | None
    ) -> dict[str, Any]:
        """A page of runs, newest first, optionally only those with ``status``.

        Filtered and cut in SQL (:meth:`SqlStore.page_runs`) on a worker thread; the answer
        holds the cursor of the next page, ``None`` on the last one.

        Raises:
            Problem: 422 for a cursor this server did not give.
        """
        stored, leased = _filter(status)
        page = await self.reads(
            self.store.page_runs,
            limit=limit,
            after=paging.run_key(cursor),
            status=stored,
            leased=leased,
            held=frozenset(self._active),  # taken here: the loop changes it
        )
        return {
            "runs": [
                _summary(run.summary, _shown(run.summary, leased=run.leased)) for run in page.runs
            ],
            "next_cursor": paging.run_cursor(page.next),
            "limit": limit,
        }

    def begin_shutdown(self) -> None:
        """Refuse new work and cancel every run in flight; each stores itself cancelled."""
        self.closing = True
        self.admission.clear()  # they stay queued in the store: a restart starts them
        for task in self._active.values():
            task.cancel()
        for bells in self._listeners.values():
            for bell in bells:
                bell.set()

    async def shutdown(self, timeout: float) -> None:
        """:meth:`begin_shutdown`, then wait up to ``timeout`` seconds for the runs to end.

        Queued runs go on on their workers.
        """
        tasks = list(self._active.values())
        self.begin_shutdown()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        if self._queue_client is not None:
            client, self._queue_client = self._queue_client, None
            await asyncio.to_thread(client.destroy)

    async def _launch(self, run_id: RunId, start: Start) -> None:
        """Start ``start`` in the background; return once the run wrote its first event.

        Raises:
            Problem: 503 while shutting down; 409 when the run executes here already.
            Exception: whatever the run raised before its first event (a refused edit,
                a run leased by another process).
        """
        if self.closing:
            raise Problem(503, "the server is shutting down; try again when it is back")
        if run_id in self._active:
            raise Problem(409, f"run {run_id!r} is already executing in this server")
        first = asyncio.Event()

        def on_event(_event: Event) -> None:
            first.set()
            self._ring(run_id)  # its stored form follows at once: streams read it then

        task = asyncio.create_task(start(on_event), name=f"taskdecomp run {run_id}")
        self._active[run_id] = task
        task.add_done_callback(lambda done: self._ended(run_id, done))
        waiter = asyncio.create_task(first.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if task.done() and not task.cancelled():
            error = task.exception()
            if error is not None:
                raise error

    def _ended(self, run_id: RunId, task: asyncio.Task[RunResult | None]) -> None:
        if self._active.get(run_id) is task:
            del self._active[run_id]
        self._ring(run_id)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            logger.warning("run %s ended with %s: %s", run_id, type(error).__name__, error)

    async def _idle(self, run_id: str) -> StoredRun:
        """The stored run, once no task of this process executes it.

        A task whose run is already stored as ended or paused is only wrapping up (its lease,
        its streams): wait for it briefly rather than report the run as executing.
        """
        if self.admission.holds(RunId(run_id)):
            raise Problem(
                409,
                f"run {run_id!r} waits in this server's queue and starts when a slot is "
                f"free; POST /runs/{run_id}/cancel takes it out",
            )
        stored = await self.reads(self.store.load_run, RunId(run_id))
        task = self._active.get(RunId(run_id))
        if task is not None and stored.summary.status != "running":
            await asyncio.wait({task}, timeout=_WRAP_UP_SECONDS)
            stored = await self.reads(self.store.load_run, RunId(run_id))
        if self.is_active(run_id):
            raise Problem(409, f"run {run_id!r} is executing in this server now")
        return stored

    def _toolset(self, name: str) -> Toolset:
        toolset = self.toolsets.get(name)
        if toolset is None:
            raise Problem(
                422, f"unknown toolset {name!r}; registered: {', '.join(sorted(self.toolsets))}"
            )
        return toolset

    def _makes(self, spec: str) -> None:
        """Check once that model ``spec`` can be made (its key set, its file there).

        Raises:
            ConfigError: it cannot (409, before the run is stored).
        """
        if spec not in self._made:
            self._resolved(spec)
            self._made.add(spec)

    def _priced(self, spec: str, budget: Budget) -> None:
        """Refuse a cost budget over a model whose price is unknown (422), before storing.

        A model this server cannot make (a name only the workers know) is left to the
        process that runs it, which refuses it the same way.
        """
        if budget.max_cost_usd is None:
            return
        try:
            model = self._resolved(spec)
        except ConfigError:
            return
        try:
            prices.require_prices([model], budget.max_cost_usd)
        except ConfigError as exc:
            raise Problem(422, f"budget.max_cost_usd: {exc}") from None

    def _resolved(self, spec: str) -> Model:
        """The model ``spec`` names, connected as the server was told (``--base-url``)."""
        return resolve_model(spec, connection=self.config.connection)

    def _model(self, name: str | None) -> str:
        if name is None:
            return self.config.models[0]
        if name in self.config.models:
            return name
        raise Problem(
            422,
            f"model {name!r} is not offered by this server; choose one of: "
            f"{', '.join(self.config.models)}",
        )

    def _allow(self, toolset: Toolset, name: str, allow: list[str] | None) -> list[str] | None:
        if allow is None:
            return None
        unknown = [tool for tool in allow if tool not in toolset]
        if unknown:
            raise Problem(
                422,
                f"tool {unknown[0]!r} is not in toolset {name!r}; its tools: "
                f"{', '.join(sorted(toolset))}",
            )
        return allow

    def _budget(self, given: BudgetIn | None) -> Budget:
        try:
            return dataclasses.replace(self.config.budget, **(given or {}))
        except ValueError as exc:
            raise Problem(422, f"budget refused: {exc}") from None

    def _toolset_name(self, tools: str | None) -> str | None:
        """The registered name of a run's toolset (a queued run stores the name itself)."""
        if tools in self.toolsets:
            return tools
        return self._toolset_names.get(tools or "")

    def _stored_parts(self, stored: StoredRun) -> tuple[Toolset | None, str]:
        name = self._toolset_name(stored.tools)
        if stored.tools is None and stored.config.get("strategy") == "workflow":
            pass  # a workflow run without a toolset: the workflow's own tools only
        elif name is None:
            raise Problem(
                409,
                f"run {stored.run_id!r} was started with a toolset this server does not "
                f"register; continue it with `taskdecomp resume {stored.run_id}`",
            )
        model = self.models.get(stored.model or "")
        if model is None:
            raise Problem(
                409,
                f"run {stored.run_id!r} was started with model {one_line(str(stored.model))!r}, "
                f"which this server does not offer; start the server with --model for it",
            )
        return self.toolsets[name] if name is not None else None, model


def _filter(status: RunStatus | None) -> tuple[RunState | None, bool | None]:
    """The stored status and lease (held or not) of the runs the API shows as ``status``."""
    match status:
        case "running":
            return "running", True
        case "interrupted":
            return "running", False
        case _:
            return status, None


def _shown(summary: RunSummary, *, leased: bool) -> str:
    """The API's status of a run: a stored ``running`` run nobody holds is interrupted."""
    if summary.status != "running":
        return summary.status
    return "running" if leased else "interrupted"


def _summary(summary: RunSummary, status: str) -> dict[str, Any]:
    return {
        "run_id": summary.run_id,
        "goal": summary.goal,
        "status": status,
        "stored_status": summary.status,
        "stop_reason": summary.stop_reason,
        "started_at": summary.started_at,
        "finished_at": summary.finished_at,
        "seconds": summary.seconds,
    }


def _answer_schema(body: RunIn) -> None:
    """Refuse an ``answer_schema`` an answer cannot be checked against.

    Raises:
        Problem: 422 for a schema that is not a valid JSON schema (or cannot be checked
            here).
    """
    if body.answer_schema is None:
        return
    try:
        answer_type(body.answer_schema)
    except ConfigError as exc:
        raise Problem(422, f"answer_schema: {exc}") from None


def _options(body: RunIn) -> Any:
    """The options of the strategy ``body`` names, as a client may set them.

    Raises:
        Problem: 422 for a strategy that does not start from a goal, options of another
            strategy, or an option only the server's own configuration may set (a path).
    """
    if body.options is not None and body.replan is not None:
        raise Problem(422, "give the strategy's options once: 'options' or 'replan'")
    data = body.options if body.options is not None else None
    if body.replan is not None:
        data = body.replan.model_dump()
    try:
        chosen = registry.strategy(body.strategy)
        if not chosen.starts_from_goal:
            raise Problem(422, f"strategy {body.strategy!r} does not start from a goal")
        local = sorted(set(data or {}) & getattr(chosen, "local_only_options", frozenset()))
        if local:
            raise Problem(422, f"option {local[0]!r} cannot be set over HTTP")
        return chosen.options(data)
    except ConfigError as exc:
        given = "replan options do not apply here: " if body.replan is not None else ""
        raise Problem(422, f"{given}{exc}") from None
