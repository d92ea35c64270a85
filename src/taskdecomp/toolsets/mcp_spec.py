"""Which MCP server a toolset is, and how its ``--tools`` text reads.

``mcp:[OPTIONS] COMMAND ARGS...`` launches a server over stdio (the text after ``mcp:`` is
split like a shell line); ``mcp+http://HOST/PATH [OPTIONS]`` and ``mcp+https://...`` reach
one over streamable HTTP. Options are taskdecomp's, not the server's: they come before the
command, or after the URL, and each is one ``--NAME=VALUE`` word:

- ``--prefix=fs``: the tools are named ``fs_read_file``, ... (two servers that offer one name);
- ``--side-effects=TOOL=CLASS``: ``read_only``, ``idempotent`` or ``unsafe`` instead of what
  the tool's annotations say;
- ``--needs-approval=TOOL``: pause the run for a human before each call of TOOL;
- ``--timeout=SECONDS``: end a call that takes longer with ``tool_timeout:<name>``;
- ``--env=NAME=VALUE`` or ``--env=NAME`` (copied from this environment), ``--cwd=DIR``: the
  stdio server's environment and directory (this one when not given: the stored text says
  which, so a resume from elsewhere starts the server where the run did);
- ``--header=NAME:VALUE``: an HTTP header.

A value may name variables as ``${NAME}``, read when the server is started or reached: the
text is stored with a run, the variable's value is not. A value written out in full is
stored as written. Every ``--env`` and ``--header`` value, as the server receives it, is a
secret to the redactor (:func:`taskdecomp.redact.declare_value`): a server that repeats it
in an answer or an error does not put it in the run's events, trace or messages.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, get_args

from taskdecomp.errors import ToolsetError
from taskdecomp.tools import SideEffects

if TYPE_CHECKING:
    from taskdecomp.tools import Toolset

STDIO_SCHEME = "mcp"
HTTP_SCHEMES = ("mcp+http", "mcp+https")
OPTIONS = ("prefix", "side-effects", "needs-approval", "timeout", "env", "cwd", "header")
"""The ``--NAME=VALUE`` options of an MCP ``--tools`` value."""

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_UNSAFE_IN_URL = re.compile(r"[\s'\"\\]")


@dataclass(frozen=True, kw_only=True)
class MCPServer:
    """An MCP server whose tools a run may call: launched over stdio, or reached by URL.

    ``tools=[MCPServer(command="npx", args=["-y", "@modelcontextprotocol/server-memory"]),
    my_function]`` gives a run the server's tools beside a function's. One session per
    server and process serves every call and every run (see :mod:`taskdecomp.toolsets.mcp`).

    Args:
        command: the program that runs the server over stdio.
        args: its arguments.
        env: variables for it, over the SDK's safe defaults (``PATH``, ``HOME``, ...); a
            value may hold ``${NAME}``, read from this process's environment at launch.
            A value written out is stored with a run's toolset text: put secrets in
            ``${NAME}``. Every value is redacted from what a run records.
        cwd: its working directory; default (and a relative one is taken from) this
            process's, when the server is described.
        url: a streamable HTTP endpoint (``http://`` or ``https://``) instead of a command,
            with no whitespace, quotes or backslashes (percent-encode them).
        headers: HTTP headers for ``url``; values may hold ``${NAME}`` too, and are
            redacted as ``env`` values are.
        prefix: names the tools ``PREFIX_tool``, so two servers may offer one name.
        side_effects: a side-effect class per tool (by the server's name for it), over the
            one its annotations give (``readOnlyHint``: ``read_only``, ``idempotentHint``:
            ``idempotent``, else ``unsafe``).
        needs_approval: tools (by the server's names) that a human approves before each call.
        timeout: seconds before a call ends with ``tool_timeout:<name>``; default none.

    Raises:
        ToolsetError: neither or both of ``command`` and ``url``, or an option out of range.
    """

    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    prefix: str | None = None
    side_effects: Mapping[str, SideEffects] = field(default_factory=dict)
    needs_approval: frozenset[str] = frozenset()
    timeout: float | None = None

    def __post_init__(self) -> None:
        """Normalize the collections and refuse what cannot be a server."""
        object.__setattr__(self, "args", tuple(str(arg) for arg in self.args))
        object.__setattr__(self, "env", dict(self.env))
        object.__setattr__(self, "headers", dict(self.headers))
        object.__setattr__(self, "side_effects", dict(self.side_effects))
        object.__setattr__(self, "needs_approval", frozenset(self.needs_approval))
        if (self.command is None) == (self.url is None):
            raise ToolsetError("an MCP server needs exactly one of command= and url=")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ToolsetError(f"MCP server url {self.url!r} must start with http:// or https://")
        if self.url is not None and _UNSAFE_IN_URL.search(self.url):
            raise ToolsetError(
                f"MCP server url {self.url!r} has whitespace, a quote or a backslash; "
                "percent-encode it"
            )
        if self.url is not None and (self.args or self.env or self.cwd):
            raise ToolsetError("args=, env= and cwd= are for a command, not a url")
        if self.command is not None and self.headers:
            raise ToolsetError("headers= are for a url, not a command")
        if self.command is not None:  # relative paths of the command mean this directory
            object.__setattr__(self, "cwd", os.path.abspath(self.cwd or os.getcwd()))
        if self.prefix is not None and not _NAME.match(self.prefix):
            raise ToolsetError(
                f"MCP prefix {self.prefix!r} must be letters, digits and _ (e.g. 'fs')"
            )
        classes = get_args(SideEffects)
        for name, kind in self.side_effects.items():
            if kind not in classes:
                raise ToolsetError(
                    f"side effects of MCP tool {name!r} must be one of {', '.join(classes)}, "
                    f"not {kind!r}"
                )
        if self.timeout is not None and not (math.isfinite(self.timeout) and self.timeout > 0):
            raise ToolsetError(f"MCP timeout must be positive seconds, got {self.timeout!r}")

    @property
    def key(self) -> tuple[Any, ...]:
        """What one session serves: the launch command or the URL, and what reaches it."""
        return (
            self.command,
            self.args,
            tuple(sorted(self.env.items())),
            self.cwd,
            self.url,
            tuple(sorted(self.headers.items())),
        )

    @property
    def label(self) -> str:
        """The server in a message or a log file's name: its command line or its URL."""
        if self.url is not None:
            return self.url
        return shlex.join([self.command or "", *self.args])

    @property
    def source(self) -> str:
        """The ``--tools`` text of this server, which :func:`parse` reads back."""
        words = [f"--prefix={self.prefix}"] if self.prefix else []
        words += [f"--side-effects={name}={kind}" for name, kind in self.side_effects.items()]
        words += [f"--needs-approval={name}" for name in sorted(self.needs_approval)]
        if self.timeout is not None:
            words.append(f"--timeout={self.timeout:g}")
        words += [f"--header={name}:{value}" for name, value in self.headers.items()]
        if self.url is not None:  # not quoted: the scheme must lead the text (no quotes in it)
            return " ".join([f"mcp+{self.url}", *map(shlex.quote, words)])
        words += [f"--env={name}={value}" for name, value in self.env.items()]
        if self.cwd is not None:
            words.append(f"--cwd={self.cwd}")
        return "mcp:" + shlex.join([*words, self.command or "", *self.args])

    def tool_name(self, name: str) -> str:
        """What the planner calls the server's tool ``name``."""
        return f"{self.prefix}_{name}" if self.prefix else name

    def launch_env(self) -> dict[str, str]:
        """:attr:`env` with its ``${NAME}`` references read from this environment.

        Every value is declared a secret to the redactor (see the module docstring).

        Raises:
            ToolsetError: a variable it names is not set.
        """
        return {
            name: _secret(expand(value, what=f"--env {name}")) for name, value in self.env.items()
        }

    def launch_headers(self) -> dict[str, str]:
        """:attr:`headers` with their ``${NAME}`` references read from this environment.

        Every value is declared a secret to the redactor, as :meth:`launch_env`'s are.

        Raises:
            ToolsetError: a variable one names is not set.
        """
        return {
            name: _secret(expand(value, what=f"--header {name}"))
            for name, value in self.headers.items()
        }

    def __taskdecomp_toolset__(self) -> Toolset:
        """The server's tools (starting its session when it has none yet)."""
        from taskdecomp.toolsets.mcp import mcp_toolset

        return mcp_toolset(self)


def expand(value: str, *, what: str) -> str:
    """``value`` with each ``${NAME}`` replaced by the variable's value.

    Each value read is declared a secret to the redactor: it was read for a server's
    credentials or environment, whatever the variable's name says.

    Raises:
        ToolsetError: a variable it names is not set.
    """

    def lookup(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise ToolsetError(f"{what} names ${{{name}}}, which is not set in the environment")
        return _secret(os.environ[name])

    return _VARIABLE.sub(lookup, value)


def _secret(value: str) -> str:
    """``value``, declared a secret to the redactor (a Bearer header's token on its own too)."""
    from taskdecomp.redact import declare_value

    declare_value(value)
    scheme, _, token = value.partition(" ")
    if scheme.lower() in ("bearer", "basic", "token") and token.strip():
        declare_value(token.strip())
    return value


def parse(scheme: str, rest: str) -> MCPServer:
    """The server a ``--tools`` value names: ``scheme`` is ``mcp``, ``mcp+http`` or ``mcp+https``.

    Raises:
        ToolsetError: the text names no server, or an option is unknown or malformed.
    """
    try:
        words = shlex.split(rest)
    except ValueError as exc:
        raise ToolsetError(f"--tools {scheme}:{rest!r} does not split into words: {exc}") from None
    if scheme == STDIO_SCHEME:
        count = next((n for n, word in enumerate(words) if not word.startswith("--")), len(words))
        options, launch = words[:count], words[count:]
        if not launch:
            raise ToolsetError(
                f"--tools {scheme}:{rest!r} names no command; write mcp:COMMAND ARGS..., "
                "e.g. mcp:npx -y @modelcontextprotocol/server-memory"
            )
        return MCPServer(command=launch[0], args=tuple(launch[1:]), **_options(options, scheme))
    url = words[0] if words else ""
    if not url.startswith("//") or len(url) < 3:
        raise ToolsetError(f"--tools {scheme}:{rest!r} names no server; write {scheme}://HOST/PATH")
    return MCPServer(url=f"{scheme[4:]}:{url}", **_options(words[1:], scheme))


def _options(words: Iterable[str], scheme: str) -> dict[str, Any]:
    """The keyword arguments of :class:`MCPServer` the ``--NAME=VALUE`` words give."""
    found: dict[str, Any] = {}
    stdio = scheme == STDIO_SCHEME
    for word in words:
        name, sep, value = word[2:].partition("=")
        if not word.startswith("--") or name not in OPTIONS or not sep or not value:
            raise ToolsetError(
                f"MCP option {word!r} is not --NAME=VALUE with NAME one of "
                f"{', '.join(OPTIONS)} ({'before the command' if stdio else 'after the URL'})"
            )
        if (name in ("env", "cwd") and not stdio) or (name == "header" and stdio):
            raise ToolsetError(
                f"MCP option --{name} is for {'a URL' if stdio else 'a command'}, not {scheme}:"
            )
        _add_option(found, name, value, word)
    return found


def _add_option(found: dict[str, Any], name: str, value: str, word: str) -> None:
    if name == "prefix":
        found["prefix"] = value
    elif name == "cwd":
        found["cwd"] = value
    elif name == "timeout":
        try:
            found["timeout"] = float(value)
        except ValueError:
            raise ToolsetError(f"MCP option {word!r}: the timeout must be seconds") from None
    elif name == "needs-approval":
        found["needs_approval"] = found.get("needs_approval", frozenset()) | {value}
    else:
        separator = ":" if name == "header" else "="
        key, sep, item = value.partition(separator)
        if name == "env" and not sep:  # --env=NAME: the value this process has
            key, item = value, f"${{{value}}}"
        elif not sep or not key:
            raise ToolsetError(f"MCP option {word!r} is not --{name}=NAME{separator}VALUE")
        field_name = {"env": "env", "header": "headers", "side-effects": "side_effects"}[name]
        found.setdefault(field_name, {})[key.strip()] = item.strip() if name == "header" else item


__all__ = ["HTTP_SCHEMES", "OPTIONS", "STDIO_SCHEME", "MCPServer", "expand", "parse"]
