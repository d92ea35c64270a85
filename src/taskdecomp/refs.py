"""``$ref`` arguments: a tool step's argument taken from an earlier step's result.

A value ``{"$ref": "step_1/month"}`` anywhere in a step's ``args`` stands for the value at
the JSON pointer ``/month`` (RFC 6901) inside the observation of ``step_1``;
``{"$ref": "step_1"}`` is the whole observation. So a DAG plan passes data along without a
model call.

The referenced step must be one the step waits for (directly or through others), which the
policy boundary checks before anything runs (:func:`check_refs`); the pointer is resolved
just before the call (:func:`resolve_refs`). Either failure is ``bad_ref:<step>``, and the
tool is never called with a wrong argument.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import Any

from taskdecomp.plan import Step, TaskId
from taskdecomp.stops import StopReason, StopRun, with_detail

REF_KEY = "$ref"
"""The key of a reference object."""


def bad_ref(step_id: str) -> StopReason:
    """``bad_ref:<step>``."""
    return with_detail("bad_ref", step_id)


def is_ref(value: Any) -> bool:
    """Whether ``value`` is a reference object: exactly ``{"$ref": "<text>"}``."""
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(REF_KEY), str)


def split_ref(ref: str) -> tuple[TaskId, str]:
    """``"step_1/a/b"`` -> ``("step_1", "/a/b")``; ``"step_1"`` -> ``("step_1", "")``."""
    step_id, sep, pointer = ref.partition("/")
    return TaskId(step_id), sep + pointer


def refs_in(args: Any) -> Iterator[str]:
    """Every reference string inside ``args``, depth first."""
    stack = [args]
    while stack:
        value = stack.pop()
        if is_ref(value):
            yield value[REF_KEY]
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


def has_refs(args: Any) -> bool:
    """Whether ``args`` holds a reference anywhere."""
    return next(refs_in(args), None) is not None


def check_refs(step: Step, reachable: Collection[TaskId]) -> None:
    """Refuse a reference to a step that ``step`` does not wait for.

    Raises:
        StopRun: ``bad_ref:<step>`` naming the reference and the steps it may name.
    """
    for ref in refs_in(step.args):
        target, _ = split_ref(ref)
        if target not in reachable:
            may = ", ".join(sorted(reachable)) or "(none: add depends_on)"
            raise StopRun(
                bad_ref(step.id),
                message=f"step {step.id!r} refers to {ref!r}, but {target!r} is not a step it "
                f"depends on; it may refer to: {may}",
            )


def resolve_refs(step: Step, observations: Mapping[TaskId, Any]) -> Mapping[str, Any]:
    """``step.args`` with every reference replaced by the value it points at.

    Raises:
        StopRun: ``bad_ref:<step>`` when a step has no result or the pointer does not resolve.
    """
    if not has_refs(step.args):
        return step.args
    resolved = _substitute(dict(step.args), step, observations)
    if not isinstance(resolved, dict):
        raise StopRun(
            bad_ref(step.id),
            message=f"step {step.id!r}: its whole args are a reference that resolves to a "
            f"{type(resolved).__name__}; args must be an object (refer inside it instead)",
        )
    return resolved


def _substitute(value: Any, step: Step, observations: Mapping[TaskId, Any]) -> Any:
    if is_ref(value):
        return _lookup(value[REF_KEY], step, observations)
    if isinstance(value, dict):
        return {key: _substitute(item, step, observations) for key, item in value.items()}
    if isinstance(value, list):
        return [_substitute(item, step, observations) for item in value]
    return value


def _lookup(ref: str, step: Step, observations: Mapping[TaskId, Any]) -> Any:
    target, pointer = split_ref(ref)
    if target not in observations:
        raise StopRun(
            bad_ref(step.id),
            message=f"step {step.id!r} refers to {ref!r}, but step {target!r} has no result",
        )
    try:
        return resolve_pointer(observations[target], pointer)
    except LookupError as exc:
        raise StopRun(
            bad_ref(step.id),
            message=f"step {step.id!r} refers to {ref!r}, which does not resolve: {exc}",
        ) from exc


def resolve_pointer(document: Any, pointer: str) -> Any:
    """The value at JSON pointer ``pointer`` (RFC 6901) in ``document``.

    Raises:
        LookupError: a token names no key or index, or the pointer is malformed.
    """
    if pointer == "":
        return document
    if not pointer.startswith("/"):
        raise LookupError(f"pointer {pointer!r} must start with '/'")
    current = document
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(current, dict):
            if token not in current:
                raise LookupError(f"no key {token!r}")
            current = current[token]
        elif isinstance(current, list):
            if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
                raise LookupError(f"{token!r} is not a list index")
            if int(token) >= len(current):
                raise LookupError(f"index {token} is past the end ({len(current)} items)")
            current = current[int(token)]
        else:
            raise LookupError(f"cannot look up {token!r} in a {type(current).__name__}")
    return current
