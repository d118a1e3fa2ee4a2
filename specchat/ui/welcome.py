"""The first-run page: offer the offline demo pair or the model picker."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont, QPalette
from PySide6.QtWidgets import QLabel, QPushButton, QVBoxLayout, QWidget

from . import design


class WelcomeView(QWidget):
    """Shown while no models are loaded."""

    demo_requested = Signal()
    picker_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.addStretch(1)
        title = QLabel("Welcome to specchat")
        design.set_font_size(title, design.HEADING_PT, QFont.Weight.DemiBold)
        title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(title)
        blurb = QLabel(
            "A small draft model guesses the next few tokens and the big target model checks them "
            "in one pass. Every guess is shown as it is accepted or rejected.\n\n"
            "Start with the offline demo pair (SmolLM2-135M, no download), or choose your own models."
        )
        blurb.setWordWrap(True)
        blurb.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(blurb)
        self.demo_button = QPushButton("Try the offline demo pair")
        self.demo_button.setDefault(True)
        self.demo_button.setObjectName(design.PRIMARY_BUTTON)
        design.set_icon(self.demo_button, "play-fill", QPalette.ColorRole.HighlightedText)
        self.picker_button = QPushButton("Choose models…")
        design.set_icon(self.picker_button, "folder-open")
        for button in (self.demo_button, self.picker_button):
            button.setMinimumWidth(260)
            layout.addWidget(button, 0, Qt.AlignmentFlag.AlignHCenter)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(self.status)
        layout.addStretch(2)
        self.demo_button.clicked.connect(lambda *_: self.demo_requested.emit())
        self.picker_button.clicked.connect(lambda *_: self.picker_requested.emit())

    def set_busy(self, busy: bool) -> None:
        self.demo_button.setEnabled(not busy)
        self.picker_button.setEnabled(not busy)
