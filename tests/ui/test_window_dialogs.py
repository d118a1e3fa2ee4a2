"""The window's dialogs over time: a closed model picker is deleted, with its workers, each time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import shiboken6
from PySide6.QtCore import QCoreApplication, QEvent, Qt, QThreadPool
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from specchat.ui.main_window import MainWindow
from specchat.ui.model_picker import ModelPickerDialog
from support.fake_host import FakeHost
from support.gguf_files import GgufMaker
from support.picker import VERDICT_TIMEOUT_MS, assert_quiet


def test_pickers_closed_three_ways_leave_nothing_behind(
    qtbot: QtBot,
    qtlog: Any,
    capfd: pytest.CaptureFixture[str],
    settings,
    store,
    make_gguf: GgufMaker,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    folder = tmp_path / "models"  # the library tab has files to scan while the picker closes
    for i in range(3):
        make_gguf(f"../models/model{i}.gguf")
    monkeypatch.setenv("SPECCHAT_MODEL_DIRS", str(folder))
    target, draft = make_gguf("target.gguf", tensor_elements=8192), make_gguf("draft.gguf")
    window = MainWindow(settings, store, host=FakeHost().as_host())
    qtbot.addWidget(window)
    settings.last_target, settings.last_draft = str(target), str(draft)  # each picker opens on a pair to judge

    closes = (
        lambda picker: picker.close(),
        lambda picker: picker.reject(),
        lambda picker: qtbot.keyClick(picker, Qt.Key.Key_Escape),
    )
    for close in closes:
        picker = window.dialogs.model_picker()
        assert picker.isVisible() and picker.checking
        close(picker)
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        assert not shiboken6.isValid(picker)
    assert window.findChildren(ModelPickerDialog) == []
    assert not [w for w in QApplication.allWidgets() if isinstance(w, ModelPickerDialog)]

    # What the closed pickers left running ends without reaching them: the scans, and the verdict thread.
    assert QThreadPool.globalInstance().waitForDone(VERDICT_TIMEOUT_MS)
    from specchat.ui.pair_verdicts import shared_verdicts

    assert shared_verdicts().wait_idle(VERDICT_TIMEOUT_MS / 1000)
    QCoreApplication.processEvents()
    assert_quiet(capfd.readouterr().err, qtlog)

    # and the next picker works as the first did
    picker = window.dialogs.model_picker()
    qtbot.waitUntil(lambda: not picker.checking, timeout=VERDICT_TIMEOUT_MS)
    assert picker.verdict.text().startswith("✓ compatible")
    picker.close()
