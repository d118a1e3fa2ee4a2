"""Choose a target/draft pair: by file, from the local library or from the recommended catalog.

The Recommended and On-this-computer tabs (:mod:`model_sources`) report what
was chosen through their signals; the dialog connects them to its fields and
its own signals.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from specchat.core.advise import payoff as backend_payoff
from specchat.core.head_formats import sidecar_keywords
from specchat.core.models.fit import MachineMemory, machine_memory
from specchat.core.models.heads import HeadCheck
from specchat.core.models.pair_facts import PairFacts, PairQuestion

from .draft_finder import DraftFinderDialog, open_finder
from .hub_search import HubSearchTab
from .model_sources import CatalogTab, LibraryTab, measured_text
from .pair_verdicts import PairVerdicts, shared_verdicts

log = logging.getLogger(__name__)


class PathField(QWidget):
    """A line edit with a Browse button for a GGUF file."""

    changed = Signal()

    def __init__(self, placeholder: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.edit = QLineEdit()
        self.edit.setPlaceholderText(placeholder)
        browse = QPushButton("Browse…")
        layout.addWidget(self.edit, 1)
        layout.addWidget(browse)
        browse.clicked.connect(self._browse)
        self.edit.textChanged.connect(lambda _text: self.changed.emit())

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose a GGUF model", self.edit.text(), "GGUF models (*.gguf)")
        if path:
            self.edit.setText(path)

    @property
    def path(self) -> str:
        return self.edit.text().strip()


CHECKING = "Checking the pair…"


class ModelPickerDialog(QDialog):
    """Emits ``load_requested(target, draft)``; the caller loads on the engine thread.

    The Files tab's verdict, memory fit and heads read GGUF files: they come from ``verdicts``
    (the app's verdict thread unless given) and ``verdict_shown`` says when they are in.
    """

    load_requested = Signal(str, str)
    demo_requested = Signal()
    advice_chosen = Signal(str, str, str, int)  # target, draft, drafter, depth: the draft finder's pick
    verdict_shown = Signal()

    def __init__(
        self,
        target: str = "",
        draft: str = "",
        parent: QWidget | None = None,
        *,
        n_ctx: int = 4096,
        memory: MachineMemory | None = None,
        verdicts: PairVerdicts | None = None,
    ) -> None:
        super().__init__(parent)
        self.n_ctx = n_ctx
        self.verdicts = verdicts if verdicts is not None else shared_verdicts()
        self.memory = memory if memory is not None else machine_memory()
        self.setWindowTitle("Choose models")
        self.resize(880, 520)  # the Recommended table whole (its long columns wrap); fits beside a 900x600 window
        layout = QVBoxLayout(self)
        self.tabs = QTabWidget()
        layout.addWidget(self.tabs, 1)

        files = QWidget()
        form = QFormLayout(files)
        self.target_field = PathField("target model (.gguf), the big one")
        self.draft_field = PathField("draft model (.gguf), optional, the small one")
        self.target_field.edit.setText(target)
        self.draft_field.edit.setText(draft)
        form.addRow("Target", self.target_field)
        form.addRow("Draft", self.draft_field)
        self.verdict = QLabel("")
        self.verdict.setWordWrap(True)
        form.addRow("Compatibility", self.verdict)
        self.fit = QLabel("")
        self.fit.setWordWrap(True)
        self.fit.setToolTip(
            f"Weights plus the KV cache for a {n_ctx}-token context, against this machine's "
            'free memory (GPU layers as "auto" would place them)'
        )
        form.addRow("Memory", self.fit)
        heads_row = QWidget()
        heads_layout = QHBoxLayout(heads_row)
        heads_layout.setContentsMargins(0, 0, 0, 0)
        self.heads_box = QComboBox()
        keywords = ", ".join(keyword for keyword, _ in sidecar_keywords())
        self.heads_box.setToolTip(
            "Head files found beside the target (its folder or hub snapshot), "
            f"as llama-server -hf finds them by name: {keywords}"
        )
        self.use_head_button = QPushButton("Use as draft")
        self.use_head_button.clicked.connect(self._use_head)
        heads_layout.addWidget(self.heads_box, 1)
        heads_layout.addWidget(self.use_head_button)
        self.form = form
        form.addRow("Beside it", heads_row)
        form.setRowVisible(heads_row, False)  # until the verdict thread says which heads lie beside the target
        self.heads_row = heads_row
        self.backend = QLabel("")
        self.backend.setWordWrap(True)
        self.backend.setToolTip(
            "From the draft finder's last calibration of this target on this machine: the verify cost by batch size"
        )
        form.addRow("This machine", self.backend)
        self.finder_button = QPushButton("Find the best draft…")
        self.finder_button.setToolTip("Measure every drafter that can work with this target on this machine")
        self.finder_button.clicked.connect(self.open_draft_finder)
        form.addRow("", self.finder_button)
        self.tabs.addTab(files, "Files")
        self.catalog_tab: CatalogTab | None = None
        self.library_tab: LibraryTab | None = None
        self._add_source_tabs()
        self.hub_tab = HubSearchTab(target, n_ctx, self.memory, self)
        self.hub_tab.pair_downloaded.connect(self._set_pair)
        self.tabs.addTab(self.hub_tab, "Search the hub")

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.load_button = buttons.addButton("Load pair", QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.accepted.connect(self._load_files)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.target_field.changed.connect(self._update_verdict)
        self.draft_field.changed.connect(self._update_verdict)
        self._update_verdict()
        # the button box's "Load pair" loads the Files tab's pair; the other tabs have their own buttons
        self.tabs.currentChanged.connect(lambda index: self.load_button.setVisible(index == 0))

    def _add_source_tabs(self) -> None:
        """The Recommended and On-this-computer tabs, wired to the Files tab and the dialog's signals."""
        try:
            catalog = CatalogTab(self.memory, self)
            library = LibraryTab(self, also=(self.target_field.path, self.draft_field.path))
        except Exception:  # the picker must open even if a model service breaks
            log.exception("could not list catalog/library models")
            return
        catalog.demo_chosen.connect(self._demo_chosen)
        catalog.pair_chosen.connect(self.request)
        catalog.pair_downloaded.connect(self._set_pair)
        library.file_chosen.connect(self._use_file)
        self.catalog_tab, self.library_tab = catalog, library
        self.tabs.addTab(catalog, "Recommended")
        self.tabs.addTab(library, "On this computer")

    @property
    def checking(self) -> bool:
        """Whether the Files tab's verdict is still being worked out."""
        return self.verdicts.pending(self)

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - a Qt override
        """Shown again after closing with a verdict pending (it was dropped then): ask again."""
        super().showEvent(event)
        if self.verdict.text() == CHECKING and not self.checking:
            self._update_verdict()

    def done(self, result: int) -> None:
        """Closing the dialog cancels a running download (its partial file is kept for resuming), drops the
        verdict on its way and closes a draft finder opened from here (it stops its own thread)."""
        self.verdicts.forget(self)
        for finder in self.findChildren(DraftFinderDialog):
            if finder.isVisible():
                finder.close()
        for tab in (self.catalog_tab, self.library_tab, self.hub_tab):
            if tab is not None:
                tab.stop(timeout=2.0)
        super().done(result)

    def _demo_chosen(self) -> None:
        self.demo_requested.emit()
        self.accept()

    def _set_pair(self, target: str, draft: str) -> None:
        self.target_field.edit.setText(target)
        self.draft_field.edit.setText(draft)

    def _use_file(self, role: str, path: str) -> None:
        """A file picked in the library goes to the Files tab, which shows the verdict and loads."""
        field = self.target_field if role == "target" else self.draft_field
        field.edit.setText(path)
        self.tabs.setCurrentIndex(0)

    def request(self, target: str, draft: str) -> None:
        self.load_requested.emit(target, draft)
        self.accept()

    def _load_files(self) -> None:
        if self.target_field.path:
            self.request(self.target_field.path, self.draft_field.path)

    def _update_verdict(self) -> None:
        """Ask the verdict thread about the pair in the fields; loading needs no verdict (it checks for itself)."""
        target, draft = self.target_field.path, self.draft_field.path
        self.load_button.setEnabled(bool(target))
        self.finder_button.setEnabled(bool(target) and Path(target).expanduser().is_file())
        self.verdict.setText(CHECKING)
        self.verdicts.ask(self, PairQuestion(target, draft, self.n_ctx, self.memory), self._show_facts)
        self._show_backend(target)

    def _show_facts(self, facts: PairFacts) -> None:
        """The verdict thread's answer on the pair still in the fields."""
        target, draft = self.target_field.path, self.draft_field.path
        measured = measured_text(target, draft)
        self.verdict.setText(facts.verdict + (f" · {measured}" if measured else ""))
        self.fit.setText(facts.fit)
        self._show_heads(facts.heads)
        self.verdict_shown.emit()

    def _show_heads(self, checks: tuple[HeadCheck, ...]) -> None:
        """The heads beside the target, each with its verdict; the row hides when there are none."""
        chosen = self.draft_field.path or self.heads_box.currentData()
        self.heads_box.clear()
        for check in checks:
            self.heads_box.addItem(f"{check.line()} ({check.head.path.name})", str(check.head.path))
        index = self.heads_box.findData(str(Path(chosen).expanduser())) if chosen else -1
        if index >= 0:  # keep showing the head in use (or the one picked before)
            self.heads_box.setCurrentIndex(index)
        self.form.setRowVisible(self.heads_row, bool(checks))

    def _use_head(self) -> None:
        path = self.heads_box.currentData()
        if path:
            self.draft_field.edit.setText(str(path))

    def _show_backend(self, target: str) -> None:
        """Whether speculation can pay here, as the draft finder last measured it for this target."""
        t = Path(target).expanduser() if target else None
        known = backend_payoff.known(t) if t is not None and t.is_file() else None
        self.backend.setText(known.line() if known is not None else "")
        cannot = known is not None and not known.pays
        self.backend.setStyleSheet("color: #b35900; font-weight: bold;" if cannot else "")
        self.form.setRowVisible(self.backend, known is not None)

    def open_draft_finder(self) -> DraftFinderDialog:
        """The draft finder for the chosen pair, as the File menu opens it for the loaded one: the chosen draft
        (the loaded one, unless changed here) is measured; "Use this" loads the winner through ``advice_chosen``."""
        draft = Path(self.draft_field.path).expanduser() if self.draft_field.path else None
        dialog = open_finder(
            str(Path(self.target_field.path).expanduser()),
            str(draft) if draft is not None and draft.is_file() else "",
            self,
        )
        dialog.use_requested.connect(self._use_advice)
        return dialog

    def _use_advice(self, target: str, draft: str, drafter: str, depth: int) -> None:
        self.advice_chosen.emit(target, draft, drafter, depth)
        self.accept()
