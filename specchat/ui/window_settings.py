"""The window's look and where it is kept: theme, zoom, the two looks of a reply, side panels, geometry.

Each toggle is one ``QAction`` made here (the View menu shows them); changing one sets the widget and the
setting together, and :meth:`WindowLook.store` writes the geometry back before ``settings.json`` is saved.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QByteArray, QObject
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QMainWindow, QSplitter, QWidget

from specchat.core.settings import Settings

from .chat_view import ChatView
from .composer import Composer
from .theme import apply_theme, clamp_zoom

THEMES = ("system", "light", "dark")


class WindowLook(QObject):
    """Theme, zoom, verdicts, hidden rejections, side panels and geometry, each kept in ``settings``."""

    def __init__(
        self,
        window: QMainWindow,
        settings: Settings,
        splitter: QSplitter,
        sidebar: QWidget,
        panel: QWidget,
        chat_view: ChatView,
        composer: Composer,
    ) -> None:
        super().__init__(window)
        self.window, self.settings, self.splitter = window, settings, splitter
        self.sidebar, self.panel, self.chat_view, self.composer = sidebar, panel, chat_view, composer
        self.sidebar_action = self._toggle(
            "&Conversations", "Ctrl+Shift+S", settings.sidebar_visible, self.set_sidebar_visible
        )
        self.panel_action = self._toggle(
            "&Settings panel", "Ctrl+Shift+P", settings.panel_visible, self.set_panel_visible
        )
        self.verdicts_action = self._toggle(
            "Show &verdicts inline", "Ctrl+Shift+V", settings.show_verdicts, self.set_show_verdicts
        )
        self.verdicts_action.setToolTip("The raw text with every token's fate inline, rejected drafts struck through")
        self.hide_rejected_action = self._toggle(
            "&Hide rejected tokens", "", settings.hide_rejected, self.set_hide_rejected
        )
        self.theme_actions = QActionGroup(self)
        for theme in THEMES:
            action = QAction(theme.capitalize(), self, checkable=True)
            action.setChecked(theme == settings.theme)
            action.triggered.connect(lambda _=False, t=theme: self.set_theme(t))
            self.theme_actions.addAction(action)
        apply_theme(settings.theme)
        self._base_point_size = chat_view.font().pointSizeF()
        self.set_zoom(settings.zoom)

    def _toggle(self, text: str, shortcut: str, checked: bool, slot: Callable[[bool], None]) -> QAction:
        action = QAction(text, self, checkable=True)
        if shortcut:
            action.setShortcut(QKeySequence(shortcut))
        action.setChecked(checked)
        action.toggled.connect(slot)
        return action

    def set_hide_rejected(self, hide: bool) -> None:
        self.settings.hide_rejected = hide
        self.chat_view.set_hide_rejected(hide)

    def set_show_verdicts(self, show: bool) -> None:
        """The chat view's verdict view (raw text, every fate inline) or its reading view (rendered Markdown)."""
        self.settings.show_verdicts = show
        self.chat_view.set_show_verdicts(show)

    def set_theme(self, theme: str) -> None:
        self.settings.theme = theme
        apply_theme(theme)

    def set_zoom(self, steps: int) -> None:
        """Text size of the chat and the composer, one point a step (Ctrl+plus/minus, Ctrl+0)."""
        self.settings.zoom = clamp_zoom(steps)
        size = max(6.0, self._base_point_size + self.settings.zoom)
        for widget in (self.chat_view, self.composer):
            font = widget.font()
            font.setPointSizeF(size)
            widget.setFont(font)

    def set_sidebar_visible(self, visible: bool) -> None:
        self.settings.sidebar_visible = visible
        self.sidebar.setVisible(visible)
        self.sidebar_action.setChecked(visible)

    def set_panel_visible(self, visible: bool) -> None:
        self.settings.panel_visible = visible
        self.panel.setVisible(visible)
        self.panel_action.setChecked(visible)

    def restore(self) -> None:
        """The geometry, splitter and side panels as last saved."""
        s = self.settings
        if s.window_geometry:
            self.window.restoreGeometry(QByteArray.fromBase64(s.window_geometry.encode()))
        if s.splitter_state:
            self.splitter.restoreState(QByteArray.fromBase64(s.splitter_state.encode()))
        self.set_sidebar_visible(s.sidebar_visible)
        self.set_panel_visible(s.panel_visible)

    def store(self) -> None:
        """Write the geometry and the splitter into ``settings`` (the rest is kept as it changes)."""
        self.settings.window_geometry = bytes(self.window.saveGeometry().toBase64().data()).decode()
        self.settings.splitter_state = bytes(self.splitter.saveState().toBase64().data()).decode()
