"""The "Serve on localhost" dialog: the port on 127.0.0.1, an optional API key and how many requests decode at once,
remembered in the settings."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from specchat.core.settings import DEFAULT_SERVE_PARALLEL, MAX_SERVE_PARALLEL, Settings, check_api_key
from specchat.core.types import SpecchatError

KEY_PREFIX = "sk-local-"


def new_api_key() -> str:
    """A random key in the shape editors expect of an OpenAI key (``sk-local-`` and 32 URL-safe characters)."""
    return KEY_PREFIX + secrets.token_urlsafe(24)


@dataclass(frozen=True)
class ServeChoice:
    """What the dialog was accepted with: the port, the key requests must send (None: no key), and how many
    requests decode at once beside the window's reply (1: one at a time)."""

    port: int
    api_key: str | None
    parallel: int = DEFAULT_SERVE_PARALLEL


class ServeDialog(QDialog):
    """Asks for the port, whether to require a key and how many requests decode at once; OK is refused (with one
    line) while the key is unusable."""

    def __init__(self, settings: Settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Serve on localhost")
        self.setObjectName("serve-dialog")
        intro = QLabel(
            "Serve the loaded pair over the OpenAI API on 127.0.0.1: editors and agents on this "
            "computer can use it; other machines cannot reach it."
        )
        intro.setWordWrap(True)
        self.port = QSpinBox()
        self.port.setRange(1, 65535)
        self.port.setValue(settings.serve_port)
        self.port.setToolTip("LM Studio uses 1234, Jan 1337, llama-server and `specchat serve` 8080")
        self.require_key = QCheckBox("Require an API key")
        self.require_key.setToolTip("Clients must send Authorization: Bearer KEY (401 otherwise)")
        self.key = QLineEdit(settings.serve_api_key)
        self.key.setPlaceholderText("sk-local-…")
        self.key.setMinimumWidth(360)
        self.key.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.generate = QPushButton("Generate")
        self.generate.setToolTip("A new random key (clients configured with the old one must change)")
        key_row = QHBoxLayout()
        key_row.setContentsMargins(0, 0, 0, 0)
        key_row.addWidget(self.key, 1)
        key_row.addWidget(self.generate)
        self.parallel = QSpinBox()
        self.parallel.setRange(1, MAX_SERVE_PARALLEL)
        self.parallel.setValue(settings.serve_parallel)
        self.parallel.setToolTip(
            "Requests that decode together in one batch, and your own replies join it instead of waiting "
            "(where they draft with lookup or none). 1: one at a time; each more holds a context's worth of memory."
        )
        self.url = QLabel()
        self.url.setObjectName("serve-url")
        self.problem = QLabel()
        self.problem.setObjectName("serve-problem")
        self.problem.setStyleSheet("color: #c0392b")
        self.problem.setWordWrap(True)
        self.problem.hide()
        note = QLabel(
            "Clients send the key as their API key (Authorization: Bearer …). It is kept in "
            "settings.json, so a client set up once keeps working."
        )
        note.setWordWrap(True)
        note.setEnabled(False)
        form = QFormLayout()
        form.addRow("Port:", self.port)
        form.addRow("", self.require_key)
        form.addRow("Key:", key_row)
        form.addRow("At once:", self.parallel)
        form.addRow("Base URL:", self.url)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.ok.setText("Serve")
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addLayout(form)
        layout.addWidget(self.problem)
        layout.addWidget(note)
        layout.addWidget(self.buttons)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        self.generate.clicked.connect(lambda: self.key.setText(new_api_key()))
        self.require_key.toggled.connect(self._key_toggled)
        self.key.textChanged.connect(self._check)
        self.port.valueChanged.connect(self._check)
        self.require_key.setChecked(settings.serve_require_key)
        self._key_toggled(settings.serve_require_key)

    def choice(self) -> ServeChoice:
        """The port, key and requests at once as set now (the key only when required)."""
        key = self.key.text().strip() if self.require_key.isChecked() else ""
        return ServeChoice(self.port.value(), key or None, self.parallel.value())

    def remember(self, settings: Settings) -> None:
        """Keep the port, whether a key is required, the key (also when not required) and the requests at once in
        ``settings``."""
        settings.serve_port = self.port.value()
        settings.serve_parallel = self.parallel.value()
        settings.serve_require_key = self.require_key.isChecked()
        key = self.key.text().strip()
        if not key or self._key_problem(key) == "":
            settings.serve_api_key = key

    def _key_toggled(self, on: bool) -> None:
        if on and not self.key.text().strip():
            self.key.setText(new_api_key())
        self.key.setEnabled(on)
        self.generate.setEnabled(on)
        self._check()

    def _check(self) -> None:
        choice = self.choice()
        self.url.setText(f"http://127.0.0.1:{choice.port}/v1" + ("  (key required)" if choice.api_key else ""))
        problem = ""
        if self.require_key.isChecked():
            problem = self._key_problem(self.key.text().strip())
        self.problem.setText(problem)
        self.problem.setVisible(bool(problem))
        self.ok.setEnabled(not problem)

    @staticmethod
    def _key_problem(key: str) -> str:
        if not key:
            return "Enter a key or press Generate (or untick Require an API key)."
        try:
            check_api_key(key)
        except SpecchatError as exc:
            return f"{str(exc)[0].upper()}{str(exc)[1:]}."
        return ""
