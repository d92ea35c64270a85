"""Host names and origins as the guards read them: parsed strictly, never raising."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taskdecomp.errors import ConfigError
from taskdecomp.server.hosts import Authority, allowed_host, parse_authority


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("127.0.0.1:8000", Authority(host="127.0.0.1", port=8000)),
        ("LocalHost:8000", Authority(host="localhost", port=8000)),
        ("[::1]:8000", Authority(host="::1", port=8000)),
        ("tasks.example", Authority(host="tasks.example", port=None)),
        ("tasks.example:", Authority(host="tasks.example", port=None)),
    ],
)
def test_host_headers_parse(value: str, expected: Authority) -> None:
    assert parse_authority(value) == expected
    assert parse_authority(str(expected)) == expected


@pytest.mark.parametrize(
    "value",
    ["", ":8000", "evil.example:http", "evil.example:99999", "a b", "user@evil.example",
     "evil.example/path", "http://evil.example"],
)  # fmt: skip
def test_what_is_not_a_host_is_refused(value: str) -> None:
    assert parse_authority(value) is None


@given(st.text(max_size=60))
def test_parsing_never_raises(value: str) -> None:
    found = parse_authority(value)
    assert found is None or (found.host and found.host == found.host.lower())


@pytest.mark.parametrize("name", ["http://tasks.example/", "0.0.0.0", "*.example", "", "a b"])
def test_an_allowed_host_must_be_a_name(name: str) -> None:
    with pytest.raises(ConfigError, match=r"--allowed-host .* is not a host name"):
        allowed_host(name)
