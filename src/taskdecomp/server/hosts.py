"""The Host allowlist: the server answers only to the names it is reached by on purpose.

A page on ``http://evil.example:8000`` whose name the attacker re-points at 127.0.0.1 (DNS
rebinding) talks to this server as if it were its own origin, so the browser lets it read
every answer. Its requests still carry ``Host: evil.example:8000``: refusing every Host this
server was not meant to be reached by (421) ends the attack. Allowed: ``127.0.0.1``,
``localhost`` and ``[::1]`` on the bound port, the bound address itself (unless it is a
wildcard such as ``0.0.0.0``), and the names the operator gives (``--allowed-host``).
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from taskdecomp.errors import ConfigError
from taskdecomp.server.guard import ASGIApp, Receive, Scope, Send, send_problem

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
"""The names every server answers to (on its own port)."""

WILDCARDS = ("", "0.0.0.0", "::")
"""Bind addresses that mean every interface: not names a client reaches the server by."""

DEFAULT_PORTS = {"http": 80, "https": 443}
"""The port a Host or an origin without one means, by scheme."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Authority:
    """A host name with an optional port, as in a Host header or an origin."""

    host: str
    """The name or address, lower case, IPv6 without its brackets."""
    port: int | None
    """The port; ``None``: not given (in an allowlist entry: any port)."""

    def admits(self, given: Authority) -> bool:
        """Whether this allowlist entry admits the request's ``given`` authority."""
        return self.host == given.host and self.port in (None, given.port)

    def __str__(self) -> str:
        name = f"[{self.host}]" if ":" in self.host else self.host
        return name if self.port is None else f"{name}:{self.port}"


def parse_authority(value: str) -> Authority | None:
    """``value`` (``name``, ``name:port``, ``[v6]:port``) as an authority, or ``None``."""
    text = value.strip().lower()
    if not text or any(char in text for char in "/?#@\\ \t"):
        return None
    try:
        parts = urllib.parse.urlsplit("//" + text)
        port = parts.port
    except ValueError:  # a port that is not a number, or out of range
        return None
    if not parts.hostname:
        return None
    return Authority(host=parts.hostname, port=port)


def allowed_host(name: str) -> Authority:
    """An operator's ``--allowed-host`` value.

    Raises:
        ConfigError: ``name`` is not a host name with an optional port.
    """
    found = parse_authority(name)
    if found is None or found.host.strip("[]") in WILDCARDS or "*" in found.host:
        raise ConfigError(
            f"--allowed-host {name!r} is not a host name: give NAME or NAME:PORT "
            "(e.g. --allowed-host tasks.example.com), the name clients put in the URL"
        )
    return found


def request_authority(scope: Scope) -> tuple[str | None, Authority | None]:
    """The request's Host header as given and as parsed (its port defaulted by scheme)."""
    raw = None
    for name, value in scope.get("headers", ()):
        if name == b"host":
            raw = bytes(value).decode("latin-1")
            break
    if raw is None:
        return None, None
    parsed = parse_authority(raw)
    if parsed is None:
        return raw, None
    port = parsed.port or DEFAULT_PORTS.get(str(scope.get("scheme", "http")), 80)
    return raw, Authority(host=parsed.host, port=port)


class HostAllowlist:
    """Refuse (421) a request whose Host is not a name this server answers to.

    Args:
        app: the wrapped application.
        host: the address the server is bound to.
        port: the port it is bound to; ``None``: loopback names on any port.
        names: the operator's extra names (``--allowed-host``), each ``NAME`` (any port) or
            ``NAME:PORT``.
    """

    def __init__(
        self, app: ASGIApp, *, host: str, port: int | None, names: tuple[str, ...] = ()
    ) -> None:
        self.app = app
        bound = host.strip().strip("[]").lower()
        self._wide = bound in WILDCARDS
        fixed = [*LOOPBACK_NAMES, *(() if self._wide or bound in LOOPBACK_NAMES else (bound,))]
        self._builtin = tuple(Authority(host=name, port=port) for name in fixed)
        self._allowed = (*self._builtin, *(allowed_host(name) for name in names))
        self._bound = bound

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, or answer 400 (no Host) or 421."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw, given = request_authority(scope)
        if raw is None:
            await send_problem(send, 400, "the request has no Host header; send one")
        elif given is None:
            await send_problem(send, 400, f"the Host header {raw!r} is not a host name")
        elif not any(entry.admits(given) for entry in self._allowed):
            await send_problem(send, 421, self._refusal(raw))
        else:
            await self.app(scope, receive, send)

    def _refusal(self, raw: str) -> str:
        builtin = ", ".join(str(entry) for entry in self._builtin)
        if self._wide:
            return (
                f"this server does not answer to host {raw!r}: it listens on "
                f"{self._bound or 'every address'}, and beyond {builtin} it answers only to "
                "the names given with 'taskdecomp serve --allowed-host NAME'"
            )
        return (
            f"this server does not answer to host {raw!r}; it answers to {builtin} and the "
            "names given with 'taskdecomp serve --allowed-host NAME'"
        )
