"""A model per role: which model answers each kind of call a run makes.

Every model call of a run belongs to a role, named by the call's phase
(:attr:`~taskdecomp.models.base.ModelRequest.phase`):

============  =====================  ===============================================
role          phases                 what it answers
============  =====================  ===============================================
``planner``   ``plan``, ``decompose``  the plan; the split of a plan tree's task
``executor``  ``execute``            the executor agent's turns (``replan``, ``tree``)
``replanner`` ``replan``             respond, or revise the steps left
``rollup``    ``rollup``             an inner task's result from its subtasks'
``combiner``  ``finalize``           the run's answer
============  =====================  ===============================================

:class:`Roles` gives roles their own models; a role it leaves out uses the run's model
(``model=``). The mapping is resolved once, at the edge (:meth:`Roles.resolved`), and the
engine picks the model of each call by its phase (:meth:`RunContext.ask
<taskdecomp.runtime.RunContext.ask>`). The role models' strings are stored with the run,
so a resume or a worker rebuilds them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal, get_args

from taskdecomp.errors import ConfigError

if TYPE_CHECKING:
    from taskdecomp.models.base import Model
    from taskdecomp.stops import LlmPhase

Role = Literal["planner", "executor", "replanner", "rollup", "combiner"]
"""A kind of model call a run makes (see the module docstring)."""

ROLES: tuple[Role, ...] = get_args(Role)
"""Every role, in the order a run meets them."""

PHASE_ROLES: Mapping[str, Role] = MappingProxyType(
    {
        "plan": "planner",
        "decompose": "planner",
        "execute": "executor",
        "replan": "replanner",
        "rollup": "rollup",
        "finalize": "combiner",
    }
)
"""The role of each phase; a phase not listed (``chat``) has none."""


def role_of(phase: LlmPhase) -> Role | None:
    """The role a call of ``phase`` belongs to, or ``None`` (the service's ``chat``)."""
    return PHASE_ROLES.get(phase)


RoleMapping = Mapping[str, "Model | str | None"] | Mapping[Role, "Model | str | None"]
"""A model (or model string) by role name, as ``roles=`` takes it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Roles:
    """The models of the roles that have their own; ``None``: the run's model.

    A model is a model object or a model string (``openai:gpt-4.1-mini``). Build one
    directly or from a mapping with :meth:`of`.
    """

    planner: Model | str | None = None
    """The plan calls (and a plan tree's splits); default: the run's model."""
    executor: Model | str | None = None
    """The executor agent's turns."""
    replanner: Model | str | None = None
    """The replanner's decisions."""
    rollup: Model | str | None = None
    """A plan tree's roll-ups."""
    combiner: Model | str | None = None
    """The combine call that writes the answer."""

    @classmethod
    def of(cls, given: Roles | RoleMapping | None) -> Roles:
        """``given`` as :class:`Roles`: a mapping's keys must be roles.

        Raises:
            ConfigError: a key is not a role.
        """
        if given is None:
            return cls()
        if isinstance(given, Roles):
            return given
        unknown = sorted(str(key) for key in given if key not in ROLES)
        if unknown:
            raise ConfigError(f"{unknown[0]!r} is not a role; give models for: {', '.join(ROLES)}")
        return cls(**{str(key): value for key, value in given.items()})

    def get(self, role: Role) -> Model | str | None:
        """The model ``role`` was given, or ``None``."""
        value: Model | str | None = getattr(self, role)
        return value

    def given(self) -> dict[Role, Model | str]:
        """The roles that have a model of their own, in :data:`ROLES` order."""
        return {role: value for role in ROLES if (value := self.get(role)) is not None}

    def replaced(self, other: Roles) -> Roles:
        """These roles, with each role ``other`` gives taking ``other``'s model."""
        return Roles(**{role: other.get(role) or self.get(role) for role in ROLES})

    def resolved(self, resolve: Callable[[str], Model]) -> dict[Role, Model]:
        """The models of the given roles, each string made a model by ``resolve``.

        Raises:
            ModelNotFoundError: what ``resolve`` raises for a string it cannot load.
        """
        return {
            role: resolve(value) if isinstance(value, str) else value
            for role, value in self.given().items()
        }
