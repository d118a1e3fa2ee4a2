"""The model picker's Recommended and On-this-computer tabs; they talk to the dialog only through signals.

Slow work (checking the hub cache, scanning folders, downloading) runs in
superqt workers on Qt's thread pool. Results come back through the worker's
signals and download progress through the tab's own ``progressed`` signal;
both are emitted on the worker's thread and delivered on the GUI thread, so no
widget is touched from another thread. The logic itself lives in
:mod:`specchat.core.models.pairs` and :mod:`specchat.core.models.library`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QRect, QSize, Qt, QThreadPool, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)
from superqt.utils import FunctionWorker, create_worker

from specchat.core.advise import cache as advice_cache
from specchat.core.cancel import CancelToken
from specchat.core.engine.registry import head_drafters
from specchat.core.head_formats import sidecar_keywords
from specchat.core.models.catalog import CatalogPair, expected_speedup, load_catalog
from specchat.core.models.download import UNVERIFIED_NOTE, DownloadProgress, format_bytes
from specchat.core.models.fit import MachineMemory, fit_estimate
from specchat.core.models.library import LibraryEntry, scan, with_files
from specchat.core.models.naming import display_name, source_label
from specchat.core.models.pairs import (
    PairOnDisk,
    download_pair,
    downloads,
    find_downloaded,
    pair_on_disk,
    short_verdict,
)
from specchat.core.types import SpecchatError

log = logging.getLogger(__name__)


SIDECARS_TIP = (
    "Sidecars are small drafter files published beside a model in its repository: MTP layers, or an EAGLE-3, "
    "DFlash or DSpark head trained for that model. With one loaded as the draft the target drafts from its own "
    "hidden states, often faster than a separate draft model. Ticked, the download also fetches those beside the "
    "pair's target (files named " + ", ".join(keyword for keyword, _ in sidecar_keywords()) + "…, as "
    "llama-server -hf finds them); unticked, only the target and its draft are fetched and the status line says "
    "which sidecars the repository offers. Most repositories have none."
)


def _error_line(exc: BaseException) -> str:
    """One line for a failed job: a SpecchatError says what to do; anything else is logged in full."""
    if isinstance(exc, SpecchatError):
        text = str(exc)
    else:
        log.error("background job failed", exc_info=exc)
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


def _start_worker(
    func: Callable[[], Any], returned: Callable[[Any], None], errored: Callable[[Exception], None]
) -> FunctionWorker[Any]:
    """``func()`` in a superqt worker; its result or exception comes to ``returned`` / ``errored``.

    The global pool grows by one thread when it is full: a download must not
    wait behind a long folder scan on a machine with few cores.
    """
    pool = QThreadPool.globalInstance()
    if pool.activeThreadCount() >= pool.maxThreadCount():
        pool.setMaxThreadCount(pool.activeThreadCount() + 1)
    worker: FunctionWorker[Any] = create_worker(func, _connect={"returned": returned, "errored": errored})
    return worker


def _stop_worker(worker: FunctionWorker[Any] | None, timeout: float) -> None:
    """Ask ``worker`` to quit (no result is delivered) and wait up to ``timeout`` s for it to end."""
    if worker is None:
        return
    worker.quit()
    deadline = time.monotonic() + timeout
    while worker.is_running and time.monotonic() < deadline:
        time.sleep(0.02)


class CatalogTab(QWidget):
    """Recommended pairs: the offline demo loads at once, others download first.

    A pair whose files are on disk (downloaded now or earlier) shows its
    compatibility verdict in the *On this computer* column and loads from there.
    """

    demo_chosen = Signal()
    pair_chosen = Signal(str, str)  # target, draft on disk: load them
    pair_downloaded = Signal(str, str)  # target, draft just downloaded (loading is the next click)
    download_failed = Signal(str)  # one line: the error, or that the download was cancelled
    progressed = Signal(str, int, int)  # "role: file", bytes done, total (0 = unknown); from the worker

    COLUMNS = ("Pair", "Drafter", "Download", "Memory", "Speed-up", "On this computer", "Good for")
    DRAFTER_COLUMN, MEMORY_COLUMN, SPEEDUP_COLUMN, STATE_COLUMN, GOOD_FOR_COLUMN = 1, 3, 4, 5, 6

    def __init__(self, memory: MachineMemory, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.pairs = list(load_catalog())
        self.downloaded: dict[str, tuple[str, str]] = {}  # pair id -> (target, draft) paths on disk
        self.verdicts: dict[str, str] = {}  # pair id -> full verdict of the files on disk
        self.downloading: str | None = None  # pair id of the running download
        self.worker: FunctionWorker[Any] | None = None  # the running download
        self._steps: dict[str, str] = {}  # role -> "target (1 of 2)" ..., for the status line
        self.cancel = CancelToken()
        layout = QVBoxLayout(self)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(self.COLUMNS)
        self.tree.setRootIsDecorated(False)
        self.tree.setWordWrap(True)  # "Good for" wraps in full rather than being cut off
        self.tree.setUniformRowHeights(False)
        # Every column shows whole at the dialog's width: the long ones (the pair, the speed-up and what it is
        # good for) wrap instead of running off to a horizontal scroll bar.
        self.tree.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.tree.setTextElideMode(Qt.TextElideMode.ElideNone)
        header = self.tree.header()
        header.setStretchLastSection(False)
        chars = self.tree.fontMetrics().averageCharWidth()
        for column in range(len(self.COLUMNS)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        for column, width in ((0, 24), (self.SPEEDUP_COLUMN, 14)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Interactive)
            header.resizeSection(column, width * chars)
        header.setSectionResizeMode(self.GOOD_FOR_COLUMN, QHeaderView.ResizeMode.Stretch)
        self.tree.setItemDelegate(WrappingDelegate(self.tree, (0, self.SPEEDUP_COLUMN, self.GOOD_FOR_COLUMN)))
        header.sectionResized.connect(lambda *_: self.tree.scheduleDelayedItemsLayout())  # rows wrap anew
        for pair in self.pairs:
            self.tree.addTopLevelItem(self._row(pair, memory))
        layout.addWidget(self.tree, 1)
        self.progress = QProgressBar()
        self.progress.setMinimumWidth(200)
        self.progress.hide()
        self.status = QLabel("")
        self.status.setWordWrap(True)
        row = QHBoxLayout()
        self.get_button = QPushButton("Load pair")
        self.cancel_button = QPushButton("Cancel download")
        self.cancel_button.hide()
        self.sidecars_box = QCheckBox("with sidecars (drafter heads)")
        self.sidecars_box.setToolTip(SIDECARS_TIP)
        self.sidecars_box.setWhatsThis(SIDECARS_TIP)
        row.addWidget(self.status, 1)
        row.addWidget(self.sidecars_box)
        row.addWidget(self.progress)
        row.addWidget(self.cancel_button)
        row.addWidget(self.get_button)
        layout.addLayout(row)
        self.tree.currentItemChanged.connect(self._on_selected)
        self.get_button.clicked.connect(self.get_selected)
        self.cancel_button.clicked.connect(self.cancel_download)
        self.progressed.connect(self._on_progress)
        if (first := self.tree.topLevelItem(0)) is not None:
            self.tree.setCurrentItem(first)
        pairs = list(self.pairs)
        self.scan_worker = _start_worker(lambda: find_downloaded(pairs), self._on_found, self._on_scan_failed)

    @staticmethod
    def _row(pair: CatalogPair, memory: MachineMemory) -> QTreeWidgetItem:
        size = "none (offline)" if pair.local else f"{pair.download_gb:.1f} GB"
        state = "ready (built on first use)" if pair.local else "checking…"
        fits = fit_estimate(pair.memory_gb, memory)
        need = f"{pair.memory_gb:.0f} GB " + ("✓" if fits.ok else "✗")
        drafter = "own MTP heads" if pair.builtin_heads else "draft model"
        speedup, how = expected_speedup(pair)
        item = QTreeWidgetItem([pair.name, drafter, size, need, speedup, state, pair.good_for])
        item.setToolTip(CatalogTab.MEMORY_COLUMN, fits.text)
        item.setToolTip(0, "\n".join(f"{role}: {model.repo} {model.quant}" for role, model in downloads(pair)))
        item.setToolTip(
            CatalogTab.DRAFTER_COLUMN,
            "the target drafts with its own multi-token-prediction heads: nothing else to download"
            if pair.builtin_heads
            else "a small model of the same family drafts",
        )
        item.setToolTip(CatalogTab.SPEEDUP_COLUMN, how)
        item.setToolTip(CatalogTab.GOOD_FOR_COLUMN, f"{pair.why or pair.good_for}\nlicence: {pair.license}")
        item.setData(0, Qt.ItemDataRole.UserRole, pair.id)
        return item

    def item_for(self, pair_id: str) -> QTreeWidgetItem | None:
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            if item is not None and item.data(0, Qt.ItemDataRole.UserRole) == pair_id:
                return item
        return None

    def _on_found(self, found: dict[str, PairOnDisk]) -> None:
        for pair in self.pairs:
            if pair.local or pair.id in self.downloaded or pair.id == self.downloading:
                continue
            if pair.id in found:
                self._set_downloaded(pair.id, found[pair.id])
            else:
                self._set_state(pair.id, "not downloaded")
        self._update_button()
        if self.worker is None and not self.status.text():  # a download's outcome stays on the status line
            self._on_selected()

    def _on_scan_failed(self, exc: Exception) -> None:
        log.warning("checking downloaded pairs: %s", _error_line(exc))

    def _set_state(self, pair_id: str, text: str) -> None:
        item = self.item_for(pair_id)
        if item is not None:
            item.setText(self.STATE_COLUMN, text)

    def _set_downloaded(self, pair_id: str, files: PairOnDisk) -> None:
        self.downloaded[pair_id] = (files.target, files.draft)
        self.verdicts[pair_id] = _with_unverified(files.verdict, files)
        item = self.item_for(pair_id)
        if item is not None:
            measured = measured_text(files.target, files.draft)
            item.setText(self.STATE_COLUMN, short_verdict(files.verdict) + (f" · {measured}" if measured else ""))
            item.setToolTip(
                self.STATE_COLUMN, f"{self.verdicts[pair_id]}\ntarget: {files.target}\ndraft: {files.draft}"
            )

    def selected_pair(self) -> CatalogPair | None:
        item = self.tree.currentItem()
        if item is None:
            return None
        pair_id = item.data(0, Qt.ItemDataRole.UserRole)
        return next((p for p in self.pairs if p.id == pair_id), None)

    def _update_button(self) -> None:
        pair = self.selected_pair()
        self.get_button.setEnabled(pair is not None and self.worker is None)
        ready = pair is None or pair.local or pair.id in self.downloaded
        self.get_button.setText("Load pair" if ready else "Download")

    def _on_selected(self) -> None:
        """A downloaded pair's full verdict goes to the status line (unless a download is reporting there)."""
        self._update_button()
        pair = self.selected_pair()
        if self.worker is None:
            verdict = self.verdicts.get(pair.id) if pair is not None else None
            self.status.setText(f"On this computer: {verdict}" if verdict else "")

    def get_selected(self) -> None:
        pair = self.selected_pair()
        if pair is None or self.worker is not None:
            return
        if pair.local:
            self.demo_chosen.emit()
        elif pair.id in self.downloaded:
            self.pair_chosen.emit(*self.downloaded[pair.id])
        else:
            self._download(pair)

    def _download(self, pair: CatalogPair) -> None:
        self.cancel = cancel = CancelToken()
        self.progress.setRange(0, 0)
        self.progress.show()
        self.cancel_button.show()
        self.status.setText(f"Downloading {pair.name}…")
        self._set_state(pair.id, "downloading…")
        self.downloading = pair.id
        halves = downloads(pair)
        self._steps = {role: f"{role} ({i} of {len(halves)})" for i, (role, _) in enumerate(halves, 1)}

        def report(role: str, event: DownloadProgress) -> None:
            try:
                self.progressed.emit(f"{role}: {event.filename}", int(event.done), int(event.total or 0))
            except RuntimeError:  # the dialog was closed and this tab deleted: stop (the partial file is kept)
                cancel.cancel()

        with_sidecars = self.sidecars_box.isChecked()

        def work() -> tuple[str, PairOnDisk, str]:
            got = download_pair(pair, cancel=cancel, on_progress=report, sidecars=with_sidecars)
            target, draft = got.paths
            return pair.id, pair_on_disk(target, draft), got.sidecar_text()  # vocabularies: off the GUI thread

        self.worker = _start_worker(work, self._on_done, self._on_failed)
        self._update_button()

    def cancel_download(self) -> None:
        self.cancel.cancel()

    def stop(self, timeout: float) -> None:
        """Cancel a running download (its partial file is kept for resuming) and wait up to ``timeout`` s."""
        self.cancel.cancel()
        _stop_worker(self.scan_worker, 0.0)
        _stop_worker(self.worker, timeout)

    def _on_progress(self, label: str, done: int, total: int) -> None:
        if self.worker is None:
            return  # a report that was queued before the download ended
        if total > 0:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * done / total))
        role, _, name = label.partition(": ")
        step = self._steps.get(role, role)
        text = f"Downloading {step}: {name}" if name else label
        self.status.setText(f"{text}, {format_bytes(done)} of {format_bytes(total)}" if total else text)

    def _finish_download(self) -> None:
        self.worker = None
        self.downloading = None
        self.progress.hide()
        self.cancel_button.hide()
        self._update_button()

    def _on_done(self, result: tuple[str, PairOnDisk, str]) -> None:
        """Both files are on disk: show the verdict here and in the Files tab; loading is the next click.

        The status line also names the target's sidecars: those fetched, or those its repository offers.
        """
        pair_id, files, sidecars = result
        self._set_downloaded(pair_id, files)
        self._finish_download()
        self.status.setText(f"Downloaded: {self.verdicts[pair_id]}" + (f"; {sidecars}" if sidecars else ""))
        self.pair_downloaded.emit(files.target, files.draft)

    def _on_failed(self, exc: Exception) -> None:
        message = _error_line(exc)
        if self.downloading is not None:
            self._set_state(self.downloading, "not downloaded")
        self._finish_download()
        self.status.setText(message)
        self.download_failed.emit(message)


def measured_text(target: str, draft: str) -> str:
    """``measured here: 1.40x at depth 5`` when the draft finder has a result for this pair, else "".

    Without a draft file, the target's own heads or n-gram lookup (whichever was measured).
    """
    if not target or not Path(target).expanduser().is_file():
        return ""
    if draft:
        found = None
        if Path(draft).expanduser().is_file():  # a draft model, or a head measured under its own kind
            for kind in ("draft", *(entry.key for entry in head_drafters())):
                if (found := advice_cache.lookup(target, kind, draft)) is not None:
                    break
    else:
        found = advice_cache.lookup(target, "mtp") or advice_cache.lookup(target, "ngram")
    return found.label() if found is not None else ""


def _with_unverified(verdict: str, files: PairOnDisk) -> str:
    if not files.unverified:
        return verdict
    roles = [role for role, path in (("target", files.target), ("draft", files.draft)) if path in files.unverified]
    which = "both files are" if len(roles) == 2 else f"the {roles[0]} is"
    return f"{verdict} ({which} unverified: {UNVERIFIED_NOTE})"


class WrappingDelegate(QStyledItemDelegate):
    """Rows tall enough for the wrapped text of the ``columns`` at their current widths.

    Qt's own delegate measures a wrapping cell without its column's width (one line high, the rest cut off).
    """

    def __init__(self, tree: QTreeWidget, columns: tuple[int, ...]) -> None:
        super().__init__(tree)
        self.tree = tree
        self.columns = columns

    def sizeHint(  # noqa: N802 - a Qt override
        self,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> QSize:
        if index.column() not in self.columns:
            return super().sizeHint(option, index)
        sized = QStyleOptionViewItem(option)
        sized.rect = QRect(0, 0, self.tree.header().sectionSize(index.column()), 1 << 16)
        return super().sizeHint(sized, index)


class LibraryTab(QWidget):
    """GGUF files already on this computer; pick a target and a draft, then check and load them."""

    file_chosen = Signal(str, str)  # role ("target" or "draft"), path

    COLUMNS = ("Model", "Quant", "Size", "Source", "Path")
    SOURCE_COLUMN, PATH_COLUMN = 3, 4

    def __init__(self, parent: QWidget | None = None, also: tuple[str, ...] = ()) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(self.COLUMNS)
        self.tree.setRootIsDecorated(False)
        # Names, quants, sizes and sources show whole; a long path gives way in its middle (its tooltip is whole).
        self.tree.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.tree.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        header = self.tree.header()
        for column in range(self.PATH_COLUMN):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(self.PATH_COLUMN, QHeaderView.ResizeMode.Stretch)
        layout.addWidget(self.tree, 1)
        row = QHBoxLayout()
        self.status = QLabel("Scanning for GGUF files…")
        self.status.setWordWrap(True)
        self.target_button = QPushButton("Use as target")
        self.draft_button = QPushButton("Use as draft")
        row.addWidget(self.status, 1)
        row.addWidget(self.target_button)
        row.addWidget(self.draft_button)
        layout.addLayout(row)
        self.target_button.clicked.connect(lambda: self._use("target"))
        self.draft_button.clicked.connect(lambda: self._use("draft"))
        extra = tuple(p for p in also if p)
        self.worker = _start_worker(lambda: with_files(scan().entries, extra), self._on_scanned, self._on_scan_failed)

    def _on_scanned(self, entries: list[LibraryEntry]) -> None:
        for e in entries:
            where = source_label(e.source, e.path.name)
            source = f"{where}, unverified" if e.unverified else where
            name = e.head.label if e.head is not None else display_name(e.info)
            if e.sidecars:
                name += f" · {len(e.sidecars)} head{'s' if len(e.sidecars) > 1 else ''} beside it"
            item = QTreeWidgetItem([name, e.info.quant or "", f"{e.info.file_size / 1e9:.2f} GB", source, str(e.path)])
            if e.head is not None or e.sidecars:
                item.setToolTip(
                    0, e.what if e.head is None else f"{e.head.label}: choose a target, then use it as the draft"
                )
            else:
                item.setToolTip(0, f"{e.path.name}\nname inside the file: {e.info.name}")
            if e.unverified:
                item.setToolTip(self.SOURCE_COLUMN, f"unverified: {UNVERIFIED_NOTE}")
            item.setData(0, Qt.ItemDataRole.UserRole, str(e.path))
            item.setToolTip(self.PATH_COLUMN, str(e.path))
            self.tree.addTopLevelItem(item)
        unverified = sum(e.unverified for e in entries)
        found = f"{len(entries)} GGUF file(s) found" + (f", {unverified} unverified" if unverified else "")
        self.status.setText(found if entries else "No GGUF files found yet")

    def _on_scan_failed(self, exc: Exception) -> None:
        self.status.setText(_error_line(exc))

    def _use(self, role: str) -> None:
        item = self.tree.currentItem()
        if item is not None:
            self.file_chosen.emit(role, str(item.data(0, Qt.ItemDataRole.UserRole)))

    def stop(self, timeout: float) -> None:
        """Drop the scan's result if it has not come yet (a scan cannot be interrupted; it is not waited for)."""
        _stop_worker(self.worker, 0.0)
