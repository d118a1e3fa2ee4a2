"""Remote devices: a failed Test says how many servers failed in plain words ("The server failed")."""

from __future__ import annotations

from specchat.core.runtime.remote import probe_servers
from specchat.ui.remote_devices import RemoteDevicesDialog, failure_summary
from support.rpc_servers import free_port


def _tested(qtbot, servers: list[str]) -> RemoteDevicesDialog:
    dialog = RemoteDevicesDialog(servers, probe_servers)
    qtbot.addWidget(dialog)
    dialog.test()
    qtbot.waitUntil(lambda: not dialog.testing, timeout=60_000)
    return dialog


def test_one_dead_server_is_the_server(qtbot) -> None:
    dialog = _tested(qtbot, [f"127.0.0.1:{free_port()}"])
    assert dialog.status.text() == "The server failed"
    assert dialog.results.item(0).text().startswith("✗ cannot reach the remote server at 127.0.0.1:")


def test_every_dead_server_is_all_of_them(qtbot) -> None:
    ports = {free_port() for _ in range(6)}
    dialog = _tested(qtbot, [f"127.0.0.1:{p}" for p in sorted(ports)[:3]])
    assert dialog.status.text() == "All 3 servers failed"
    assert dialog.results.count() == 3


def test_the_words_for_each_count() -> None:
    assert failure_summary(1, 1) == "The server failed"
    assert failure_summary(2, 2) == "Both servers failed"
    assert failure_summary(1, 2) == "1 of 2 servers failed"
    assert failure_summary(2, 3) == "2 of 3 servers failed"
    assert failure_summary(4, 4) == "All 4 servers failed"
