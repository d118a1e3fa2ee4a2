"""The "Remote devices" dialog: the servers that hold the target's layers, and a Test that lists their devices."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from specchat.core.remote import DEFAULT_PORT, MAX_SERVERS, RPC_BUILD_HINT, ServerReport, parse_server
from specchat.core.types import SpecchatError

Probe = Callable[[Sequence[str]], list[ServerReport]]

EXPLANATION = (
    "The target's layers go to these machines, each running <code>specchat serve-rpc</code>; the draft "
    "stays on this one. A remote CPU server lends its RAM. The protocol has no authentication: "
    "use servers on a trusted network only. Loading a pair uses the list; empty: this machine alone."
)


def failure_summary(failed: int, total: int) -> str:
    """ "The server failed", "Both servers failed", "All 3 servers failed", "2 of 3 servers failed"."""
    if total == 1:
        return "The server failed"
    if failed == total:
        return "Both servers failed" if total == 2 else f"All {total} servers failed"
    return f"{failed} of {total} servers failed"


class _Relay(QObject):
    """Carries a probe's result from its thread to the dialog's."""

    done = Signal(object)


class RemoteDevicesDialog(QDialog):
    """Edit the server list; ``accepted`` means ``servers()`` is the new one."""

    def __init__(
        self, servers: Sequence[str], probe: Probe, *, available: bool = True, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Remote devices")
        self._probe = probe
        self._relay = _Relay(self)
        self._relay.done.connect(self._show_reports)
        self.testing = False
        self.free: dict[str, int] = {}  # bytes free per server, as the latest Test found them
        layout = QVBoxLayout(self)
        note = QLabel(EXPLANATION)
        note.setWordWrap(True)
        note.setTextFormat(Qt.TextFormat.RichText)
        layout.addWidget(note)
        if not available:
            missing = QLabel(f"This llama.cpp build has no RPC backend: {RPC_BUILD_HINT}.")
            missing.setWordWrap(True)
            missing.setObjectName("rpcMissing")
            layout.addWidget(missing)
        self.list = QListWidget()
        self.list.addItems(list(servers))
        layout.addWidget(self.list, 1)
        row = QHBoxLayout()
        self.entry = QLineEdit()
        self.entry.setPlaceholderText(f"HOST:PORT, e.g. 192.168.1.20:{DEFAULT_PORT}")
        self.entry.returnPressed.connect(self.add_entry)
        self.add_button = QPushButton("Add")
        self.add_button.clicked.connect(self.add_entry)
        self.remove_button = QPushButton("Remove")
        self.remove_button.clicked.connect(self.remove_selected)
        self.test_button = QPushButton("Test")
        self.test_button.setToolTip(
            "Connect to each server (and the one typed, without adding it) and list its devices with their free memory"
        )
        self.test_button.clicked.connect(self.test)
        self.test_button.setEnabled(available)
        for widget in (self.entry, self.add_button, self.remove_button, self.test_button):
            row.addWidget(widget, 1 if widget is self.entry else 0)
        layout.addLayout(row)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.status)
        self.results = QListWidget()
        self.results.setObjectName("remoteResults")
        layout.addWidget(self.results, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.resize(560, 420)

    def servers(self) -> list[str]:
        return [self.list.item(i).text() for i in range(self.list.count())]

    def add_entry(self) -> bool:
        """Add what the entry holds (``HOST:PORT``); a bad one is said in one line and not added."""
        text = self.entry.text().strip()
        if not text:
            return False
        try:
            server = parse_server(text)
        except SpecchatError as exc:
            self.status.setText(str(exc))
            return False
        if server in self.servers():
            self.status.setText(f"{server} is already in the list")
        elif self.list.count() >= MAX_SERVERS:
            self.status.setText(f"at most {MAX_SERVERS} servers")
        else:
            self.list.addItem(server)
            self.entry.clear()
            self.status.setText("")
            return True
        return False

    def remove_selected(self) -> None:
        for item in self.list.selectedItems():
            self.list.takeItem(self.list.row(item))

    def test(self) -> None:
        """Probe every server, and the one typed in the entry (not added: Add does that), off the GUI thread."""
        servers = self.servers()
        typed = self.entry.text().strip()
        if typed:
            try:
                server = parse_server(typed)
            except SpecchatError as exc:
                self.status.setText(str(exc))
                return
            if server not in servers:
                servers.append(server)
        if not servers:
            self.status.setText("add a server first (HOST:PORT)")
            return
        self.testing = True
        self.test_button.setEnabled(False)
        self.results.clear()
        self.status.setText(f"connecting to {len(servers)} server{'s' if len(servers) != 1 else ''}…")
        relay = self._relay

        def run() -> None:
            try:
                reports = self._probe(servers)
            except SpecchatError as exc:
                reports = [ServerReport(s, error=str(exc)) for s in servers]
            try:
                relay.done.emit(reports)
            except RuntimeError:  # the dialog was closed meanwhile
                pass

        threading.Thread(target=run, daemon=True, name="remote-probe").start()

    def _show_reports(self, reports: list[ServerReport]) -> None:
        self.testing = False
        self.test_button.setEnabled(True)
        self.results.clear()
        for report in reports:
            if report.error:
                self.results.addItem(f"✗ {report.error}")
            for device in report.devices:
                self.results.addItem(f"✓ {device.summary()}")
        self.free.update({r.server: sum(d.free_bytes for d in r.devices) for r in reports if not r.error})
        failed = sum(1 for r in reports if r.error)
        total = sum(d.free_bytes for r in reports for d in r.devices)
        self.status.setText(
            failure_summary(failed, len(reports))
            if failed
            else f"{len(reports)} server{'s' if len(reports) != 1 else ''} answered: "
            f"{total / (1 << 30):.1f} GiB free in all for the target's layers"
        )
