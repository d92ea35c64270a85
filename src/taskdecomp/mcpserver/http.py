"""The MCP server over streamable HTTP, with the same care as the service.

- It answers only to the names it is reached by on purpose: loopback names on its port,
  the bound address, and the operator's ``--allowed-host`` names; a request from a page on
  another origin is refused. Both are the SDK's own DNS-rebinding protection
  (:class:`~mcp.server.transport_security.TransportSecuritySettings`), given this list.
- Beyond loopback it needs a token (``TASKDECOMP_API_TOKEN``) that every request sends as
  ``Authorization: Bearer TOKEN``, compared in constant time and never logged.

The rules are the service's own (:mod:`taskdecomp.listening`); the service's middleware
lives in a package that needs FastAPI, which this command does not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from taskdecomp.errors import ConfigError
from taskdecomp.listening import bearer_matches, check_bind, is_loopback

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PATH = "/mcp"
"""Where the MCP endpoint is served."""

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
WILDCARDS = ("", "0.0.0.0", "::")


def security(
    host: str, port: int, allowed_hosts: tuple[str, ...] = ()
) -> TransportSecuritySettings:
    """The Host and Origin values a request may carry."""
    bound = host.strip().strip("[]").lower()
    name = f"[{bound}]" if ":" in bound else bound
    names = [*LOOPBACK_NAMES, *(() if bound in WILDCARDS or is_loopback(bound) else (name,))]
    hosts = [f"{n}:{port}" for n in names]
    for given in allowed_hosts:
        given = given.strip().lower()
        if not given or any(char in given for char in "/?#@ *"):
            raise ConfigError(
                f"--allowed-host {given!r} is not a host name: give NAME or NAME:PORT "
                "(e.g. --allowed-host tasks.example.com), the name clients put in the URL"
            )
        hosts += [given] if given.rpartition(":")[2].isdigit() else [given, f"{given}:*"]
    origins = [f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


def http_app(
    server: MCPServer[Any],
    *,
    host: str,
    port: int,
    allowed_hosts: tuple[str, ...] = (),
    token: str | None = None,
) -> ASGIApp:
    """The server's streamable HTTP application at :data:`PATH`, guarded.

    Raises:
        ConfigError: ``host`` is not loopback and there is no token, or an
            ``allowed_hosts`` entry is not a host name.
    """
    check_bind(host, token)
    app: ASGIApp = server.streamable_http_app(
        streamable_http_path=PATH,
        transport_security=security(host, port, allowed_hosts),
        host=host,
    )
    return BearerToken(app, token=token) if token is not None else app


class BearerToken:
    """Refuse (401) a request without ``Authorization: Bearer TOKEN``."""

    def __init__(self, app: ASGIApp, *, token: str) -> None:
        self.app = app
        self._token = token.encode("utf-8")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, or answer 401."""
        if scope["type"] != "http" or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        body = b'{"error": "this server needs a token: send \'Authorization: Bearer TOKEN\'"}'
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b"Bearer"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def _allowed(self, scope: Scope) -> bool:
        return bearer_matches(scope.get("headers", ()), self._token)
