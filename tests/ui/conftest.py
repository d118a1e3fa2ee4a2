"""UI test fixtures: any Qt warning fails the test; each window's engine shut-down and server stop is recorded."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from PySide6.QtCore import QtMsgType, qInstallMessageHandler

# Said by Qt's offscreen platform plugin on every top-level show(); not about our code.
OFFSCREEN_NOISE = {
    "This plugin does not support propagateSizeHints()",
    "This plugin does not support raise()",
    "This plugin does not support grabbing the keyboard",  # on showing a popup (the token X-ray)
}


@pytest.fixture(autouse=True)
def fail_on_qt_warnings(qapp) -> Iterator[list[str]]:
    """Record Qt warnings/criticals while the test runs and fail if there were any."""
    recorded: list[str] = []

    def handler(mode: QtMsgType, context: object, message: str) -> None:
        if message in OFFSCREEN_NOISE:
            return
        if mode in (QtMsgType.QtWarningMsg, QtMsgType.QtCriticalMsg, QtMsgType.QtFatalMsg):
            recorded.append(message)

    previous = qInstallMessageHandler(handler)
    try:
        yield recorded
    finally:
        qInstallMessageHandler(previous)
    assert not recorded, f"Qt warnings: {recorded}"


@pytest.fixture(autouse=True)
def _window_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Record who shuts a window's engine down or stops its server (support/stacks.py, ``WINDOW_CALLS``): a failure
    reports them (tests/conftest.py). Cleared afterwards, so a later test outside tests/ui reports none of them."""
    from specchat.ui.server_panel import LocalServing
    from specchat.ui.worker import WindowRuntimeHost
    from support.stacks import WINDOW_CALLS

    WINDOW_CALLS.lines.clear()
    WINDOW_CALLS.watch(monkeypatch, WindowRuntimeHost, "shutdown")
    WINDOW_CALLS.watch(monkeypatch, LocalServing, "stop")
    yield
    WINDOW_CALLS.lines.clear()


@pytest.fixture
def settings():
    from specchat.core.settings import load_settings

    return load_settings()


@pytest.fixture
def store():
    from specchat.core.chat.store import ConversationStore

    s = ConversationStore()
    yield s
    s.close()
