"""The settings panel is never clipped under its scroll bar, at 1600x1000 and 900x600, in either theme, even
after a reply widens its figures and with the splitter pushed to its narrowest."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QApplication, QWidget

from specchat.core.types import Finished, FinishReason, GenerationStats
from support.events import verified
from support.fake_host import window_with


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("size", [(1600, 1000), (900, 600)], ids=["1600x1000", "900x600"])
def test_every_child_of_the_settings_panel_fits_beside_its_scroll_bar(qtbot, settings, store, size, theme) -> None:
    settings.theme = theme
    window, host = window_with(qtbot, settings, store)
    window.resize(*size)
    window.show()
    qtbot.waitExposed(window)
    window.send("hello")
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit(
            [
                verified(0, ("Re",), ("x",), "d"),
                Finished(FinishReason.EOS, GenerationStats(rounds=1, drafted=2, accepted=1, generated=2)),
            ]
        )
    window.splitter.setSizes([160, 5000, 10])  # the panel as narrow as the splitter lets it be
    QApplication.processEvents()
    panel = window.panel
    inner = panel.widget()
    assert inner is not None
    assert panel.verticalScrollBar().isVisible() == (inner.height() > panel.viewport().height())
    width = panel.viewport().width()
    assert inner.width() <= width
    shown = [w for w in inner.findChildren(QWidget) if w.isVisibleTo(inner)]
    save = window.panel.presets.save_button
    assert save in shown and save.mapTo(inner, save.rect().topRight()).x() < width
    clipped = [
        (type(w).__name__, w.mapTo(inner, w.rect().topRight()).x())
        for w in shown
        if w.mapTo(inner, w.rect().topRight()).x() >= width
    ]
    assert clipped == []
