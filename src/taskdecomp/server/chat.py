"""The conversation agent (seed 002): a chat model that answers in words and actions.

Each turn sends the conversation so far and the action catalog to the chat model (its own
model, independent of the decomposer's ``DECOMP_MODEL``). Its answer passes the boundary
in :mod:`.actions`; every action that passes is dispatched to the same service calls as
the HTTP endpoints, and the reply ends with one plain sentence per action, such as the
seed's ``Plan #8 got 10 subtasks; node 15 was not processed because the model did not
answer.`` Conversations live in memory, the newest :data:`MAX_CONVERSATIONS` of them.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from taskdecomp.errors import ModelError, TaskdecompError
from taskdecomp.models import Message, Model, ModelRequest
from taskdecomp.server import actions, treeruns
from taskdecomp.server.actions import (
    Checked,
    CreatePlanArgs,
    DecomposeTaskArgs,
    GetPlanArgs,
    RejectRunArgs,
    RunRefArgs,
    StartRunArgs,
)
from taskdecomp.server.plans import Job
from taskdecomp.server.problems import Problem, detail_of, one_line
from taskdecomp.server.schemas import RunIn, TreeRunIn

if TYPE_CHECKING:
    from taskdecomp.server.service import Service

Outcome = tuple[str, Any]
"""A sentence for the reply, and the action's result as JSON."""
Handler = Callable[[Any], Awaitable[Outcome]]

MAX_CONVERSATIONS = 200
MAX_MESSAGES = 20
"""Most earlier messages of a conversation sent with a turn."""
WAIT_SECONDS = 120.0
"""How long a turn waits for a decomposition before saying it goes on in the background."""

SYSTEM = """You are the assistant of a task-decomposition service. Answer the user with ONE
JSON object: {{"reply": "<what you say>", "actions": [{{"action": "<name>", "args": {{...}}}}]}}.
Use actions to act; use no action when words are enough. Known actions (arguments as JSON
schema):
{catalog}
Registered toolsets for start_run: {toolsets}."""


class ChatAgent:
    """Answers chat turns and carries out their actions through ``service``.

    Args:
        service: the service whose runs and plans the actions use.
        model: the chat model.
    """

    def __init__(self, service: Service, model: Model) -> None:
        self.service = service
        self.model = model
        self._conversations: OrderedDict[str, list[Message]] = OrderedDict()

    async def turn(self, message: str, conversation_id: str | None) -> dict[str, Any]:
        """One turn: the model's reply, and what each of its actions did.

        Raises:
            Problem: 502 when the chat model fails.
        """
        cid = conversation_id or uuid.uuid4().hex
        history = self._history(cid)
        request = ModelRequest(
            phase="chat",
            messages=(
                {"role": "system", "content": self._system()},
                *history[-MAX_MESSAGES:],
                {"role": "user", "content": message},
            ),
            json_schema=actions.answer_schema(),
            schema_name="chat_answer",
        )
        try:
            response = await self.model.complete(request)
        except ModelError as exc:
            raise Problem(502, f"the chat model failed: {one_line(str(exc), 500)}") from None
        parsed = actions.parse_answer(response.text)
        if parsed is None:
            reply = "I could not act on my own answer: it did not follow the action format."
            done: list[dict[str, Any]] = []
        else:
            said, proposed = parsed
            allowed = self.service.config.chat_actions
            done = [await self._dispatch(item) for item in actions.check(proposed, allowed)]
            reply = " ".join([said, *(item["message"] for item in done)]).strip()
        history += [{"role": "user", "content": message}, {"role": "assistant", "content": reply}]
        return {"conversation_id": cid, "reply": reply, "actions": done}

    def _history(self, cid: str) -> list[Message]:
        history = self._conversations.pop(cid, [])
        self._conversations[cid] = history
        while len(self._conversations) > MAX_CONVERSATIONS:
            self._conversations.popitem(last=False)
        del history[: max(len(history) - MAX_MESSAGES, 0)]
        return history

    def _system(self) -> str:
        catalog = json.dumps(actions.catalog(), ensure_ascii=True)
        return SYSTEM.format(
            catalog=catalog, toolsets=", ".join(sorted(self.service.runs.toolsets))
        )

    async def _dispatch(self, item: Checked) -> dict[str, Any]:
        outcome: dict[str, Any] = {"action": item.action, "args": item.raw_args}
        if item.refused is not None or item.args is None:
            code = (item.refused or "refused").partition(" - ")[0]
            return outcome | {
                "status": "refused",
                "reason": code,
                "message": f"I did not run {item.action} ({item.refused}).",
            }
        try:
            message, result = await self._handlers[item.action](item.args)
        except (Problem, TaskdecompError) as exc:
            text = exc.detail if isinstance(exc, Problem) else detail_of(exc)
            return outcome | {
                "status": "failed",
                "message": f"{item.action} failed: {one_line(text, 500)}",
            }
        return outcome | {"status": "done", "message": message, "result": result}

    @property
    def _handlers(self) -> dict[str, Handler]:
        return {
            "plan_operation/create_plan": self._create_plan,
            "plan_operation/get_plan": self._get_plan,
            "task_operation/decompose_task": self._decompose_task,
            "run_operation/start_run": self._start_run,
            "run_operation/get_run": self._get_run,
            "run_operation/cancel_run": self._cancel_run,
            "run_operation/approve_run": self._approve_run,
            "run_operation/reject_run": self._reject_run,
        }

    async def _create_plan(self, args: Any) -> Outcome:
        assert isinstance(args, CreatePlanArgs)
        plans = self.service.plans
        tree, job = await plans.create(
            args.title, args.instruction, auto=args.auto_decompose, options=None
        )
        made = f"Created plan #{tree.id} {args.title!r}."
        if job is None:
            return made, await plans.show(tree.id)
        return f"{made} {await self._finished(job)}", job.to_dict()

    async def _get_plan(self, args: Any) -> Outcome:
        assert isinstance(args, GetPlanArgs)
        tree = await self.service.plans.show(args.plan_id)
        return f"Plan #{args.plan_id} {tree['title']!r} has {len(tree['nodes'])} nodes.", tree

    async def _decompose_task(self, args: Any) -> Outcome:
        assert isinstance(args, DecomposeTaskArgs)
        job = await self.service.plans.decompose(
            args.plan_id,
            args.node_id,
            expand_depth=args.expand_depth,
            overwrite=args.mode == "overwrite",
        )
        return await self._finished(job), job.to_dict()

    async def _start_run(self, args: Any) -> Outcome:
        assert isinstance(args, StartRunArgs)
        if args.plan_id is not None:
            return await self._start_tree_run(args, args.plan_id)
        assert args.goal is not None  # the arguments' check
        strategy = args.strategy or "plan_execute"
        body = RunIn(goal=args.goal, toolset=args.toolset, strategy=strategy, allow=args.allow)
        run_id = await self.service.runs.start(body)
        return f"Started run {run_id}.", {"run_id": run_id}

    async def _start_tree_run(self, args: StartRunArgs, plan_id: int) -> Outcome:
        body = TreeRunIn(toolset=args.toolset, goal=args.goal, allow=args.allow)
        run_id = (await treeruns.start(self.service, plan_id, args.node_id, body))["run_id"]
        what = f"plan #{plan_id}"
        if args.node_id is not None:
            what = f"node {args.node_id} of {what}"
        return f"Started run {run_id} of {what}.", {"run_id": run_id}

    async def _get_run(self, args: Any) -> Outcome:
        assert isinstance(args, RunRefArgs)
        view = await self.service.runs.show(args.run_id)
        said = f"Run {args.run_id} is {view['status']}"
        if view.get("stop_reason"):
            said += f" ({view['stop_reason']})"
        if view.get("answer"):
            said += f": {one_line(view['answer'], 1000)}"
        return said + ".", view

    async def _cancel_run(self, args: Any) -> Outcome:
        assert isinstance(args, RunRefArgs)
        await self.service.runs.cancel(args.run_id)
        return f"Cancelled run {args.run_id}.", await self.service.runs.show(args.run_id)

    async def _approve_run(self, args: Any) -> Outcome:
        assert isinstance(args, RunRefArgs)
        await self.service.runs.approve(args.run_id, None)
        return f"Approved run {args.run_id}; it goes on.", await self.service.runs.show(args.run_id)

    async def _reject_run(self, args: Any) -> Outcome:
        assert isinstance(args, RejectRunArgs)
        await self.service.runs.reject(args.run_id, args.reason)
        return f"Rejected run {args.run_id}.", await self.service.runs.show(args.run_id)

    async def _finished(self, job: Job) -> str:
        try:
            await asyncio.wait_for(asyncio.shield(self.service.plans.wait(job)), WAIT_SECONDS)
        except TimeoutError:
            return f"Plan #{job.plan_id} is still being decomposed; watch it on the web page."
        return job.summary or ""
