"""Server lists for remote devices: parsing (one-line errors) and the saved list."""

from __future__ import annotations

import pytest

from specchat.core.models.fit import MachineMemory, fit_pair
from specchat.core.models.shape import read_model_shape
from specchat.core.remote import MAX_SERVERS, is_loopback, parse_servers
from specchat.core.settings import (
    LEGACY_FILENAME,
    Settings,
    load_servers,
    load_settings,
    save_servers,
    save_settings,
    saved_free,
    servers_path,
    settings_path,
)
from specchat.core.types import SpecchatError


def test_servers_are_normalised_and_deduplicated() -> None:
    assert parse_servers(" 127.0.0.1:50052, gpu-box.lan:0050053,127.0.0.1:50052") == (
        "127.0.0.1:50052",
        "gpu-box.lan:50053",
    )
    assert parse_servers(["a:1", "b:2"]) == ("a:1", "b:2")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "is not HOST:PORT"),
        ("host", "is not HOST:PORT"),
        (":50052", "is not HOST:PORT"),
        ("host:", "is not HOST:PORT"),
        ("host:http", "from 1 to 65535"),
        ("host:65536", "from 1 to 65535"),
        ("::1:50052", "IPv6"),
        ("bad host:1", "not a host name"),
        ("a:1,,b:2", "is not HOST:PORT"),
    ],
)
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
    servers_path().write_text('{"remote": {"servers": ["10.0.0.2:50052", "nonsense", 7, "10.0.0.4:1"]}}')
    assert load_servers() == ("10.0.0.2:50052", "10.0.0.4:1")
    servers_path().write_text("{not json")
    assert load_servers() == ()


def test_the_old_servers_file_moves_into_settings_json_once_and_the_window_keeps_it() -> None:
    legacy = settings_path().with_name(LEGACY_FILENAME)
    legacy.parent.mkdir(parents=True, exist_ok=True)
    legacy.write_text('{"servers": ["10.0.0.2:50052"], "free_bytes": {"10.0.0.2:50052": 1024}}')
    save_settings(Settings(max_tokens=77))  # settings.json exists, without the section
    assert load_servers() == ("10.0.0.2:50052",) and saved_free() == {"10.0.0.2:50052": 1024}
    assert not legacy.exists()  # read once: the list is in settings.json now
    assert load_servers() == ("10.0.0.2:50052",)
    # A window saving its settings (loaded before the list changed) keeps the servers saved meanwhile.
    window_settings = load_settings()
    save_servers(["10.0.0.3:1"])
    save_settings(window_settings)
    assert load_servers() == ("10.0.0.3:1",) and load_settings().max_tokens == 77


def test_what_a_test_found_free_is_kept_for_the_servers_still_listed() -> None:
    save_servers(["10.0.0.2:1", "10.0.0.3:1"], free={"10.0.0.2:1": 5 << 30, "10.0.0.3:1": 7 << 30})
    save_servers(["10.0.0.3:1"])
    assert saved_free() == {"10.0.0.3:1": 7 << 30}
    servers_path().write_text('{"remote": {"servers": ["10.0.0.3:1"], "free_bytes": {"10.0.0.3:1": "lots"}}}')
    assert saved_free() == {}


def test_the_fit_verdict_puts_the_target_on_the_remote_devices(demo_pair) -> None:
    target, draft = read_model_shape(demo_pair.target), read_model_shape(demo_pair.draft)
    roomy = fit_pair(target, draft, 2048, MachineMemory(ram_free=8 << 30, gpu_free=0, remote_free=24 << 30))
    assert roomy.ok and roomy.text.startswith("✓ the target on the remote devices: about 0.6 GB of 25.8 GB free")
    assert "; the draft here: it needs about 0.1 GB of RAM; 8.6 GB is free" in roomy.text
    tight = fit_pair(target, draft, 2048, MachineMemory(ram_free=8 << 30, gpu_free=0, remote_free=1 << 30))
    assert tight.ok and "more than the remote devices' 1.1 GB free" in tight.text  # the rest fits in RAM here
    starved = fit_pair(target, None, 2048, MachineMemory(ram_free=1 << 20, gpu_free=0, remote_free=1 << 30))
    assert not starved.ok and starved.text.startswith("✗ the target needs about 0.6 GB")
