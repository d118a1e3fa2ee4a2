"""Server lists for remote devices: parsing (one-line errors) and the saved list."""

from __future__ import annotations

import pytest

from specchat.core.remote import MAX_SERVERS, is_loopback, load_servers, parse_servers, save_servers, servers_path
from specchat.core.types import SpecchatError


def test_servers_are_normalised_and_deduplicated() -> None:
    assert parse_servers(" 127.0.0.1:50052, gpu-box.lan:0050053,127.0.0.1:50052") == (
        "127.0.0.1:50052", "gpu-box.lan:50053")
    assert parse_servers(["a:1", "b:2"]) == ("a:1", "b:2")


@pytest.mark.parametrize(("text", "expected"), [
    ("", "is not HOST:PORT"),
    ("host", "is not HOST:PORT"),
    (":50052", "is not HOST:PORT"),
    ("host:", "is not HOST:PORT"),
    ("host:http", "from 1 to 65535"),
    ("host:65536", "from 1 to 65535"),
    ("::1:50052", "IPv6"),
    ("bad host:1", "not a host name"),
    ("a:1,,b:2", "is not HOST:PORT"),
])
def test_bad_servers_are_one_line(text: str, expected: str) -> None:
    with pytest.raises(SpecchatError, match=expected) as info:
        parse_servers(text)
    assert "\n" not in str(info.value)


def test_too_many_servers() -> None:
    with pytest.raises(SpecchatError, match=f"at most {MAX_SERVERS}"):
        parse_servers([f"10.0.0.{i}:1" for i in range(MAX_SERVERS + 1)])


def test_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.2")


def test_the_saved_list_round_trips_and_bad_entries_are_skipped() -> None:
    assert load_servers() == ()
    save_servers(["10.0.0.2:50052", "10.0.0.3:50052"])
    assert load_servers() == ("10.0.0.2:50052", "10.0.0.3:50052")
    servers_path().write_text('{"servers": ["10.0.0.2:50052", "nonsense", 7, "10.0.0.4:1"]}')
    assert load_servers() == ("10.0.0.2:50052", "10.0.0.4:1")
    servers_path().write_text("{not json")
    assert load_servers() == ()
