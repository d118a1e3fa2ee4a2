"""Following a streaming reply: the chat view keeps to the bottom unless the user scrolls up.

Once the user has scrolled away, a "jump to latest" button floats over the
bottom-right corner; it scrolls back and follows again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QTextBrowser, QToolButton

from . import design

FOLLOW_SLACK = 4  # pixels from the bottom that still count as "at the bottom"


class FollowScroll:
    """The view's scroll bar: following the end, the jump button, the position kept across a redraw."""

    def __init__(self, browser: QTextBrowser, moved: Callable[[], None]) -> None:
        self._browser = browser
        self._moved = moved  # called whenever the view scrolls (the hover bar's place is then stale)
        self.follow = True
        self._scrolling = False  # True while the view moves its own scroll bar
        self.jump_button = QToolButton(browser)
        self.jump_button.setText("Latest")
        self.jump_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        design.set_icon(self.jump_button, "arrow-down")
        self.jump_button.setToolTip("Jump to the latest message and follow the reply")
        self.jump_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.jump_button.setAutoFillBackground(True)
        self.jump_button.clicked.connect(self.jump_to_latest)
        self.jump_button.hide()
        bar = browser.verticalScrollBar()
        bar.rangeChanged.connect(self._on_range_changed)
        bar.valueChanged.connect(self._on_value_changed)

    def jump_to_latest(self) -> None:
        """Scroll to the end and follow the text as it arrives."""
        self.follow = True
        self.scroll_to_end()
        self.update_jump()

    def scroll_to_end(self) -> None:
        bar = self._browser.verticalScrollBar()
        self._scrolling = True
        try:
            bar.setValue(bar.maximum())
        finally:
            self._scrolling = False

    @contextmanager
    def kept(self) -> Iterator[None]:
        """Around a redraw: keep the scroll position, or the end when following."""
        bar = self._browser.verticalScrollBar()
        follow, value = self.follow, bar.value()
        self._scrolling = True
        try:
            yield
            self.follow = follow
            if not follow:
                bar.setValue(min(value, bar.maximum()))
        finally:
            self._scrolling = False
        if follow:
            self.scroll_to_end()
        self.update_jump()

    def _on_range_changed(self, _low: int, _high: int) -> None:
        if self.follow:
            self.scroll_to_end()
        self.update_jump()

    def _on_value_changed(self, value: int) -> None:
        self._moved()
        if not self._scrolling:
            self.follow = value >= self._browser.verticalScrollBar().maximum() - FOLLOW_SLACK
        self.update_jump()

    def update_jump(self) -> None:
        show = not self.follow and self._browser.verticalScrollBar().maximum() > 0
        if show:
            self.place_jump()
            self.jump_button.raise_()
        self.jump_button.setVisible(show)

    def place_jump(self) -> None:
        area = self._browser.viewport().geometry()
        size = self.jump_button.sizeHint()
        self.jump_button.setGeometry(
            area.right() - size.width() - 12, area.bottom() - size.height() - 12, size.width(), size.height()
        )
