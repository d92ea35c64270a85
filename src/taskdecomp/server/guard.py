"""ASGI middleware that guards every request: the bearer token and the body size.

Both are plain ASGI (no buffering of responses), so event streams pass through untouched.
The token is compared in constant time and never written anywhere; the page and its
static files are served without it (they hold no data), every API path needs it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from taskdecomp.listening import bearer_matches
from taskdecomp.server.problems import MEDIA_TYPE, body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PUBLIC_PATHS = ("/", "/favicon.ico")
PUBLIC_PREFIXES = ("/static/",)


async def send_problem(
    send: Send, status: int, detail: str, headers: dict[str, str] | None = None
) -> None:
    """Answer with a problem document."""
    content = body(status, detail)
    raw = [
        (b"content-type", MEDIA_TYPE.encode()),
        (b"content-length", str(len(content)).encode()),
    ]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": content})


class BearerToken:
    """Refuse (401) an API request without ``Authorization: Bearer TOKEN``.

    Args:
        app: the wrapped application.
        token: the token; ``None`` lets every request through.
    """

    def __init__(self, app: ASGIApp, *, token: str | None) -> None:
        self.app = app
        self._token = token.encode("utf-8") if token is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, or answer 401."""
        if scope["type"] != "http" or self._token is None or _public(scope["path"]):
            await self.app(scope, receive, send)
            return
        if scope.get("method") == "OPTIONS":  # a CORS preflight carries no credentials
            await self.app(scope, receive, send)
            return
        if self._allowed(scope):
            await self.app(scope, receive, send)
            return
        await send_problem(
            send,
            401,
            "this server needs a token: send 'Authorization: Bearer TOKEN' "
            "(the value of TASKDECOMP_API_TOKEN on the server)",
            {"WWW-Authenticate": "Bearer"},
        )

    def _allowed(self, scope: Scope) -> bool:
        assert self._token is not None
        return bearer_matches(scope.get("headers", ()), self._token)


class BodyLimit:
    """Refuse (413) a request body larger than ``limit`` bytes, declared or streamed."""

    def __init__(self, app: ASGIApp, *, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, or answer 413."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                declared = bytes(value).decode("latin-1").strip()
                if not declared.isdigit() or int(declared) > self.limit:
                    await send_problem(send, 413, self._detail())
                    return
        if scope.get("method") in ("POST", "PUT", "PATCH") and not _declared(scope):
            buffered = await self._buffer(receive)
            if buffered is None:
                await send_problem(send, 413, self._detail())
                return
            receive = _replay(buffered, receive)
        await self.app(scope, receive, send)

    async def _buffer(self, receive: Receive) -> list[Message] | None:
        """A streamed body's messages, or ``None`` once it passes the limit."""
        messages: list[Message] = []
        seen = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                return messages
            seen += len(message.get("body", b""))
            if seen > self.limit:
                return None
            if not message.get("more_body", False):
                return messages

    def _detail(self) -> str:
        return f"the request body is larger than this server accepts ({self.limit} bytes)"


def _declared(scope: Scope) -> bool:
    return any(name == b"content-length" for name, _ in scope.get("headers", ()))


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


def _public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)
