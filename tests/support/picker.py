"""The model picker opened on its catalog tab with one pair selected, as a user leaves it before downloading."""

from __future__ import annotations

from PySide6.QtWidgets import QTreeWidgetItem
from pytestqt.qtbot import QtBot

from specchat.ui.model_picker import ModelPickerDialog


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
