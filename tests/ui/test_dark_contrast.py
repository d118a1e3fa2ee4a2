"""Dark theme legibility on the real window: the depth number and the unchecked check boxes stand out from the
panel (contrast measured on the palette and on the pixels drawn)."""

from __future__ import annotations

from collections import Counter

import pytest
from PySide6.QtCore import QRect
from PySide6.QtGui import QColor, QImage, QPalette
from PySide6.QtWidgets import QApplication, QCheckBox, QLineEdit, QStyle, QStyleOptionButton, QWidget

from specchat.ui.theme import contrast
from support.fake_host import window_with


def _background(image: QImage, rect: QRect) -> QColor:
    counts = Counter(
        image.pixel(x, y) for x in range(rect.left(), rect.right()) for y in range(rect.top(), rect.bottom())
    )
    return QColor.fromRgb(counts.most_common(1)[0][0])


def _strongest(image: QImage, rect: QRect, against: QColor) -> float:
    return max(
        contrast(QColor.fromRgb(image.pixel(x, y)), against)
        for x in range(rect.left(), rect.right() + 1)
        for y in range(rect.top(), rect.bottom() + 1)
    )


def _dark_window(qtbot, settings, store, *, switched: bool):
    settings.depth = 4  # Auto off: the number is the chosen depth
    settings.theme = "light" if switched else "dark"
    window, _ = window_with(qtbot, settings, store)
    window.resize(1200, 800)
    window.show()
    qtbot.waitExposed(window)
    if switched:
        window.look.set_theme("dark")
    QApplication.processEvents()
    return window


@pytest.mark.parametrize("switched", [False, True], ids=["started dark", "switched to dark"])
def test_the_depth_number_reads_on_dark_grey(qtbot, settings, store, switched: bool) -> None:
    window = _dark_window(qtbot, settings, store, switched=switched)
    controls = window.controls
    assert not controls.auto_depth.isChecked() and controls.depth_slider.isEnabled()
    label = controls.depth_slider.findChildren(QLineEdit)[0]  # superqt's number beside the slider
    assert label.text() == "4"
    text = label.palette().color(label.foregroundRole())
    panel = controls.palette().color(controls.backgroundRole())
    assert panel.lightness() < 80  # the dark theme's panel
    assert contrast(text, panel) >= 4.5
    image = controls.grab().toImage()
    rect = QRect(label.mapTo(controls, label.rect().topLeft()), label.size())
    assert _strongest(image, rect, _background(image, rect)) >= 4.5  # as drawn, not only as set


def _indicator(box: QCheckBox, root: QWidget) -> QRect:
    option = QStyleOptionButton()
    box.initStyleOption(option)
    rect = box.style().subElementRect(QStyle.SubElement.SE_CheckBoxIndicator, option, box)
    return rect.translated(box.mapTo(root, rect.topLeft()) - rect.topLeft())


@pytest.mark.parametrize("switched", [False, True], ids=["started dark", "switched to dark"])
def test_unchecked_check_boxes_are_visible_on_dark_grey(qtbot, settings, store, switched: bool) -> None:
    window = _dark_window(qtbot, settings, store, switched=switched)
    controls = window.controls
    boxes = [b for b in controls.findChildren(QCheckBox) if b.isVisible() and not b.isChecked()]
    assert controls.auto_depth in boxes
    image = controls.grab().toImage()
    panel = controls.palette().color(QPalette.ColorRole.Window)
    for box in boxes:
        rect = _indicator(box, controls)
        border = QRect(rect.left(), rect.top() + rect.height() // 2, 1, 1)  # the middle of its left edge
        assert _strongest(image, border.adjusted(-1, 0, 1, 0), panel) >= 3.0, box.text()  # WCAG, non-text


def test_contrast_is_the_wcag_ratio() -> None:
    assert contrast(QColor("black"), QColor("white")) == pytest.approx(21.0)
    assert contrast(QColor("#777777"), QColor("#777777")) == pytest.approx(1.0)
    assert contrast(QColor("#767676"), QColor("white")) == pytest.approx(4.54, abs=0.01)
