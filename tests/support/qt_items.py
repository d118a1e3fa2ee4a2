"""Items of Qt's item views by position, for tests: each must exist (Qt answers None past the end)."""

from __future__ import annotations

from PySide6.QtGui import QAction, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import QComboBox, QMenu, QTableWidget, QTableWidgetItem, QTreeWidget, QTreeWidgetItem


def tree_row(tree: QTreeWidget, index: int) -> QTreeWidgetItem:
    """Top-level row ``index`` of ``tree``."""
    item = tree.topLevelItem(index)
    assert item is not None, index
    return item


def table_cell(table: QTableWidget, row: int, column: int) -> QTableWidgetItem:
    """The item at ``row``, ``column`` of ``table``."""
    item = table.item(row, column)
    assert item is not None, (row, column)
    return item


def combo_row(combo: QComboBox, row: int) -> QStandardItem:
    """Row ``row`` of a combo box on its default model (a ``QStandardItemModel``: rows can be disabled)."""
    model = combo.model()
    assert isinstance(model, QStandardItemModel), model
    item = model.item(row)
    assert item is not None, row
    return item


def menu_of(action: QAction) -> QMenu:
    """The menu ``action`` opens, which it must have (PySide6 types ``QAction.menu()`` as a QObject)."""
    menu = action.menu()
    assert isinstance(menu, QMenu), action.text()
    return menu
