"""Emitting signals many times must not drain references to True (PySide6 6.12 emit bug)."""

from __future__ import annotations

import sys

from PySide6.QtCore import QObject, Signal

from specchat.ui.signals import emit


class Pinger(QObject):
    ping = Signal(list)


def test_emit_keeps_the_reference_count_of_true(qtbot) -> None:  # noqa: ANN001
    pinger = Pinger()
    got: list[list[int]] = []
    pinger.ping.connect(got.append)
    before = sys.getrefcount(True)
    for i in range(500):
        emit(pinger.ping, [i])
    assert len(got) == 500
    assert sys.getrefcount(True) >= before - 20  # without the repair it drops by 500
