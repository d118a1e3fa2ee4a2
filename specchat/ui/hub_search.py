"""The model picker's Hub tab: search the hub, see a repository's quantisations with sizes and verdicts, download.

Typing searches after a pause (:data:`DEBOUNCE_MS`); each search, listing and download runs in a superqt worker
and can be cancelled (a newer search cancels an older one, whose answer is dropped). A repository's files are
judged from the head of one of them, read on the hub (:mod:`specchat.core.models.hub_browse`): as a draft for the
loaded target when it is a fraction of its size, else as a target, with the draft that fits it offered beside it.
Downloads go through the same resumable downloader as the Recommended tab; the pair downloaded goes to the Files
tab through :attr:`HubSearchTab.pair_downloaded`.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)
from superqt.utils import FunctionWorker

from specchat.core.cancel import CancelToken
from specchat.core.models.download import DownloadProgress, format_bytes
from specchat.core.models.errors import DownloadCancelledError
from specchat.core.models.fit import MachineMemory
from specchat.core.models.hub import HubRepo
from specchat.core.models.hub_browse import (
    DraftOffer,
    HubVerdict,
    LoadedTarget,
    QuantChoice,
    download_choice,
    find_draft,
    judge,
    list_choices,
    read_choice,
    read_loaded_target,
    search,
    sized,
)
from specchat.core.models.hub_header import RemoteModel
from specchat.core.types import SpecchatError

from .model_sources import WrappingDelegate, _error_line, _start_worker, _stop_worker

log = logging.getLogger(__name__)

DEBOUNCE_MS = 400  # typing pauses this long before the hub is asked
MIN_QUERY = 2  # characters


@dataclass(frozen=True)
class Listing:
    """A repository's choices, each with its verdict (None: its header could not be read: ``problem`` says why)."""

    repo_id: str
    choices: list[QuantChoice]
    verdicts: list[HubVerdict | None]
    model: RemoteModel | None  # the header read (the smallest choice's)
    problem: str = ""


def _count(n: int | None) -> str:
    if n is None:
        return ""
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e4 else str(n)


def _size(n: int | None) -> str:
    return "?" if n is None else format_bytes(n)


@functools.lru_cache(maxsize=4)
def _loaded(path: str, _mtime: int) -> LoadedTarget | None:
    return read_loaded_target(path)


def loaded_target(path: str) -> LoadedTarget | None:
    """The loaded target's metadata, read once per file version (a vocabulary takes a while)."""
    p = Path(path).expanduser() if path else None
    return _loaded(str(p), p.stat().st_mtime_ns) if p is not None and p.is_file() else None


class HubSearchTab(QWidget):
    """Search, a repository's quantisations with verdicts, the draft beside a target, download with progress."""

    pair_downloaded = Signal(str, str)  # target, draft on disk ("" for none); loading is the next click
    download_failed = Signal(str)  # one line: the error, or that the download was cancelled
    progressed = Signal(str, int, int)  # "role: file", bytes done, total (0 = unknown); from the worker
    searched = Signal()  # a search's results (or its one-line error) are shown
    listed = Signal()  # a repository's files and verdicts are shown
    offered = Signal()  # the search for the draft beside a target is over (its line is shown)

    RESULT_COLUMNS = ("Repository", "Downloads", "Likes", "Updated")
    FILE_COLUMNS = ("Quant", "Size", "Files", "Verdict")
    SIZE_COLUMN, PARTS_COLUMN, VERDICT_COLUMN = 1, 2, 3

    def __init__(self, target: str, n_ctx: int, memory: MachineMemory, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.target, self.n_ctx, self.memory = target, n_ctx, memory
        self.listing: Listing | None = None
        self.offer: DraftOffer | None = None
        self._generation = {"search": 0, "list": 0, "offer": 0}
        self._cancels = {"search": CancelToken(), "list": CancelToken(), "offer": CancelToken()}
        self._workers: dict[str, FunctionWorker[Any] | None] = {"search": None, "list": None, "offer": None}
        self.worker: FunctionWorker[Any] | None = None  # the running download
        self.cancel = CancelToken()
        self._download_text = ""

        layout = QVBoxLayout(self)
        self.query = QLineEdit()
        self.query.setPlaceholderText("Search the hub for GGUF models, e.g. qwen2.5 coder or smollm2")
        self.query.setClearButtonEnabled(True)
        self.search_status = QLabel("")
        top = QHBoxLayout()
        top.addWidget(self.query, 2)
        top.addWidget(self.search_status, 1)
        layout.addLayout(top)

        split = QSplitter(Qt.Orientation.Horizontal)
        self.results = QTreeWidget()
        self.results.setHeaderLabels(self.RESULT_COLUMNS)
        self.results.setRootIsDecorated(False)
        self.results.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        header = self.results.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column in (1, 2, 3):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        split.addWidget(self.results)

        side = QWidget()
        side_layout = QVBoxLayout(side)
        side_layout.setContentsMargins(0, 0, 0, 0)
        self.repo_label = QLabel("Choose a repository to see its files")
        self.repo_label.setWordWrap(True)
        self.files = QTreeWidget()
        self.files.setHeaderLabels(self.FILE_COLUMNS)
        self.files.setRootIsDecorated(False)
        # the verdict wraps in full at any width (a long reason is never cut off)
        self.files.setWordWrap(True)
        self.files.setUniformRowHeights(False)
        self.files.setTextElideMode(Qt.TextElideMode.ElideNone)
        self.files.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.files.setItemDelegate(WrappingDelegate(self.files, (self.VERDICT_COLUMN,)))
        files_header = self.files.header()
        files_header.setStretchLastSection(False)
        for column in range(3):
            files_header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        files_header.setSectionResizeMode(self.VERDICT_COLUMN, QHeaderView.ResizeMode.Stretch)
        files_header.sectionResized.connect(lambda *_: self.files.scheduleDelayedItemsLayout())
        self.draft_line = QLabel("")
        self.draft_line.setWordWrap(True)
        self.with_draft = QCheckBox("with its draft")
        self.with_draft.setChecked(True)
        self.with_draft.setToolTip("Download the draft offered above together with the target")
        self.with_draft.hide()
        side_layout.addWidget(self.repo_label)
        side_layout.addWidget(self.files, 1)
        side_layout.addWidget(self.draft_line)
        split.addWidget(side)
        split.setStretchFactor(0, 2)
        split.setStretchFactor(1, 3)
        layout.addWidget(split, 1)

        row = QHBoxLayout()
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.progress = QProgressBar()
        self.progress.setMinimumWidth(160)
        self.progress.hide()
        self.cancel_button = QPushButton("Cancel download")
        self.cancel_button.hide()
        self.download_button = QPushButton("Download")
        self.download_button.setEnabled(False)
        row.addWidget(self.status, 1)
        row.addWidget(self.with_draft)
        row.addWidget(self.progress)
        row.addWidget(self.cancel_button)
        row.addWidget(self.download_button)
        layout.addLayout(row)

        self.debounce = QTimer(self)
        self.debounce.setSingleShot(True)
        self.debounce.setInterval(DEBOUNCE_MS)
        self.debounce.timeout.connect(self.run_search)
        self.query.textChanged.connect(lambda _text: self.debounce.start())
        self.query.returnPressed.connect(self.run_search)
        self.results.currentItemChanged.connect(lambda *_: self._list_selected())
        self.files.currentItemChanged.connect(lambda *_: self._update_button())
        self.with_draft.toggled.connect(lambda _on: self._update_button())
        self.download_button.clicked.connect(self.download_selected)
        self.cancel_button.clicked.connect(self.cancel_download)
        self.progressed.connect(self._on_progress)

    # --- background jobs that a newer one replaces -------------------------------------------------------------

    def _start(self, kind: str, func: Any, returned: Any) -> None:
        """Run ``func(cancel)`` for ``kind``, cancelling the one before; only the newest one's outcome shows."""
        self._cancels[kind].cancel()
        _stop_worker(self._workers[kind], 0.0)
        self._generation[kind] += 1
        generation = self._generation[kind]
        cancel = self._cancels[kind] = CancelToken()

        def done(result: Any) -> None:
            if generation == self._generation[kind]:
                self._workers[kind] = None
                returned(result, None)

        def failed(exc: Exception) -> None:
            if generation == self._generation[kind] and not isinstance(exc, DownloadCancelledError):
                self._workers[kind] = None
                returned(None, _error_line(exc))

        self._workers[kind] = _start_worker(lambda: func(cancel), done, failed)

    def _drop(self, kind: str) -> None:
        self._cancels[kind].cancel()
        self._generation[kind] += 1
        self._workers[kind] = None

    # --- search -----------------------------------------------------------------------------------------------

    def run_search(self) -> None:
        """Search for the box's text now (typing does it after a pause)."""
        self.debounce.stop()
        query = self.query.text().strip()
        if len(query) < MIN_QUERY:
            self._drop("search")
            self.results.clear()
            self.search_status.setText("")
            return
        self.search_status.setText("Searching…")
        self._start("search", lambda cancel: search(query, cancel=cancel), self._on_searched)

    def _on_searched(self, repos: list[HubRepo] | None, error: str | None) -> None:
        self.results.clear()
        if error is not None:
            self.search_status.setText(error)
        else:
            assert repos is not None
            for repo in repos:
                cells = [repo.repo_id, _count(repo.downloads), _count(repo.likes), repo.last_modified or ""]
                item = QTreeWidgetItem(cells)
                item.setData(0, Qt.ItemDataRole.UserRole, repo.repo_id)
                item.setToolTip(0, repo.repo_id)
                for column in (1, 2):
                    item.setTextAlignment(column, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.results.addTopLevelItem(item)
            n = len(repos)
            self.search_status.setText(f"{n} repositor{'y' if n == 1 else 'ies'}" if n else "Nothing found")
        self.searched.emit()

    # --- a repository's files ----------------------------------------------------------------------------------

    def _list_selected(self) -> None:
        item = self.results.currentItem()
        self._drop("offer")
        self.files.clear()
        self.offer = None
        self.listing = None
        self.draft_line.setText("")
        self.with_draft.hide()
        self._update_button()
        if item is None:  # a new search emptied the list
            self._drop("list")
            self.repo_label.setText("Choose a repository to see its files")
            return
        repo_id = str(item.data(0, Qt.ItemDataRole.UserRole))
        self.repo_label.setText(f"<b>{repo_id}</b>: listing its GGUF files…")
        target, n_ctx, memory = self.target, self.n_ctx, self.memory

        def work(cancel: CancelToken) -> Listing:
            choices = list_choices(repo_id, cancel=cancel)
            if not choices:
                return Listing(repo_id, [], [], None)
            try:
                model = read_choice(repo_id, choices[0], cancel=cancel)
            except DownloadCancelledError:
                raise
            except SpecchatError as exc:
                return Listing(repo_id, choices, [None] * len(choices), None, _error_line(exc))
            loaded = loaded_target(target)
            verdicts: list[HubVerdict | None] = [judge(sized(model, c.size), loaded, n_ctx, memory) for c in choices]
            return Listing(repo_id, choices, verdicts, model)

        self._start("list", work, self._on_listed)

    def _on_listed(self, listing: Listing | None, error: str | None) -> None:
        self.files.clear()
        self.listing = listing
        if listing is None:
            self.repo_label.setText(error or "")
            self.listed.emit()
            return
        n = len(listing.choices)
        what = f"{n} model file{'s' if n != 1 else ''}" if n else "no GGUF model files"
        self.repo_label.setText(f"<b>{listing.repo_id}</b>: {what}")
        for choice, verdict in zip(listing.choices, listing.verdicts, strict=True):
            parts = len(choice.files)
            text = verdict.text if verdict is not None else f"cannot tell: {listing.problem}"
            item = QTreeWidgetItem([choice.label, _size(choice.size), f"{parts} parts" if parts > 1 else "1", text])
            item.setToolTip(0, "\n".join(f.filename for f in choice.files))
            item.setToolTip(self.VERDICT_COLUMN, text)
            self.files.addTopLevelItem(item)
        if (first := self.files.topLevelItem(0)) is not None:
            self.files.setCurrentItem(first)
        self.listed.emit()
        if listing.model is not None and any(v is not None and v.role == "target" for v in listing.verdicts):
            self._find_draft(listing.repo_id, listing.model)

    def _find_draft(self, repo_id: str, model: RemoteModel) -> None:
        if model.info.mtp_layers:
            self.draft_line.setText("Draft: none needed, it drafts with its own MTP heads")
            self.offered.emit()
            return
        self.draft_line.setText("Looking for the draft that fits it…")
        self._start("offer", lambda cancel: find_draft(repo_id, model, cancel=cancel), self._on_offer)

    def _on_offer(self, offer: DraftOffer | None, error: str | None) -> None:
        self.offer = offer
        if error is not None:
            self.draft_line.setText(f"Draft: {error}")
        elif offer is None:
            self.draft_line.setText("Draft: no smaller model of its family with the same vocabulary was found")
        else:
            self.draft_line.setText(f"Draft beside it: {offer.line()}")
        self._update_button()
        self.offered.emit()

    # --- download ----------------------------------------------------------------------------------------------

    def selected(self) -> tuple[QuantChoice, HubVerdict | None] | None:
        item = self.files.currentItem()
        if item is None or self.listing is None:
            return None
        index = self.files.indexOfTopLevelItem(item)
        return self.listing.choices[index], self.listing.verdicts[index]

    def _role(self, verdict: HubVerdict | None) -> str:
        return verdict.role if verdict is not None else "target"

    def _update_button(self) -> None:
        chosen = self.selected()
        idle = self.worker is None
        self.download_button.setEnabled(chosen is not None and idle)
        role = self._role(chosen[1]) if chosen is not None else "target"
        pairable = chosen is not None and role == "target" and self.offer is not None
        self.with_draft.setVisible(pairable)
        self.with_draft.setEnabled(idle)
        if role == "draft":
            self.download_button.setText("Download as draft")
        elif pairable and self.with_draft.isChecked():
            self.download_button.setText("Download with draft")
        else:
            self.download_button.setText("Download")

    def download_selected(self) -> None:
        chosen = self.selected()
        if chosen is None or self.worker is not None or self.listing is None:
            return
        choice, verdict = chosen
        role = self._role(verdict)
        repo_id = self.listing.repo_id
        offer = self.offer if role == "target" and self.with_draft.isChecked() else None
        loaded = self.target
        self.cancel = cancel = CancelToken()
        self.progress.setRange(0, 0)
        self.progress.show()
        self.cancel_button.show()
        also = f" and {offer.repo_id} {offer.choice.label}" if offer is not None else ""
        self._download_text = f"{repo_id} {choice.label}{also}"
        self.status.setText(f"Downloading {self._download_text}…")

        def report(part_role: str, event: DownloadProgress) -> None:
            try:
                self.progressed.emit(f"{part_role}: {event.filename}", int(event.done), int(event.total or 0))
            except RuntimeError:  # the dialog was closed and this tab deleted: stop (the partial file is kept)
                cancel.cancel()

        def work() -> tuple[str, str]:
            got = download_choice(repo_id, choice, role, cancel=cancel, on_progress=report)
            if role == "draft":
                return loaded, str(got[0].path)
            draft = ""
            if offer is not None:
                drafts = download_choice(offer.repo_id, offer.choice, "draft", cancel=cancel, on_progress=report)
                draft = str(drafts[0].path)
            return str(got[0].path), draft

        self.worker = _start_worker(work, self._on_downloaded, self._on_download_failed)
        self._update_button()

    def cancel_download(self) -> None:
        self.cancel.cancel()

    def _on_progress(self, label: str, done: int, total: int) -> None:
        if self.worker is None:
            return  # a report queued before the download ended
        if total > 0:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * done / total))
        role, _, name = label.partition(": ")
        where = f"{role} {name.rsplit('/', 1)[-1]}"
        self.status.setText(f"Downloading {where}, {format_bytes(done)} of {format_bytes(total)}" if total else where)

    def _finish(self) -> None:
        self.worker = None
        self.progress.hide()
        self.cancel_button.hide()
        self._update_button()

    def _on_downloaded(self, paths: tuple[str, str]) -> None:
        self._finish()
        target, draft = paths
        names = " with ".join(Path(p).name for p in (target, draft) if p)
        self.status.setText(f"Downloaded {names}: in the Files tab, ready to load")
        self.pair_downloaded.emit(target, draft)

    def _on_download_failed(self, exc: Exception) -> None:
        self._finish()
        if isinstance(exc, DownloadCancelledError):
            message = f"Download of {self._download_text} cancelled; the part received is kept: Download resumes it"
        else:
            message = _error_line(exc)
        self.status.setText(message)
        self.download_failed.emit(message)

    def stop(self, timeout: float) -> None:
        """Cancel the search, the listing and a running download (its partial file is kept for resuming)."""
        for kind in self._workers:
            self._cancels[kind].cancel()
            self._generation[kind] += 1  # an answer still on its way is dropped, never shown on a closed dialog
            _stop_worker(self._workers[kind], 0.0)
        self.cancel.cancel()
        _stop_worker(self.worker, timeout)
