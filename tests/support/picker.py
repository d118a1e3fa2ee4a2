"""The model picker in tests: opened on its catalog tab with one pair selected, and its verdict awaited."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QtMsgType
from PySide6.QtWidgets import QTreeWidgetItem
from pytestqt.qtbot import QtBot

from specchat.ui.model_picker import ModelPickerDialog

VERDICT_TIMEOUT_MS = 60_000  # generous: the verdict thread may still be on a question of an earlier test


def verdict_in(qtbot: QtBot, dialog: ModelPickerDialog) -> str:
    """The Files tab's verdict once the verdict thread has answered the latest question (the fit and the heads
    row are in by then too)."""
    qtbot.waitUntil(lambda: not dialog.checking, timeout=VERDICT_TIMEOUT_MS)
    return dialog.verdict.text()


def assert_quiet(err: str, qtlog: Any) -> None:
    """Nothing went wrong out of sight: no traceback on stderr (``capfd``'s), no Qt warning (``qtlog``)."""
    assert "Traceback" not in err and "Signal source has been deleted" not in err, err
    bad = [r.message for r in qtlog.records if r.type in (QtMsgType.QtWarningMsg, QtMsgType.QtCriticalMsg)]
    assert not bad, bad


def catalog_pair_selected(qtbot: QtBot, key: str) -> tuple[ModelPickerDialog, QTreeWidgetItem]:
    """The dialog, shown, with catalog pair ``key`` selected once its files were checked as not downloaded."""
    dialog = ModelPickerDialog()
    qtbot.addWidget(dialog)
    dialog.show()
    tab = dialog.catalog_tab
    assert tab is not None
    dialog.tabs.setCurrentWidget(tab)
    item = tab.item_for(key)
    assert item is not None, key
    qtbot.waitUntil(lambda: item.text(tab.STATE_COLUMN) == "not downloaded")
    tab.tree.setCurrentItem(item)
    return dialog, item
