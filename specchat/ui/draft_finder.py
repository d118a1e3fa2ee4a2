""" "Find the best draft…": the advisor on a worker thread, with progress, Cancel and a ranked table.

The advisor loads its own copy of the target (and each draft in turn), so it
runs beside a loaded pair without touching the engine thread. The draft model
loaded with the target is always a candidate, and so is the automatic drafter
on it (or on the target's heads); :func:`open_finder` opens it so, for the File menu and the model picker
alike (the picker's chosen draft counts as the loaded one). "Use this" emits the chosen drafter with its
best depth and the draft to load with it: the loaded one unless the pick is
another draft file, which the button then says it unloads. The main window
applies it for that pair only, with an Undo (:class:`FinderChoice`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from specchat.core.advise import DEFAULT_BUDGET
from specchat.core.advise import payoff as backend_payoff
from specchat.core.advise.advisor import Advice, CandidateResult, advise
from specchat.core.advise.candidates import CandidateKind
from specchat.core.advise.payoff import Payoff
from specchat.core.cancel import CancelToken
from specchat.core.head_formats import head_format, head_label
from specchat.core.models.heads import heads_beside
from specchat.core.types import SpecchatError

if TYPE_CHECKING:
    from specchat.ui.controls import SpeculationControls

COLUMNS = ("Candidate", "Kind", "Accepted", "Cost", "Best depth", "Predicted", "Auto", "Measured", "Memory", "Why")


class AdvisorWorker(QObject):
    """Runs :func:`advise` on its thread; progress and the result come back as signals."""

    progress = Signal(str, float)
    finished = Signal(object)  # Advice
    failed = Signal(str)

    def __init__(
        self,
        target: str,
        budget: float,
        cancel: CancelToken,
        named: tuple[str, ...] = (),
        library: bool = True,
        loaded_draft: str = "",
        composite: bool = False,
    ) -> None:
        super().__init__()
        self.target, self.budget, self.cancel, self.named, self.library = target, budget, cancel, named, library
        self.loaded_draft, self.composite = loaded_draft, composite

    @Slot()
    def run(self) -> None:
        try:
            advice = advise(
                self.target,
                self.named,
                budget_seconds=self.budget,
                cancel=self.cancel,
                progress=self.progress.emit,
                library=self.library,
                loaded_draft=self.loaded_draft or None,
                composite=self.composite,
            )
        except SpecchatError as exc:
            self.failed.emit(str(exc))
        except Exception as exc:  # noqa: BLE001 - the dialog reports any failure in one line
            self.failed.emit(f"{type(exc).__name__}: {exc}")
        else:
            self.finished.emit(advice)


def _cell(text: str, align_right: bool = False) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
    if align_right:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return item


def row_texts(result: CandidateResult) -> list[str]:
    """The table's cells for one candidate."""
    c, p, m = result.candidate, result.prediction, result.confirmation
    loaded = c.kind is CandidateKind.DRAFT and c.source == "loaded"
    kind = c.kind.value
    if c.head and head_format(c.head) is not None:
        kind = head_label(c.head) if c.kind is not CandidateKind.CATALOG else f"catalog {c.head}"
    elif c.kind is CandidateKind.DRAFTER:
        kind = c.name
    return [
        f"{c.label} (loaded)" if loaded else c.label,
        kind,
        f"{p.acceptance:.0%}" if p else "–",
        f"{p.cost_ratio:.0%}" if p else "–",
        str(p.best_depth) if p else "–",
        f"{p.speedup:.2f}×" if p else "–",
        f"{p.auto_speedup:.2f}×" if p else "–",
        f"{m.speedup:.2f}×" if m else "–",
        f"{c.memory_bytes / 1e9:.2f} GB" if c.memory_bytes else "–",
        result.reason,
    ]


@dataclass(frozen=True)
class DrafterSetup:
    """A pair and how it drafts: what "Use this" sets, and what its Undo brings back."""

    target: str
    draft: str  # "" for the target alone
    drafter: str  # a name in specchat.core.engine.registry.DRAFTERS
    depth: int  # the slider's fixed depth (kept while Auto is on)
    auto: bool

    def same_pair(self, target: str, draft: str | None) -> bool:
        return _same_file(self.target, target) and _same_file(self.draft, draft or "")

    def same_settings(self, other: DrafterSetup) -> bool:
        return (self.drafter, self.auto) == (other.drafter, other.auto) and (self.auto or self.depth == other.depth)

    @classmethod
    def of(cls, controls: SpeculationControls, target: str, draft: str | None) -> DrafterSetup:
        return cls(
            target,
            draft or "",
            controls.drafter_kind,
            int(controls.depth_slider.value()),
            controls.auto_depth.isChecked(),
        )

    def apply(self, controls: SpeculationControls) -> None:
        """Set the drafter (where the loaded pair offers it), the depth and Auto."""
        controls.auto_depth.setChecked(self.auto)
        controls.depth_slider.setValue(self.depth)
        row = controls.drafter.findData(self.drafter)
        model = controls.drafter.model()
        if row >= 0 and model.flags(model.index(row, 0)) & Qt.ItemFlag.ItemIsEnabled:
            controls.drafter.setCurrentIndex(row)

    def describe(self, controls: SpeculationControls) -> str:
        label = controls.drafter.itemText(max(controls.drafter.findData(self.drafter), 0))
        return f"{label}, {'Auto depth' if self.auto else f'depth {self.depth}'}"


def _same_file(a: str, b: str) -> bool:
    if not a or not b:
        return a == b
    return a == b or Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


@dataclass(frozen=True)
class FinderChoice:
    """A pick applied from the finder: what it set, and what was set before (the user's own choice).

    It holds for its own pair: loading another brings ``before``'s drafter, depth and Auto back (unless
    the user changed them since), and the saved settings keep ``before``'s, never the finder's.
    """

    before: DrafterSetup
    applied: DrafterSetup


class DraftFinderDialog(QDialog):
    """Emits ``use_requested(target, draft, drafter, depth)`` when the user picks a measured candidate.

    ``loaded_draft`` is the draft model loaded with ``target`` ("" for none): it is always measured, and
    a pick that does not need another draft file keeps it loaded. ``composite`` adds the automatic drafter.
    """

    use_requested = Signal(str, str, str, int)

    def __init__(
        self,
        target: str,
        parent: QWidget | None = None,
        *,
        budget: float = DEFAULT_BUDGET,
        named: tuple[str, ...] = (),
        library: bool = True,
        loaded_draft: str = "",
        composite: bool = False,
    ) -> None:
        super().__init__(parent)
        self.target = target
        self.named, self.library = named, library
        self.loaded_draft, self.composite = loaded_draft, composite
        self.advice: Advice | None = None
        self._thread: QThread | None = None
        self._worker: AdvisorWorker | None = None
        self._cancel = CancelToken()
        self.setWindowTitle("Find the best draft")
        self.resize(980, 420)
        layout = QVBoxLayout(self)
        with_draft = f" (with <b>{Path(loaded_draft).name}</b>, measured too)" if loaded_draft else ""
        intro = QLabel(
            f"Measures every drafter that can work with <b>{Path(target).name}</b>{with_draft} on this "
            "machine: short greedy runs, then the winner against plain decoding."
        )
        intro.setWordWrap(True)
        layout.addWidget(intro)
        beside = _heads_beside(target)
        self.heads_note = QLabel(f"Heads beside it (candidates in the table): {', '.join(beside)}" if beside else "")
        self.heads_note.setWordWrap(True)
        self.heads_note.setVisible(bool(beside))
        layout.addWidget(self.heads_note)
        self.backend = QLabel("")
        self.backend.setWordWrap(True)
        self.backend.setToolTip(
            "From the verify cost by batch size that the calibration measures: "
            "speculation pays only when a batch costs much less than its tokens one by one"
        )
        layout.addWidget(self.backend)
        self.show_payoff(backend_payoff.known(target) if Path(target).is_file() else None)

        row = QHBoxLayout()
        row.addWidget(QLabel("Budget"))
        self.budget = QSpinBox()
        self.budget.setRange(5, 1800)
        self.budget.setSuffix(" s")
        self.budget.setValue(int(budget))
        row.addWidget(self.budget)
        self.start_button = QPushButton("Start")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        row.addWidget(self.start_button)
        row.addWidget(self.cancel_button)
        self.progress_bar = QProgressBar()
        self.progress_bar.setRange(0, 100)
        row.addWidget(self.progress_bar, 1)
        layout.addLayout(row)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        layout.addWidget(self.status)

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        layout.addWidget(self.table, 1)

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.use_button = buttons.addButton("Use this", QDialogButtonBox.ButtonRole.AcceptRole)
        self.use_button.setEnabled(False)
        buttons.rejected.connect(self.reject)
        self.use_button.clicked.connect(self.use_selected)
        layout.addWidget(buttons)
        self.start_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.cancel)
        self.table.itemSelectionChanged.connect(self._selection_changed)

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Run the advisor on a worker thread (a second press while it runs does nothing)."""
        if self.running:
            return
        self._cancel = CancelToken()
        self.table.setRowCount(0)
        self.advice = None
        self.progress_bar.setValue(0)
        self.status.setText("Looking for candidates…")
        thread = QThread(self)
        worker = AdvisorWorker(
            self.target,
            float(self.budget.value()),
            self._cancel,
            self.named,
            self.library,
            self.loaded_draft,
            self.composite,
        )
        worker.moveToThread(thread)
        thread.started.connect(worker.run)
        worker.progress.connect(self._on_progress)
        worker.finished.connect(self._on_finished)
        worker.failed.connect(self._on_failed)
        self._thread, self._worker = thread, worker
        self.start_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.use_button.setEnabled(False)
        thread.start()

    def cancel(self) -> None:
        """Stop at the next round; the table then shows what was measured."""
        if self.running:
            self._cancel.cancel()
            self.status.setText("Cancelling…")

    def _stop_thread(self) -> None:
        if self._thread is not None:
            self._thread.quit()
            self._thread.wait()
            self._thread.deleteLater()
        if self._worker is not None:
            self._worker.deleteLater()
        self._thread = self._worker = None
        self.start_button.setEnabled(True)
        self.cancel_button.setEnabled(False)

    def _on_progress(self, message: str, fraction: float) -> None:
        self.status.setText(message)
        self.progress_bar.setValue(round(fraction * 100))

    def _on_failed(self, message: str) -> None:
        self._stop_thread()
        self.status.setText(f"Could not finish: {message}")

    def _on_finished(self, advice: Advice) -> None:
        self._stop_thread()
        self.advice = advice
        self.progress_bar.setValue(100)
        self.show_advice(advice)

    def show_payoff(self, payoff: Payoff | None) -> None:
        """Whether speculation can pay on this backend (hidden until a calibration has said)."""
        self.backend.setText(payoff.line() if payoff is not None else "")
        self.backend.setStyleSheet("" if payoff is None or payoff.pays else "color: #b35900; font-weight: bold;")
        self.backend.setVisible(payoff is not None)

    def show_advice(self, advice: Advice) -> None:
        """Fill the table, rank order, and select the winner."""
        if advice.payoff is not None:
            self.show_payoff(advice.payoff)
        self.table.setRowCount(len(advice.results))
        for row, result in enumerate(advice.results):
            for col, text in enumerate(row_texts(result)):
                self.table.setItem(row, col, _cell(text, align_right=2 <= col <= 8))
        winner = advice.winner
        if advice.cancelled:
            self.status.setText("Cancelled: the table shows what was measured before.")
        elif winner is not None and winner.prediction is not None:
            measured = f", measured {winner.confirmation.speedup:.2f}×" if winner.confirmation else ""
            self.status.setText(
                f"Best here: {winner.candidate.label} at depth {winner.prediction.best_depth}, "
                f"predicted {winner.prediction.speedup:.2f}×{measured} over plain decoding."
            )
            self.table.selectRow(0)
        else:
            first = advice.results[0] if advice.results else None
            lost = (
                (
                    f" ({first.candidate.label} was predicted {first.speedup:.2f}× but measured "
                    f"{first.confirmation.speedup:.2f}×)"
                )
                if first is not None and first.confirmation
                else ""
            )
            why = (" " + advice.payoff.line()) if advice.payoff is not None and not advice.payoff.pays else ""
            self.status.setText(
                f"None of the candidates beats plain decoding on this machine{lost}: "
                f"plain decoding is the fastest here.{why}"
            )

    def selected(self) -> CandidateResult | None:
        rows = self.table.selectionModel().selectedRows()
        if self.advice is None or not rows:
            return None
        return self.advice.results[rows[0].row()]

    def draft_for(self, result: CandidateResult) -> str:
        """The draft file to load with the pick: its own, else the loaded one (n-gram lookup and the
        target's heads draft beside it; nothing is unloaded that the pick does not replace)."""
        return result.candidate.path or self.loaded_draft

    def unloads(self, result: CandidateResult) -> str:
        """The loaded draft's name when using ``result`` replaces it, else ""."""
        if self.loaded_draft and not _same_file(self.draft_for(result), self.loaded_draft):
            return Path(self.loaded_draft).name
        return ""

    def _selection_changed(self) -> None:
        result = self.selected()
        usable = result is not None and result.prediction is not None
        self.use_button.setEnabled(usable)
        gone = self.unloads(result) if result is not None and usable else ""
        self.use_button.setText(f"Use this (unloads {gone})" if gone else "Use this")
        self.use_button.setToolTip(
            f"Loads {Path(self.draft_for(result)).name} in place of the loaded {gone}"
            if result is not None and gone
            else "Sets this drafter and its best depth for this pair; Undo in the status bar brings back yours"
        )

    def use_selected(self) -> None:
        """Emit the selected candidate with its best depth and the draft to load with it, and close."""
        result = self.selected()
        drafter = None if result is None else result.candidate.drafter
        if result is None or result.prediction is None or drafter is None:
            return
        self.use_requested.emit(self.target, self.draft_for(result), str.__str__(drafter), result.prediction.best_depth)
        self.accept()

    def done(self, result: int) -> None:
        """Closing cancels a running advisor and waits for its thread."""
        if self.running:
            self._cancel.cancel()
            self._stop_thread()
        super().done(result)


def open_finder(target: str, draft: str, parent: QWidget) -> DraftFinderDialog:
    """The draft finder as the window opens it, from the File menu and the model picker alike: for ``target``
    with ``draft`` (the draft loaded or chosen with it, "" for none), which is always measured, and the
    automatic drafter on it (or on the target's heads)."""
    dialog = DraftFinderDialog(target, parent, loaded_draft=draft, composite=True)
    dialog.setModal(True)
    dialog.show()
    return dialog


def _heads_beside(target: str) -> list[str]:
    """``eagle3-x.gguf (EAGLE-3)`` for each head file beside ``target`` (by name only: nothing is read)."""
    from specchat.core.models.heads import sidecar_kind

    try:
        paths = heads_beside(target) if Path(target).is_file() else []
    except OSError:
        return []
    out = []
    for path in paths:
        kind = sidecar_kind(path.name)
        out.append(f"{path.name} ({head_label(kind).split()[0]})" if kind is not None else path.name)
    return out
