"""The "Remote devices" setting: a server list kept beside the settings, and a Test against a real server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from specchat.core.runtime.remote import probe_servers
from specchat.core.settings import load_servers
from specchat.ui.main_window import MainWindow
from specchat.ui.remote_devices import RemoteDevicesDialog
from support.fake_host import FakeHost
from support.rpc_servers import RpcServer, free_port


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RpcServer]:
    running = RpcServer(tmp_path)
    yield running
    running.kill()


def test_test_lists_each_servers_devices_and_a_dead_one_in_one_line(qtbot, server: RpcServer) -> None:
    dead = f"127.0.0.1:{free_port()}"
    dialog = RemoteDevicesDialog([server.endpoint], probe_servers)
    qtbot.addWidget(dialog)
    dialog.entry.setText(dead)
    dialog.test()  # tests the typed server too, without adding it
    assert dialog.servers() == [server.endpoint] and dialog.entry.text() == dead
    qtbot.waitUntil(lambda: not dialog.testing, timeout=60_000)
    rows = [dialog.results.item(i).text() for i in range(dialog.results.count())]
    assert len(rows) == 2, rows
    assert rows[0].startswith(f"✓ RPC0 at {server.endpoint}: ") and "GiB free" in rows[0]
    assert rows[1] == f"✗ cannot reach the remote server at {dead}: Connection refused"
    assert dialog.status.text() == "1 of 2 servers failed"
    assert dialog.free[server.endpoint] > 1 << 28 and dead not in dialog.free


def test_a_bad_entry_is_refused_in_one_line(qtbot) -> None:
    dialog = RemoteDevicesDialog([], probe_servers)
    qtbot.addWidget(dialog)
    for text, expected in (
        ("example.org", "is not HOST:PORT"),
        ("10.0.0.1:0", "from 1 to 65535"),
        ("[::1]:50052", "IPv6"),
    ):
        dialog.entry.setText(text)
        assert not dialog.add_entry()
        assert expected in dialog.status.text() and "\n" not in dialog.status.text()
    assert dialog.servers() == []
    dialog.test()  # the typed address is tested too: a bad one is refused the same way
    assert "IPv6" in dialog.status.text() and not dialog.testing
    dialog.entry.clear()
    dialog.test()
    assert dialog.status.text() == "add a server first (HOST:PORT)" and not dialog.testing


def test_the_window_keeps_the_list_and_loads_with_it(qtbot, settings, store) -> None:
    window = MainWindow(settings, store, host=FakeHost().as_host())
    qtbot.addWidget(window)
    assert window.loader.options().rpc_servers == ()
    dialog = window.dialogs.remote_devices()
    dialog.entry.setText("192.168.1.20:50052")
    assert dialog.add_entry()
    dialog.accept()
    assert load_servers() == ("192.168.1.20:50052",)
    assert window.loader.options().rpc_servers == ("192.168.1.20:50052",)
    assert "next load" in window.statusBar().currentMessage()
    window.dialogs.set_remote_servers(["192.168.1.20:50052"], {"192.168.1.20:50052": 40 << 30})
    picker = window.dialogs.model_picker()  # the fit verdict counts what the latest Test found free there
    assert picker.memory.remote_free == 40 << 30
    picker.close()
    reopened = MainWindow(settings, store, host=FakeHost().as_host())
    qtbot.addWidget(reopened)
    assert reopened.loader.remote_servers == ("192.168.1.20:50052",)
    dialog = reopened.dialogs.remote_devices()
    dialog.list.setCurrentRow(0)
    dialog.remove_selected()
    dialog.accept()
    assert load_servers() == () and reopened.loader.options().rpc_servers == ()
