"""Numeric fields, combo boxes and sliders take the mouse wheel only once focused.

A scrolling panel full of spin boxes otherwise changes whatever field passes
under the pointer (the context size jumped from 4096 to 262144 while a user
scrolled the settings panel). Guarded widgets get focus by click or Tab only,
and a wheel over an unfocused one scrolls the panel around it instead.
"""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QEvent, QObject, Qt
from PySide6.QtWidgets import QAbstractScrollArea, QAbstractSlider, QAbstractSpinBox, QComboBox, QWidget

GUARDED = (QAbstractSpinBox, QComboBox, QAbstractSlider)


class WheelGuard(QObject):
    """An event filter: a wheel over an unfocused guarded widget goes to the scroll area holding it."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - a Qt override
        if event.type() != QEvent.Type.Wheel or not isinstance(watched, QWidget):
            return False
        if watched.hasFocus():
            return False  # the user clicked into it: the wheel changes its value, as usual
        area = _scroll_area(watched)
        if area is not None:
            QCoreApplication.sendEvent(area.viewport(), event)
        return True


def _scroll_area(widget: QWidget) -> QAbstractScrollArea | None:
    parent = widget.parentWidget()
    while parent is not None:
        if isinstance(parent, QAbstractScrollArea):
            return parent
        parent = parent.parentWidget()
    return None


def guard_wheel(root: QWidget) -> WheelGuard:
    """Guard every spin box, combo box and slider under ``root`` (and ``root`` itself)."""
    guard = WheelGuard(root)
    widgets = root.findChildren(QWidget)
    if isinstance(root, GUARDED):
        widgets.append(root)
    for widget in widgets:
        if isinstance(widget, GUARDED):
            if widget.focusPolicy() == Qt.FocusPolicy.WheelFocus:
                widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # a wheel no longer gives it focus
            widget.installEventFilter(guard)
    return guard
