"""The OpenAPI document: the contract clients are generated from.

Every JSON answer has a schema (:mod:`.responses`, attached to each route with
:func:`returns`), and every error is documented as what the server sends: a ``Problem``
under ``application/problem+json``. A route names the problems its own work can answer
(``returns(RunView, 404, 409)``); :func:`install` adds those every operation of a kind can
answer (:func:`shared_problems`: a crash, the Host and browser guards, the token, the body
limit, request validation)
and replaces FastAPI's own 422 schema, which the server never sends. An event stream
documents the messages it carries (:func:`event_stream`).

A new status is described once in :data:`WHY`; one every operation of a kind can answer
goes in :func:`shared_problems`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from taskdecomp.server.problems import MEDIA_TYPE
from taskdecomp.server.responses import (
    DecompositionJob,
    NodesRemoved,
    PlanStreamEnd,
    ProblemDocument,
    RunEvent,
    RunStreamEnd,
    TreeNode,
)

SCHEMAS = "#/components/schemas/"

WHY: dict[int, str] = {
    400: "The request is malformed (a Last-Event-ID that is not a whole number).",
    401: "No token, or a wrong one: send 'Authorization: Bearer TOKEN'.",
    403: "A browser request from another site: a cross-site Origin or Sec-Fetch-Site.",
    404: "The run, plan or node the path names does not exist (POST /chat: the chat agent is off).",
    409: "The run or plan is not in a state that allows this; detail says why.",
    413: "The request body is larger than the server accepts.",
    415: "A body that is not sent as application/json.",
    421: "The Host header names neither this server's address nor an allowed host.",
    422: "A field of the body, the path or the query is invalid; errors lists each one.",
    429: "Too many requests of this kind now; Retry-After says when to try again.",
    500: "The server failed to handle the request; its log says why.",
    502: "The chat model failed.",
    503: "The server is shutting down, or its store cannot be reached.",
}
"""What each problem status means, for every operation that can answer it."""

RUN_STREAM: tuple[type[BaseModel], ...] = (RunEvent, RunStreamEnd)
"""What the messages of a run's event stream carry: events, then ``end``."""
PLAN_STREAM: tuple[type[BaseModel], ...] = (TreeNode, NodesRemoved, DecompositionJob, PlanStreamEnd)
"""What the messages of a plan's event stream carry: ``node``, ``removed``,
``decomposition`` and ``end``."""


def returns(model: type[BaseModel] | None, *problems: int) -> dict[str, Any]:
    """The route options of an operation that answers ``model`` or one of ``problems``.

    The answer keeps exactly the keys the route gave it (``response_model_exclude_unset``).
    """
    options: dict[str, Any] = {"responses": problem_responses(*problems)}
    if model is not None:
        options |= {"response_model": model, "response_model_exclude_unset": True}
    return options


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` entries of ``statuses``, each a ``Problem``."""
    return {status: _problem(status) for status in statuses}


def event_stream(messages: tuple[type[BaseModel], ...]) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` entry of a 200 that streams server-sent events carrying ``messages``.

    Each message's ``data`` is one line of JSON, one of ``messages`` (``itemSchema``, as
    FastAPI documents its own event streams).
    """
    data = {"anyOf": [{"$ref": SCHEMAS + message.__name__} for message in messages]}
    item = {
        "type": "object",
        "required": ["event", "data"],
        "properties": {
            "id": {"type": "string"},
            "event": {"type": "string"},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": data,
            },
        },
    }
    stream = {"schema": {"type": "string"}, "itemSchema": item}
    return {
        200: {
            "description": "Server-sent events, each with an 'event' name and one line of JSON "
            "as 'data'; see docs/service.md.",
            "content": {"text/event-stream": stream},
        }
    }


def shared_problems(
    operation: dict[str, Any], *, token: bool, state_changing: bool = False
) -> tuple[int, ...]:
    """The problems every operation like ``operation`` can answer, whatever its route."""
    statuses = [421, 500]  # every request's Host is checked
    if token:
        statuses.append(401)
    if state_changing:
        statuses += [403, 415]  # the browser guards (server/origin.py)
    if "requestBody" in operation:
        statuses.append(413)
    if "requestBody" in operation or operation.get("parameters"):
        statuses.append(422)
    return tuple(statuses)


def install(app: FastAPI, *, token: bool) -> None:
    """Make ``app`` serve the document with its problems (and the bearer scheme if ``token``)."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document(generate(), token=token)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented override


def document(generated: dict[str, Any], *, token: bool) -> dict[str, Any]:
    """``generated`` with every problem documented as the server sends it."""
    components = generated.setdefault("components", {})
    _add_schemas(components.setdefault("schemas", {}))
    for path in generated.get("paths", {}).values():
        for method, operation in path.items():
            responses = operation.setdefault("responses", {})
            changing = method.upper() in ("POST", "PUT", "PATCH", "DELETE")
            for status in shared_problems(operation, token=token, state_changing=changing):
                responses[str(status)] = _problem(status)
    if token:
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        generated["security"] = [{"bearer": []}]
    return generated


def _add_schemas(schemas: dict[str, Any]) -> None:
    """``Problem`` and the event streams' messages in; FastAPI's own 422 schemas out."""
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    problem = ProblemDocument.model_json_schema(ref_template=SCHEMAS + "{model}")
    schemas.update(problem.pop("$defs", {}))
    schemas["Problem"] = problem
    _, streamed = models_json_schema(
        [(model, "serialization") for model in dict.fromkeys((*RUN_STREAM, *PLAN_STREAM))],
        ref_template=SCHEMAS + "{model}",
    )
    for name, schema in streamed.get("$defs", {}).items():
        schemas.setdefault(name, schema)  # a model a route answers too is there already


def _problem(status: int) -> dict[str, Any]:
    return {
        "description": WHY[status],
        "content": {MEDIA_TYPE: {"schema": {"$ref": SCHEMAS + "Problem"}}},
    }
