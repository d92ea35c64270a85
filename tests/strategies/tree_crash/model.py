"""A scripted model that writes down every call it is asked, by phase and by node.

``logged:PATH`` answers from the script file ``PATH`` as ``scripted:PATH`` does, and first
appends one JSON line to ``TREE_CRASH_CALLS``: the call's ``phase`` and the name of the tree
node it is about (the executor's step, the decomposer's target task, the roll-up's task).
``TREE_CRASH_AT=model:<phase>:<node name>`` makes the process kill itself (SIGKILL) inside
that call, after it is written down and before it answers (``model:<phase>:<node name>:<k>``:
inside the ``k``-th such call of the process). :func:`register` makes the
``logged`` provider known in this process (a run stores its model as ``logged:PATH``, so a
process that resumes it registers it too).
"""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

from taskdecomp.models import Model, ModelRequest, ModelResponse, register_provider
from taskdecomp.models.connection import Connection
from taskdecomp.models.providers import provider
from taskdecomp.models.scripted import ScriptedModel


def target(request: ModelRequest) -> str | None:
    """The name of the node ``request`` is about (``None`` for any other call)."""
    for message in request.messages:
        if message["role"] != "user":
            continue
        try:
            payload: Any = json.loads(message["content"])
        except ValueError:
            continue
        for key, name in (("step", "title"), ("target_task", "name"), ("task", "name")):
            part = payload.get(key) if isinstance(payload, dict) else None
            if isinstance(part, dict) and isinstance(part.get(name), str):
                return str(part[name])
    return None


class LoggedModel:
    """:class:`ScriptedModel` answers, each call written down first (see the module)."""

    def __init__(self, path: str) -> None:
        self._script = ScriptedModel.from_file(path)
        self._name = f"logged:{Path(path).absolute()}"
        self._asked: Counter[tuple[str, str | None]] = Counter()

    @property
    def name(self) -> str:
        """The model string a resumed run loads it from."""
        return self._name

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Write the call down, maybe die, then answer from the script."""
        node = target(request)
        line = json.dumps({"phase": request.phase, "node": node, "pid": os.getpid()})
        with open(os.environ["TREE_CRASH_CALLS"], "a", encoding="utf-8") as log:
            log.write(line + "\n")
        self._asked[request.phase, node] += 1
        here = f"model:{request.phase}:{node}"
        if os.environ.get("TREE_CRASH_AT") in (here, f"{here}:{self._asked[request.phase, node]}"):
            os.kill(os.getpid(), signal.SIGKILL)
        return await self._script.complete(request)


@provider(connects=False, names_files=True)
def logged(name: str, connection: Connection) -> Model:
    """``logged:PATH``: the script file ``PATH``, every call written down."""
    return LoggedModel(name)


def register() -> None:
    """Make ``logged:PATH`` model strings resolve in this process."""
    register_provider("logged", logged)
