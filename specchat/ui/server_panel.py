"""Serving the loaded pair on 127.0.0.1 from the window, and the Server panel that shows its requests live.

The server runs on the window's own runtime (one model in memory), and its
requests run on the window's one runtime thread (``RuntimeWorker.call``),
between the window's own replies, races and calibrations. With more than one
request at once (the default) the served requests decode together in one
batch (:class:`~specchat.server.batch_queue.BatchedRequestQueue`), and a
reply sent meanwhile joins that batch instead of waiting, where it drafts
with lookup or none; otherwise a reply waits while a served request decodes,
and the other way round. Served requests' events come from that thread
through the host's listener and reach the panel as a queued signal.
"""

from __future__ import annotations

import html
import logging
import time
from dataclasses import dataclass, field

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QAction, QGuiApplication, QPalette, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDockWidget,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

from specchat.core.chat.baseline import reply_speedup
from specchat.core.runtime.batched import BatchedRuntime
from specchat.core.settings import Settings, save_settings
from specchat.core.types import (
    PREDICTION_NAME,
    Drafted,
    Finished,
    FinishReason,
    SpecchatError,
    TokenKind,
    Verified,
)
from specchat.server.app import ServerConfig, build_app
from specchat.server.batch_queue import BatchedRequestQueue
from specchat.server.errors import ApiError
from specchat.server.protocol import Defaults
from specchat.server.request_queue import Job, RequestQueue, Started
from specchat.server.runner import ServerThread

from .pair_loading import PairLoader
from .serve_dialog import ServeDialog
from .token_styles import kind_format
from .worker import WindowRuntimeHost

log = logging.getLogger(__name__)

DEFAULT_PORT = 8080  # as `specchat serve`
PROBE_TOKENS = 16  # plain tokens timed after each request, the speed-up's denominator (as `specchat serve`)
COLUMNS = ("Client", "Endpoint", "Tokens", "Tokens/s", "Speed-up", "Status")
ENDPOINTS = {"chat": "/v1/chat/completions", "completion": "/v1/completions"}


@dataclass
class ServedRequest:
    """One request as the panel shows it: who, where, how far, and its text as (fate, piece) spans."""

    client: str
    endpoint: str
    status: str = "waiting"
    generated: int = 0
    started: float = field(default_factory=time.monotonic)
    tokens_per_second: float = 0.0
    speedup: str = "—"
    speedup_note: str = ""
    done: bool = False
    live: bool = False  # decoding now (started, not ended)
    spans: list[tuple[TokenKind, str]] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)  # the round's drafts before the verdict
    predicted: bool = False  # the request sent a prediction (OpenAI's predicted output)
    prediction: list[int] = field(default_factory=lambda: [0, 0])  # its drafted tokens: accepted, rejected

    @property
    def prediction_figure(self) -> str:
        """One short figure for a request with a prediction ("prediction 87% accepted"); "" without one."""
        if not self.predicted:
            return ""
        accepted, rejected = self.prediction
        if not accepted + rejected:
            return "prediction not drafted from"
        return f"prediction {100 * accepted / (accepted + rejected):.0f}% accepted"

    @property
    def prediction_note(self) -> str:
        accepted, rejected = self.prediction
        return f"{accepted} of {accepted + rejected} tokens drafted from the prediction were accepted"

    @property
    def shown_status(self) -> str:
        """The Status cell: how it ended, and the prediction's figure where it sent one."""
        figure = self.prediction_figure
        return f"{self.status} · {figure}" if figure else self.status

    def fold(self, event: object) -> None:
        """Take one engine event (Started, Drafted, Verified, Finished or an error)."""
        if isinstance(event, Started):
            self.status = f"running ({event.drafter})"
            self.started = time.monotonic()
            self.live = True
        elif isinstance(event, Drafted):
            self.pending = list(event.pieces)
        elif isinstance(event, Verified):
            self.pending = []
            accepted, rejected = event.drafted_from(PREDICTION_NAME)
            self.prediction[0] += accepted
            self.prediction[1] += rejected
            self.spans += [(TokenKind.ACCEPTED, p) for p in event.accepted_pieces]
            self.spans += [(TokenKind.REJECTED, p) for p in event.rejected_pieces]
            if event.correction is not None:
                self.spans.append((TokenKind.TARGET, event.correction_piece))
            self.generated += len(event.accepted) + (event.correction is not None)
            elapsed = time.monotonic() - self.started
            self.tokens_per_second = self.generated / elapsed if elapsed > 0 else 0.0
        elif isinstance(event, Finished):
            self.pending = []
            s = event.stats
            self.generated = s.generated or self.generated
            self.tokens_per_second = s.tokens_per_second or self.tokens_per_second
            shown = reply_speedup(s.generated, s.rounds, s.tokens_per_second, s.plain_tokens_per_second, s.plain_tokens)
            self.speedup = "—" if shown.ratio is None else f"×{shown.ratio:.2f}"
            self.speedup_note = shown.why
            self.done, self.live = True, False
            self.status = event.reason.value if event.reason is not FinishReason.ERROR else f"error: {event.message}"
        elif isinstance(event, ApiError):
            self.done, self.live = True, False
            self.status = f"refused ({event.status})"


class ServerPanel(QDockWidget):
    """A dock listing the served requests live, and below them the text with its fates of the selected request,
    else of every request decoding now (one after the other, each under a line naming it), else of the latest."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Server", parent)
        self.setObjectName("server-panel")
        self.requests: list[ServedRequest] = []
        self._ids: dict[int, int] = {}  # id(Job) -> row
        body = QWidget()
        layout = QVBoxLayout(body)
        layout.setContentsMargins(4, 4, 4, 4)
        self.url = self.api_key = ""
        self.address = QLabel("Not serving")
        self.address.setWordWrap(True)
        self.address.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.copy_url = QPushButton("Copy URL")
        self.copy_url.setToolTip("Copy the base URL to give an editor or agent (…/v1)")
        self.copy_key = QPushButton("Copy key")
        self.copy_key.setToolTip("Copy the API key clients must send (Authorization: Bearer KEY)")
        self.copy_url.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.url))
        self.copy_key.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.api_key))
        address_row = QHBoxLayout()
        address_row.addWidget(self.address, 1)
        address_row.addWidget(self.copy_url)
        address_row.addWidget(self.copy_key)
        layout.addLayout(address_row)
        self.show_address("", "", "")
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.itemSelectionChanged.connect(self._show_text)
        self.text = QTextEdit()
        self.text.setReadOnly(True)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.table)
        split.addWidget(self.text)
        layout.addWidget(split, 1)
        self.setWidget(body)

    def show_address(self, target: str, url: str, api_key: str) -> None:
        """What is served where, and whether a key is required ("" url: not serving)."""
        self.url, self.api_key = url, api_key
        if not url:
            self.address.setText("Not serving")
        else:
            self.address.setText(
                f"Serving {html.escape(target)}<br><b>{url}</b>" + (" · key required" if api_key else " · no key")
            )
        self.copy_url.setVisible(bool(url))
        self.copy_key.setVisible(bool(url and api_key))

    def on_event(self, job: Job, event: object) -> None:
        """Fold a served request's event into its row (a new row for a request not seen yet)."""
        row = self._ids.get(id(job))
        if row is None:
            row = self._ids[id(job)] = len(self.requests)
            endpoint = ENDPOINTS.get(job.request.kind, job.request.kind)
            self.requests.append(ServedRequest(job.client, endpoint, predicted=job.request.prediction is not None))
            self.table.insertRow(row)
        served = self.requests[row]
        served.fold(event)
        cells = (
            served.client,
            served.endpoint,
            str(served.generated),
            f"{served.tokens_per_second:.1f}",
            served.speedup,
            served.shown_status,
        )
        for column, value in enumerate(cells):
            item = QTableWidgetItem(value)
            if column == COLUMNS.index("Speed-up"):
                item.setToolTip(served.speedup_note)
            elif column == COLUMNS.index("Status") and served.predicted:
                item.setToolTip(served.prediction_note)
            self.table.setItem(row, column, item)
        self.table.resizeColumnsToContents()
        if row in self._shown_rows() or isinstance(event, (Finished, ApiError)):  # an end changes which show
            self._show_text()

    def _shown_rows(self) -> list[int]:
        """The requests whose text is shown: the selected one, else those decoding now, else the latest."""
        selected = self.table.selectionModel().selectedRows()
        if selected:
            return [selected[0].row()]
        live = [row for row, served in enumerate(self.requests) if served.live]
        return live or ([len(self.requests) - 1] if self.requests else [])

    def _show_text(self) -> None:
        rows = self._shown_rows()
        self.text.clear()
        cursor = self.text.textCursor()
        palette = self.text.palette()
        heading = QTextCharFormat()  # apart from the fates' own styles (the target's tokens are bold)
        heading.setFontItalic(True)
        heading.setForeground(palette.color(QPalette.ColorRole.PlaceholderText))
        for i, row in enumerate(rows):
            served = self.requests[row]
            if len(rows) > 1:  # several at once: a line names each
                cursor.insertText(("\n\n" if i else "") + f"#{row + 1} {served.client} · {served.status}\n", heading)
            for kind, piece in served.spans:
                cursor.insertText(piece, kind_format(kind, palette))
            for piece in served.pending:
                cursor.insertText(piece, kind_format(TokenKind.PENDING, palette))
        self.text.moveCursor(QTextCursor.MoveOperation.End)


class LocalServing(QObject):
    """Starts and stops the OpenAI-compatible server on the window's loaded pair; owns the menu action and panel."""

    heard = Signal(object, object)  # Job, engine event: emitted on the runtime's thread
    serving_changed = Signal(str)  # the base URL, "" when stopped

    def __init__(self, window: QMainWindow, host: WindowRuntimeHost, loader: PairLoader, settings: Settings) -> None:
        super().__init__(window)
        self.window, self.host, self.loader, self.settings = window, host, loader, settings
        self.dialog: ServeDialog | None = None  # open while it asks
        self.serve_host: RequestQueue | None = None
        self.server_thread: ServerThread | None = None
        self.batch: BatchedRuntime | None = None  # the served requests' batch (with more than one at once)
        self.serial_reason = ""  # why requests are served one at a time though more were asked for ("": not so)
        self.url = ""
        self.panel = ServerPanel(window)
        window.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.panel)
        self.panel.hide()
        self.note = QLabel()
        window.statusBar().addPermanentWidget(self.note)
        self.note.hide()
        self.action = QAction("Serve on &localhost…", self)
        self.action.setCheckable(True)
        self.action.setEnabled(False)
        self.action.setToolTip("Serve the loaded pair over the OpenAI API on 127.0.0.1 (one model in memory)")
        self.action.triggered.connect(self._toggled)
        self.heard.connect(self.panel.on_event)  # queued: the panel lives on the GUI thread
        loader.started.connect(self._pair_going)
        loader.failed.connect(self._pair_going)
        loader.loaded.connect(lambda _info: self.action.setEnabled(True))

    @property
    def serving(self) -> bool:
        return self.server_thread is not None

    def start(self, port: int = DEFAULT_PORT, api_key: str | None = None, parallel: int | None = None) -> str:
        """Serve the loaded runtime on 127.0.0.1:``port`` (0: a free port), requiring ``api_key`` if given, up to
        ``parallel`` requests at once (None: the settings'; 1: one at a time); the base URL (``…/v1``).

        Above 1 the requests decode in one batch with one more sequence kept for the window's own reply; a target
        that cannot batch (on remote devices) serves one at a time, and the note says so."""
        runtime = self.host.worker.runtime
        if runtime is None:
            raise SpecchatError("load a pair before serving it")
        self.stop()
        parallel = self.settings.serve_parallel if parallel is None else parallel
        batch, self.serial_reason = None, ""
        if parallel > 1:
            try:
                batch = BatchedRuntime(runtime, parallel + 1)
            except SpecchatError as exc:
                self.serial_reason = str(exc)
        serve_host: RequestQueue
        shared: BatchedRequestQueue | None = None
        if batch is not None:
            serve_host = shared = BatchedRequestQueue(batch, owner=self.host.worker.call, listener=self._heard)
        else:
            serve_host = RequestQueue(runtime, owner=self.host.worker.call, listener=self._heard)
        try:
            app = build_app(serve_host, self._config(runtime.n_ctx, api_key))
            thread = ServerThread(app, "127.0.0.1", port).start()
        except SpecchatError:
            serve_host.close()
            if batch is not None:
                batch.close()
            raise
        if batch is not None:
            self.host.worker.adopt(batch)
        self.host.worker.shared = shared
        self.serve_host, self.server_thread, self.batch = serve_host, thread, batch
        self.url = f"{thread.url}/v1"
        at_once = f", up to {parallel} requests at once" if batch is not None else ""
        serial = ", one request at a time (this target cannot batch them)" if self.serial_reason else ""
        self.note.setText(f"Serving on {self.url}{at_once}{serial}" + (" (key required)" if api_key else ""))
        self.note.setToolTip(self.serial_reason)
        self.note.show()
        self.panel.show_address(runtime.target_name, self.url, api_key or "")
        self.panel.show()
        self.window.resizeDocks([self.panel], [520], Qt.Orientation.Horizontal)
        self.action.setChecked(True)
        self.serving_changed.emit(self.url)
        return self.url

    def stop(self) -> None:
        """Stop the server (what runs is cancelled within one round; the window's reply in the batch goes on to
        its end); the runtime stays loaded. Safe to repeat."""
        thread, serve_host, batch = self.server_thread, self.serve_host, self.batch
        self.server_thread = self.serve_host = self.batch = None
        self.host.worker.shared = None
        if thread is not None:
            thread.stop()
        if serve_host is not None:
            serve_host.close()
        if batch is not None:
            self.host.worker.release(batch)  # on the runtime's thread, once the batch's turn has ended
        if thread is not None or serve_host is not None:
            self.url = ""
            self.note.hide()
            self.panel.show_address("", "", "")
            self.serving_changed.emit("")
        self.action.setChecked(False)

    @staticmethod
    def _config(n_ctx: int, api_key: str | None) -> ServerConfig:
        return ServerConfig(api_key=api_key, defaults=Defaults(max_tokens_limit=n_ctx, plain_probe=PROBE_TOKENS))

    def _heard(self, job: Job, event: object) -> None:
        """On the runtime's thread, while it runs a served request."""
        self.heard.emit(job, event)

    def _pair_going(self, *_: object) -> None:
        if self.dialog is not None:
            self.dialog.reject()
        self.stop()
        self.action.setEnabled(False)

    def _toggled(self, checked: bool) -> None:
        if not checked:
            self.stop()
            return
        self.ask()

    def ask(self) -> ServeDialog:
        """Open the dialog (window-modal, not blocking); Serve starts serving with its port and key."""
        if self.dialog is not None:
            return self.dialog
        dialog = self.dialog = ServeDialog(self.settings, self.window)
        dialog.finished.connect(self._answered)
        dialog.open()
        return dialog

    def _answered(self, result: int) -> None:
        dialog, self.dialog = self.dialog, None
        if dialog is None:
            return
        dialog.deleteLater()
        if result != ServeDialog.DialogCode.Accepted.value:
            self.action.setChecked(self.serving)
            return
        dialog.remember(self.settings)
        try:
            save_settings(self.settings)  # now: a client set up with this key keeps working after a crash
        except OSError as exc:
            log.warning("could not save the serving settings: %s", exc)
        choice = dialog.choice()
        try:
            self.start(choice.port, choice.api_key, choice.parallel)
        except SpecchatError as exc:
            self.action.setChecked(False)
            self.window.statusBar().showMessage(f"Not serving: {exc}", 10_000)
