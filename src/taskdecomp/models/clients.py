"""The SDK clients of the remote providers, made once rather than per call.

Making an SDK client loads the CA bundle into a new TLS context
(``SSLContext.load_verify_locations``: 20 to 55 ms) and starts with no open connection, so a
provider that made one per call paid both on every call. The providers instead share
:func:`tls_context`, one per process, and keep their SDK client in a :class:`PerLoop`: one
client per event loop, made on the loop's first call and closed when the loop shuts down its
async generators (``asyncio.run`` does, and so does the engine's own loop), so a client's
connections are reused by every call of a run, and a client never outlives its loop nor is
shared between two.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    import ssl

__all__ = ["PerLoop", "tls_context"]

ClientT = TypeVar("ClientT")


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The process's TLS context, with the CA bundle loaded once.

    Built as httpx builds its default (certifi's bundle, or ``SSL_CERT_FILE`` /
    ``SSL_CERT_DIR``); a plain :class:`ssl.SSLContext`, so any SDK's HTTP client takes it as
    ``verify``.
    """
    import httpx

    return httpx.create_ssl_context()


@dataclass(kw_only=True, slots=True)
class _Kept(Generic[ClientT]):
    client: ClientT
    closed: bool = False


class PerLoop(Generic[ClientT]):
    """One client per event loop, made on the loop's first call, closed when the loop ends.

    Args:
        make: makes a client; called without suspending, so two calls never race to make one.
        close: closes a client made by ``make``.
    """

    def __init__(
        self, make: Callable[[], ClientT], close: Callable[[ClientT], Awaitable[None]]
    ) -> None:
        self._make = make
        self._close = close
        self._kept: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[_Kept[ClientT], AsyncGenerator[None, None]]
        ] = weakref.WeakKeyDictionary()

    async def get(self) -> ClientT:
        """The running loop's client, made now when it has none (or its last one closed)."""
        loop = asyncio.get_running_loop()
        found = self._kept.get(loop)
        if found is not None and not found[0].closed:
            return found[0].client
        kept = _Kept(client=self._make())
        keeper = self._keep(kept, weakref.ref(loop))
        self._kept[loop] = (kept, keeper)
        await anext(keeper)  # the loop now knows the generator and closes it when it ends
        return kept.client

    async def _keep(
        self, kept: _Kept[ClientT], loop: weakref.ref[asyncio.AbstractEventLoop]
    ) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            kept.closed = True
            ended = loop()
            if ended is not None:  # the generator holds its loop: let both go
                self._kept.pop(ended, None)
            await self._close(kept.client)
