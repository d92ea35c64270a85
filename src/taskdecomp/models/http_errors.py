"""How an HTTP model API's failures become the engine's ``llm_*`` stop reasons.

Every provider maps a status the same way: 401 ``auth``, 403 ``permission``, 404
``not_found``, 429 ``quota`` (out of credit) or ``rate_limit``, 5xx ``server``, 400/422
``bad_request``, any other ``http_<status>``; and an unreachable server ``connection``.
408, 409, 429 (not ``quota``) and 5xx are worth another attempt. Messages name the
provider's model, the server and what the user can change; a key never appears in them.
"""

from __future__ import annotations

from dataclasses import dataclass

from taskdecomp.errors import ModelError

RETRY_STATUS = frozenset({408, 409, 429})
"""Statuses worth another attempt, besides every 5xx."""
BAD_REQUEST_STATUS = frozenset({400, 422})


@dataclass(frozen=True, kw_only=True, slots=True)
class Failure:
    """What a server answered: its status, error code and message (scrubbed of keys)."""

    status: int
    code: str | None
    detail: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Endpoint:
    """Who was called, for messages."""

    model: str
    """The model string, ``provider:model``."""
    name: str
    """The model's name on the server."""
    where: str
    """The server (its base URL, or the provider's own name)."""
    key_hint: str
    """How to give a key, e.g. ``set a valid OPENAI_API_KEY``."""
    model_hint: str
    """How to pick another model, e.g. ``pick another with --model or OPENAI_MODEL``."""


def retryable(failure: Failure) -> bool:
    """Whether another attempt may succeed."""
    if failure.status == 429 and failure.code == "insufficient_quota":
        return False
    return failure.status in RETRY_STATUS or failure.status >= 500


def status_error(endpoint: Endpoint, failure: Failure, *, attempts: int) -> ModelError:
    """The error a failed call reports, with the stop reason's kind."""
    status, detail, model, where = failure.status, failure.detail, endpoint.model, endpoint.where
    if status == 401:
        return ModelError(
            "auth", f"{model}: {where!r} refused the API key (401); {endpoint.key_hint}"
        )
    if status == 403:
        return ModelError(
            "permission",
            f"{model}: the API key may not use this model (403): {detail}; "
            "check the key's project and model access",
        )
    if status == 404:
        return ModelError(
            "not_found",
            f"{model}: {where!r} does not know model {endpoint.name!r} (404): {detail}; "
            f"{endpoint.model_hint}",
        )
    if status == 429 and failure.code == "insufficient_quota":
        return ModelError("quota", f"{model}: the account is out of quota (429): {detail}")
    if status == 429:
        return ModelError(
            "rate_limit",
            f"{model}: still rate limited after {attempts} attempts; "
            "try again later or lower max_parallel",
        )
    if status >= 500:
        return ModelError(
            "server", f"{model}: {where!r} failed with {status} after {attempts} attempts: {detail}"
        )
    if status in BAD_REQUEST_STATUS:
        return ModelError(
            "bad_request", f"{model}: the server refused the request ({status}): {detail}"
        )
    return ModelError(f"http_{status}", f"{model}: HTTP {status}: {detail}")


def connection_error(endpoint: Endpoint, cause: str, *, url_hint: str) -> ModelError:
    """The error of a server that cannot be reached."""
    return ModelError(
        "connection",
        f"{endpoint.model}: cannot reach {endpoint.where!r} ({cause}); check that the server "
        f"is running and that {url_hint} is right",
    )
