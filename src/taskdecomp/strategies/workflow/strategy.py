"""The ``workflow`` strategy as registered: how a stored workflow run goes on.

A workflow run starts from a workspace and a workflow file (:func:`run_workflow
<taskdecomp.strategies.workflow.api.run_workflow>`, ``taskdecomp workflow run``), not from a
goal; once stored, it is resumed, approved and listed like any other run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from taskdecomp.errors import ConfigError
from taskdecomp.store.base import StoredRun
from taskdecomp.strategies.base import Phases, ToolsArg
from taskdecomp.strategies.registry import Setup
from taskdecomp.tools import Toolset


class Workflow:
    """YAML phases with guarded transitions, and a task loop with spec checks."""

    name = "workflow"
    summary = "YAML phases and a task loop over a workspace (taskdecomp workflow run)"
    starts_from_goal = False
    options_type = dict

    def options(self, data: Mapping[str, Any] | None) -> dict[str, Any]:
        """The stored settings (workflow file, workspace, options), checked on resume."""
        return dict(data or {})

    def encode(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The settings as stored."""
        return dict(options)

    def start(self, setup: Setup, options: Mapping[str, Any]) -> Phases:
        """A workflow starts from a workspace, never here.

        Raises:
            ConfigError: always; the message says how to start one.
        """
        raise ConfigError(
            "a workflow starts from a workspace: use `taskdecomp workflow run` or run_workflow()"
        )

    def resume(
        self, setup: Setup, options: Mapping[str, Any], stored: StoredRun, tools: ToolsArg | None
    ) -> tuple[Toolset | None, Phases]:
        """The workspace's tools with the user's, and the runner at its stored phase.

        Raises:
            ConfigError: the workspace or the workflow file is gone or now malformed.
        """
        from taskdecomp.strategies.workflow.api import rebuild  # it loads yaml and git tools

        return rebuild(stored, options, tools)


STRATEGY = Workflow()
"""The ``workflow`` strategy, as registered."""
