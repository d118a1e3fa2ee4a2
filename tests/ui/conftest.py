"""UI test fixtures: any Qt warning fails the test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from PySide6.QtCore import QtMsgType, qInstallMessageHandler


@pytest.fixture(autouse=True)
def fail_on_qt_warnings(qapp) -> Iterator[list[str]]:  # noqa: ANN001 - pytest-qt fixture
    """Record Qt warnings/criticals while the test runs and fail if there were any."""
    recorded: list[str] = []

    def handler(mode: QtMsgType, context: object, message: str) -> None:
        if mode in (QtMsgType.QtWarningMsg, QtMsgType.QtCriticalMsg, QtMsgType.QtFatalMsg):
            recorded.append(message)

    previous = qInstallMessageHandler(handler)
    try:
        yield recorded
    finally:
        qInstallMessageHandler(previous)
    assert not recorded, f"Qt warnings: {recorded}"
