"""Cross-site refusal: a page on another origin cannot change anything on this server.

Browsers let any page send a form or a ``fetch(..., {mode: "no-cors"})`` POST to any
address, without asking first, when its body is a form, ``text/plain`` or has no type.
Such a request would approve a paused run on a server without a token. So a
state-changing request (POST, PUT, PATCH, DELETE) passes only when

- its ``Origin``, if sent, is this server's own origin (its scheme and the request's Host,
  which :class:`~taskdecomp.server.hosts.HostAllowlist` checked first) or one the operator
  trusts (``--cors-origin``), else 403;
- its ``Sec-Fetch-Site``, if sent, is not ``cross-site`` or ``same-site`` (another port on
  the same host is same-site yet another origin), unless its ``Origin`` is trusted, else 403;
- it is sent as ``Content-Type: application/json`` (which no browser sends to another
  origin without a CORS preflight), or has neither a body nor a ``Content-Type``, else 415
  (an empty form is still a form).

Clients that send neither header (curl, httpx, SDKs) are not browsers and pass.
"""

from __future__ import annotations

import urllib.parse

from taskdecomp.server.guard import ASGIApp, Receive, Scope, Send, send_problem
from taskdecomp.server.hosts import DEFAULT_PORTS, request_authority

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CROSS = ("cross-site", "same-site")
"""``Sec-Fetch-Site`` values of a request from a page on another origin."""


class SameOrigin:
    """Refuse (403) a state-changing request from another origin, (415) one not in JSON.

    Args:
        app: the wrapped application.
        trusted: origins the operator allows (``--cors-origin``); ``*`` trusts every one.
    """

    def __init__(self, app: ASGIApp, *, trusted: tuple[str, ...] = ()) -> None:
        self.app = app
        self._any = "*" in trusted
        keys = (_origin_key(origin) for origin in trusted)
        self._trusted = frozenset(key for key in keys if key is not None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, or answer 403 or 415."""
        if scope["type"] != "http" or scope.get("method") not in STATE_CHANGING:
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        refusal = self._cross_site(scope, headers)
        if refusal is not None:
            await send_problem(send, 403, refusal)
            return
        refusal = _not_json(headers)
        if refusal is not None:
            await send_problem(send, 415, refusal)
            return
        await self.app(scope, receive, send)

    def _cross_site(self, scope: Scope, headers: dict[str, str]) -> str | None:
        """Why the request comes from a page on another origin, or ``None``."""
        origin = headers.get("origin")
        key = _origin_key(origin) if origin is not None else None
        if origin is not None and (self._any or key in self._trusted):
            return None
        fix = "to let a page on another origin call this server, start it with --cors-origin"
        if origin is not None and (key is None or key != _own_key(scope)):
            return (
                f"cross-origin request refused: origin {origin!r} is not this server's own; "
                f"a page on another origin may not change anything here ({fix} ORIGIN)"
            )
        site = headers.get("sec-fetch-site", "").strip().lower()
        if site in CROSS:
            return (
                f"cross-site request refused (Sec-Fetch-Site: {site}): a page on another "
                f"origin may not change anything here ({fix} ORIGIN)"
            )
        return None


def _not_json(headers: dict[str, str]) -> str | None:
    """Why the request's body is refused, or ``None`` (JSON, or no body and no type)."""
    given = headers.get("content-type")
    length = headers.get("content-length", "").strip()
    has_body = "transfer-encoding" in headers or (length not in ("", "0"))
    if given is None and not has_body:
        return None
    media = (given or "").partition(";")[0].strip().lower()
    if media == "application/json":
        return None
    shown = repr(given) if given is not None else "none"
    return (
        f"this server takes request bodies as JSON only (Content-Type: {shown}); "
        "send 'Content-Type: application/json', or no body and no Content-Type"
    )


def _headers(scope: Scope) -> dict[str, str]:
    return {
        bytes(name).decode("latin-1"): bytes(value).decode("latin-1")
        for name, value in scope.get("headers", ())
    }


def _origin_key(origin: str) -> tuple[str, str, int] | None:
    """``origin`` as (scheme, host, port), the default port filled in; ``None``: not one."""
    try:
        parts = urllib.parse.urlsplit(origin.strip().lower())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/"):
        return None
    return parts.scheme, parts.hostname, port or DEFAULT_PORTS[parts.scheme]


def _own_key(scope: Scope) -> tuple[str, str, int] | None:
    """This server's origin as the request reached it: its scheme and its Host."""
    _raw, authority = request_authority(scope)
    if authority is None or authority.port is None:
        return None
    return str(scope.get("scheme", "http")), authority.host, authority.port
