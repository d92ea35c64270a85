"""What every HTTP endpoint of taskdecomp checks, whatever serves it (the service, ``mcp``).

Here rather than in :mod:`taskdecomp.server`, which needs FastAPI: ``taskdecomp mcp
--http`` applies the same rules without it. Listening beyond loopback needs a token, and a
request proves it holds the token with ``Authorization: Bearer TOKEN``, compared in constant
time and never logged.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable

from taskdecomp.errors import ConfigError


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (127.0.0.0/8, ::1) or ``localhost``."""
    if host.strip().strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to listen beyond loopback without a token.

    Raises:
        ConfigError: ``host`` is not a loopback address and no token is set.
    """
    if token is None and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host!r} without a token: set TASKDECOMP_API_TOKEN "
            "(clients then send 'Authorization: Bearer TOKEN'), or bind to 127.0.0.1"
        )


def bearer_matches(headers: Iterable[tuple[bytes, bytes]], token: bytes) -> bool:
    """Whether ASGI ``headers`` carry ``Authorization: Bearer TOKEN`` with this token."""
    given = b""
    for name, value in headers:
        if name == b"authorization":
            given = bytes(value)
            break
    scheme, _, credentials = given.partition(b" ")
    if scheme.lower() != b"bearer":
        credentials = b""
    return hmac.compare_digest(credentials.strip(), token)
