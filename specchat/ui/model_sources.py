"""The model picker's catalog and library tabs, and pair downloads with progress.

Slow work (scanning folders for GGUF files, downloading) runs on plain Python
threads; results come back through signals of objects living on the GUI thread,
so Qt queues them and no widget is touched from another thread.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from specchat.core.cancel import CancelToken
from specchat.core.models.catalog import CatalogPair, load_catalog
from specchat.core.models.fit import fit_estimate
from specchat.core.types import SpecchatError


if TYPE_CHECKING:
    from .model_picker import ModelPickerDialog

log = logging.getLogger(__name__)


class BackgroundJob(QObject):
    """Runs a function on a Python thread; reports through queued signals."""

    progress = Signal(str, int, int)  # label, done, total (0 = unknown)
    succeeded = Signal(object)
    failed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.cancel = CancelToken()
        self._thread: threading.Thread | None = None

    def start(self, work) -> None:  # noqa: ANN001 - callable(job) -> result
        def run() -> None:
            try:
                result = work(self)
            except SpecchatError as exc:
                self._emit(self.failed, str(exc))
            except Exception as exc:  # noqa: BLE001 - shown as one line, logged in full
                log.exception("background job failed")
                self._emit(self.failed, f"{type(exc).__name__}: {exc}")
            else:
                self._emit(self.succeeded, result)

        self._thread = threading.Thread(target=run, name="specchat-job", daemon=True)
        self._thread.start()

    @staticmethod
    def _emit(signal: object, value: object) -> None:
        try:
            signal.emit(value)
        except RuntimeError:  # the dialog was closed and its objects deleted meanwhile
            pass

    def stop(self, timeout: float = 5.0) -> None:
        self.cancel.cancel()
        if self._thread is not None:
            self._thread.join(timeout)


def download_pair(pair: CatalogPair, job: BackgroundJob) -> tuple[str, str]:
    """Download a catalog pair's target and draft (resumable); returns their paths."""
    from specchat.core.models.download import download_quant

    paths: list[str] = []
    for role, model in (("target", pair.target), ("draft", pair.draft)):

        def on_progress(p, role=role) -> None:  # noqa: ANN001 - DownloadProgress
            try:
                job.progress.emit(f"{role}: {p.filename}", int(p.done), int(p.total or 0))
            except RuntimeError:  # dialog gone: stop the download (the partial file is kept)
                job.cancel.cancel()

        files = download_quant(model.repo, model.quant, cancel=job.cancel, on_progress=on_progress)
        paths.append(str(files[0].path))
    return paths[0], paths[1]


def cached_quant_file(repo_id: str, quant: str) -> Path | None:
    """The file to load for ``quant`` of ``repo_id`` if the hub cache holds it complete, else None.

    Looks only at the disk (the snapshot that ``refs/main`` names), never at the network.
    """
    from specchat.core.models.hub import HubFile, hf_cache_dir, pick_quant_files, repo_cache_folder

    folder = repo_cache_folder(hf_cache_dir(), repo_id)
    try:
        commit = (folder / "refs" / "main").read_text(encoding="utf-8").strip()
        snapshot = folder / "snapshots" / commit
        names = [p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*.gguf") if p.is_file()]
        chosen = pick_quant_files([HubFile(n, None, None) for n in names], quant, repo_id)
    except (OSError, SpecchatError):
        return None
    return snapshot / chosen[0].filename


def pair_verdict(target: str, draft: str) -> str:
    from .model_picker import compatibility_text

    return compatibility_text(target, draft)


def short_verdict(verdict: str) -> str:
    """The verdict without its reason, for a narrow column: ``✓ compatible``, ``✗ incompatible`` ..."""
    head = verdict.split(":", 1)[0]
    return head.replace("compatible-with-warnings", "compatible, with warnings")


def find_downloaded(pairs: list[CatalogPair]) -> dict[str, tuple[str, str, str]]:
    """Pairs whose two files are already in the hub cache: id -> (target, draft, verdict)."""
    found: dict[str, tuple[str, str, str]] = {}
    for pair in pairs:
        if pair.local:
            continue
        target = cached_quant_file(pair.target.repo, pair.target.quant)
        draft = cached_quant_file(pair.draft.repo, pair.draft.quant)
        if target is not None and draft is not None:
            found[pair.id] = (str(target), str(draft), pair_verdict(str(target), str(draft)))
    return found


class CatalogTab(QWidget):
    """Recommended pairs: the offline demo loads at once, others download first.

    A pair whose files are on disk (downloaded now or earlier) shows its
    compatibility verdict in the *On this computer* column and loads from there.
    """

    COLUMNS = ["Pair", "Download", "Memory", "On this computer", "Good for"]
    STATE_COLUMN = 3

    def __init__(self, dialog: ModelPickerDialog) -> None:
        super().__init__(dialog)
        self.dialog = dialog
        self.pairs = list(load_catalog())
        self.downloaded: dict[str, tuple[str, str]] = {}  # pair id -> (target, draft) paths on disk
        self.verdicts: dict[str, str] = {}  # pair id -> full verdict of the files on disk
        self.downloading: str | None = None  # pair id of the running download
        layout = QVBoxLayout(self)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(self.COLUMNS)
        self.tree.setRootIsDecorated(False)
        header = self.tree.header()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(self.STATE_COLUMN, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(4, QHeaderView.ResizeMode.Stretch)
        for pair in self.pairs:
            size = "none (offline)" if pair.local else f"{pair.download_gb:.1f} GB"
            state = "ready (built on first use)" if pair.local else "checking…"
            fits = fit_estimate(pair.memory_gb, dialog.memory)
            memory = f"{pair.memory_gb:.0f} GB " + ("✓" if fits.ok else "✗")
            item = QTreeWidgetItem([pair.name, size, memory, state, pair.good_for])
            item.setToolTip(2, fits.text)
            item.setToolTip(0, f"target: {pair.target.repo} {pair.target.quant}\ndraft: {pair.draft.repo} {pair.draft.quant}")
            item.setToolTip(4, f"{pair.good_for}\nlicence: {pair.license}")
            item.setData(0, Qt.ItemDataRole.UserRole, pair.id)
            self.tree.addTopLevelItem(item)
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
        row.addWidget(self.status, 1)
        row.addWidget(self.progress)
        row.addWidget(self.cancel_button)
        row.addWidget(self.get_button)
        layout.addLayout(row)
        self.job: BackgroundJob | None = None
        self.tree.currentItemChanged.connect(lambda *_: self._on_selected())
        self.get_button.clicked.connect(self.get_selected)
        self.cancel_button.clicked.connect(self.cancel_download)
        if self.pairs:
            self.tree.setCurrentItem(self.tree.topLevelItem(0))
        self.scan_job = BackgroundJob(self)
        self.scan_job.succeeded.connect(self._on_found)
        self.scan_job.failed.connect(lambda message: log.warning("checking downloaded pairs: %s", message))
        pairs = list(self.pairs)
        self.scan_job.start(lambda job: find_downloaded(pairs))

    def item_for(self, pair_id: str) -> QTreeWidgetItem | None:
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            if item.data(0, Qt.ItemDataRole.UserRole) == pair_id:
                return item
        return None

    def _on_found(self, found: dict[str, tuple[str, str, str]]) -> None:
        for pair in self.pairs:
            if pair.local or pair.id in self.downloaded or pair.id == self.downloading:
                continue
            if pair.id in found:
                self._set_downloaded(pair.id, *found[pair.id])
            elif (item := self.item_for(pair.id)) is not None:
                item.setText(self.STATE_COLUMN, "not downloaded")
        self._on_selected()

    def _set_state(self, pair_id: str, text: str) -> None:
        item = self.item_for(pair_id)
        if item is not None:
            item.setText(self.STATE_COLUMN, text)

    def _set_downloaded(self, pair_id: str, target: str, draft: str, verdict: str) -> None:
        self.downloaded[pair_id] = (target, draft)
        self.verdicts[pair_id] = verdict
        item = self.item_for(pair_id)
        if item is not None:
            item.setText(self.STATE_COLUMN, short_verdict(verdict))
            item.setToolTip(self.STATE_COLUMN, f"{verdict}\ntarget: {target}\ndraft: {draft}")

    def selected_pair(self) -> CatalogPair | None:
        item = self.tree.currentItem()
        if item is None:
            return None
        pair_id = item.data(0, Qt.ItemDataRole.UserRole)
        return next((p for p in self.pairs if p.id == pair_id), None)

    def _update_button(self) -> None:
        pair = self.selected_pair()
        self.get_button.setEnabled(pair is not None and self.job is None)
        ready = pair is None or pair.local or pair.id in self.downloaded
        self.get_button.setText("Load pair" if ready else "Download")

    def _on_selected(self) -> None:
        """A downloaded pair's full verdict goes to the status line (unless a download is reporting there)."""
        self._update_button()
        pair = self.selected_pair()
        if self.job is None:
            verdict = self.verdicts.get(pair.id) if pair is not None else None
            self.status.setText(f"On this computer: {verdict}" if verdict else "")

    def get_selected(self) -> None:
        pair = self.selected_pair()
        if pair is None or self.job is not None:
            return
        if pair.local:
            self.dialog.demo_requested.emit()
            self.dialog.accept()
            return
        if pair.id in self.downloaded:
            self.dialog.request(*self.downloaded[pair.id])
            return
        self.job = BackgroundJob(self)
        self.job.progress.connect(self._on_progress)
        self.job.succeeded.connect(self._on_done)
        self.job.failed.connect(self._on_failed)
        self.progress.setRange(0, 0)
        self.progress.show()
        self.cancel_button.show()
        self.status.setText(f"Downloading {pair.name}…")
        self._set_state(pair.id, "downloading…")
        self._update_button()

        def work(job: BackgroundJob) -> tuple[str, str, str, str]:
            target, draft = download_pair(pair, job)
            return pair.id, target, draft, pair_verdict(target, draft)  # reading vocabularies: off the GUI thread

        self.job.start(work)
        self.downloading = pair.id

    def cancel_download(self) -> None:
        if self.job is not None:
            self.job.cancel.cancel()

    def _on_progress(self, label: str, done: int, total: int) -> None:
        from specchat.core.models.download import format_bytes

        if total > 0:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * done / total))
        role, _, name = label.partition(": ")
        step = {"target": "target (1 of 2)", "draft": "draft (2 of 2)"}.get(role, role)
        text = f"Downloading {step}: {name}" if name else label
        self.status.setText(f"{text}, {format_bytes(done)} of {format_bytes(total)}" if total else text)

    def _finish_job(self) -> None:
        self.job = None
        self.downloading = None
        self.progress.hide()
        self.cancel_button.hide()
        self._update_button()

    def _on_done(self, result: tuple[str, str, str, str]) -> None:
        """Both files are on disk: show the verdict here and in the Files tab; loading is the next click."""
        pair_id, target, draft, verdict = result
        self._set_downloaded(pair_id, target, draft, verdict)
        self._finish_job()
        self.dialog.target_field.edit.setText(target)
        self.dialog.draft_field.edit.setText(draft)
        self.status.setText(f"Downloaded: {verdict}")

    def _on_failed(self, message: str) -> None:
        if self.downloading is not None:
            self._set_state(self.downloading, "not downloaded")
        self._finish_job()
        self.status.setText(message)


class LibraryTab(QWidget):
    """GGUF files already on this computer; pick a target and a draft, then check and load them."""

    def __init__(self, dialog: ModelPickerDialog) -> None:
        super().__init__(dialog)
        self.dialog = dialog
        layout = QVBoxLayout(self)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["Model", "Quant", "Size", "Source", "Path"])
        self.tree.setRootIsDecorated(False)
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
        self.job = BackgroundJob(self)
        self.job.succeeded.connect(self._on_scanned)
        self.job.failed.connect(self.status.setText)
        self.job.start(lambda job: _scan_library())

    def _on_scanned(self, entries: list[tuple[str, str, int, str, str]]) -> None:
        for name, quant, size, source, path in entries:
            item = QTreeWidgetItem([name, quant, f"{size / 1e9:.2f} GB", source, path])
            item.setData(0, Qt.ItemDataRole.UserRole, path)
            self.tree.addTopLevelItem(item)
        self.status.setText(f"{len(entries)} GGUF file(s) found" if entries else "No GGUF files found yet")

    def _use(self, role: str) -> None:
        item = self.tree.currentItem()
        if item is None:
            return
        path = str(item.data(0, Qt.ItemDataRole.UserRole))
        field = self.dialog.target_field if role == "target" else self.dialog.draft_field
        field.edit.setText(path)
        self.dialog.tabs.setCurrentIndex(0)


def _scan_library() -> list[tuple[str, str, int, str, str]]:
    from specchat.core.models.library import scan

    result = scan()
    return [
        (e.info.name or Path(e.path).name, e.info.quant or "", e.info.file_size, e.source, str(e.path))
        for e in result.entries
    ]


def add_source_tabs(dialog: ModelPickerDialog) -> None:
    """Add the Recommended and On-this-computer tabs to the picker."""
    dialog.catalog_tab = CatalogTab(dialog)
    dialog.tabs.addTab(dialog.catalog_tab, "Recommended")
    dialog.library_tab = LibraryTab(dialog)
    dialog.tabs.addTab(dialog.library_tab, "On this computer")
