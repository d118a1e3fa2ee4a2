"""Files attached to the message being written: the paperclip, drops on the chat or the composer, pasted files,
the context meter, and the question asked before sending a document that does not fit.

Each file is read when it is attached (``core.chat.documents``), so a file that moves or disappears before
Send is sent as it was read; one that cannot be read is one line in the banner and nothing else changes. The
meter counts with the loaded target's tokenizer on the runtime's thread (debounced, the latest count wins)
and estimates, saying "about", while no model is loaded or before the count arrives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QGuiApplication
from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget

from specchat.core.chat.attachments import Attachment, block, cut_to, estimate_tokens, fit_offer, prompt_text
from specchat.core.chat.documents import DocumentError, read_document

from .attachment_chips import AttachmentTray, ContextMeter
from .composer import Composer, local_files
from .worker import TokenCount, TokenCountRequest, WindowRuntimeHost

COUNT_DELAY_MS = 300  # typing pauses this long before the prompt is counted again
TEMPLATE_TOKENS = 8  # an estimate's allowance per message for the chat template's own tokens
FILE_FILTER = (
    "Documents (*.txt *.md *.markdown *.rst *.py *.js *.ts *.c *.h *.cpp *.rs *.go *.java *.sh *.toml *.yaml *.yml"
    " *.ini *.csv *.tsv *.json *.jsonl *.xml *.html *.htm *.log *.tex *.pdf *.docx *.pptx *.xlsx *.epub);;All files (*)"
)


class ComposerFiles(QObject):
    """The attachments of the message being written and the context meter (see the module docstring)."""

    def __init__(
        self,
        composer: Composer,
        tray: AttachmentTray,
        meter: ContextMeter,
        drop_target: QWidget,
        host: WindowRuntimeHost,
        *,
        history: Callable[[], list[dict[str, str]]],
        loaded_n_ctx: Callable[[], int],
        chosen_n_ctx: Callable[[], int],
        reply_room: Callable[[], int],
        show_error: Callable[[str], None],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.composer, self.tray, self.meter, self.host = composer, tray, meter, host
        self.history, self.loaded_n_ctx, self.chosen_n_ctx = history, loaded_n_ctx, chosen_n_ctx
        self.reply_room, self.show_error = reply_room, show_error
        # The paperclip's file chooser; returns the chosen paths (tests put their own here).
        self.pick_files: Callable[[], list[str]] = self._file_dialog
        self.fit_box: QMessageBox | None = None  # the question about a document that does not fit, while open
        self._serial = 0
        self._pending_texts: tuple[str, ...] = ()  # the texts the count on its way counts one by one
        self._counted: dict[str, int] = {}  # attachment text -> the target's count (the pair loaded now)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(COUNT_DELAY_MS)
        self._timer.timeout.connect(self.count_now)
        composer.has_files = lambda: bool(self.tray.attachments)
        composer.files_given.connect(self.attach_paths)
        composer.textChanged.connect(self.refresh)
        tray.changed.connect(self.refresh)
        host.worker.tokens_counted.connect(self._on_counted)
        self.drop_target = drop_target
        drop_target.setAcceptDrops(True)
        drop_target.installEventFilter(self)

    # -- attaching ---------------------------------------------------------------------

    @property
    def attachments(self) -> tuple[Attachment, ...]:
        return tuple(self.tray.attachments)

    def choose(self) -> None:
        """The paperclip: choose files and attach them."""
        self.attach_paths(self.pick_files())

    def _file_dialog(self) -> list[str]:
        paths, _ = QFileDialog.getOpenFileNames(self.composer.window(), "Attach files", "", FILE_FILTER)
        return list(paths)

    def attach_paths(self, paths: list[str]) -> None:
        """Read each file and add its chip; each one that cannot be read is one line (the others are attached)."""
        problems: list[str] = []
        QGuiApplication.setOverrideCursor(Qt.CursorShape.WaitCursor)
        try:
            for path in paths:
                try:
                    document = read_document(path)
                except DocumentError as exc:
                    problems.append(str(exc))
                    continue
                self.tray.add(Attachment.of(document, self._counted.get(document.text)))
        finally:
            QGuiApplication.restoreOverrideCursor()
        if problems:
            self.show_error("; ".join(problems))

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - a Qt override
        """Files dragged onto the chat are attached to the message being written."""
        if watched is self.drop_target and event.type() in (QEvent.Type.DragEnter, QEvent.Type.DragMove):
            assert isinstance(event, QDragEnterEvent)  # DragMove's class derives from it
            if local_files(event.mimeData()) and self.composer.isEnabled():
                event.acceptProposedAction()
                return True
        elif watched is self.drop_target and event.type() == QEvent.Type.Drop:
            assert isinstance(event, QDropEvent)
            files = local_files(event.mimeData())
            if files and self.composer.isEnabled():
                event.acceptProposedAction()
                self.attach_paths(files)
                return True
        return super().eventFilter(watched, event)

    def clear(self) -> None:
        self.tray.clear()

    def set_all(self, attachments: list[Attachment]) -> None:
        self.tray.set_all(attachments)

    # -- the meter ---------------------------------------------------------------------

    def refresh(self) -> None:
        """Show the estimate now and count exactly after typing pauses."""
        used, n_ctx = self._estimate()
        self.meter.show_count(used, n_ctx, estimated=True)
        self._timer.start()

    def forget_counts(self) -> None:
        """Another pair was loaded: its tokenizer counts anew."""
        self._counted.clear()
        self.refresh()

    def messages(self) -> list[dict[str, str]]:
        """The messages a reply to what the composer holds would get: the history, then the message (its
        attachments' text, then its own), as Send builds them."""
        text = self.composer.toPlainText().strip()
        return [*self.history(), {"role": "user", "content": prompt_text(text, self.tray.attachments)}]

    def _estimate(self) -> tuple[int, int]:
        used = sum(estimate_tokens(m["content"]) + TEMPLATE_TOKENS for m in self.messages())
        return used, self.loaded_n_ctx() or self.chosen_n_ctx()

    def count_now(self) -> None:
        """Ask the runtime's thread to count the prompt and the attachments not counted yet."""
        if not self.loaded_n_ctx():
            return
        self._serial += 1
        texts = tuple(a.text for a in self.tray.attachments if a.text not in self._counted)
        self.host.count_tokens(TokenCountRequest(self._serial, self.messages(), texts))
        self._pending_texts = texts

    def _on_counted(self, count: TokenCount) -> None:
        if count.serial != self._serial:
            return  # typing went on since: a newer count is on its way
        self._counted.update(zip(self._pending_texts, count.texts, strict=False))
        for i, attachment in enumerate(self.tray.attachments):
            known = self._counted.get(attachment.text)
            if known is not None and attachment.tokens != known:
                self.tray.blockSignals(True)  # a count is no change to count again
                self.tray.replace_at(i, replace(attachment, tokens=known))
                self.tray.blockSignals(False)
        self.meter.show_count(count.prompt, count.n_ctx, estimated=False)

    # -- a document that does not fit --------------------------------------------------

    def fits(self, send: Callable[[], None]) -> bool:
        """True when the message fits the context with room for a reply; else ask about cutting its largest
        attachment (``send`` runs again once the user accepts the cut) and return False."""
        if not self.tray.attachments:
            return True
        used, n_ctx = (self.meter.used, self.meter.n_ctx) if not self.meter.estimated else self._estimate()
        room_for_reply = min(self.reply_room(), n_ctx // 4)
        if n_ctx <= 0 or used + room_for_reply <= n_ctx:
            return True

        def tokens(a: Attachment) -> int:
            return a.tokens if a.tokens is not None else estimate_tokens(block(a))

        index = max(range(len(self.tray.attachments)), key=lambda i: tokens(self.tray.attachments[i]))
        largest = self.tray.attachments[index]
        room = n_ctx - room_for_reply - (used - tokens(largest)) - TEMPLATE_TOKENS
        self._ask_to_cut(index, largest, room, send)
        return False

    def _ask_to_cut(self, index: int, attachment: Attachment, room: int, send: Callable[[], None]) -> None:
        cut = cut_to(attachment, room)
        box = QMessageBox(self.composer.window())
        box.setWindowTitle("The document does not fit")
        box.setIcon(QMessageBox.Icon.Question if cut is not None else QMessageBox.Icon.Information)
        box.setText(fit_offer(attachment, room))
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        if cut is None:
            box.setStandardButtons(QMessageBox.StandardButton.Ok)
        else:
            box.setInformativeText("The message will say where it was cut. Cancel to change the message instead.")
            accept = box.addButton("Attach the cut", QMessageBox.ButtonRole.AcceptRole)
            box.addButton(QMessageBox.StandardButton.Cancel)
            box.setDefaultButton(accept)

            def accepted() -> None:
                if self.tray.attachments[index : index + 1] == [attachment]:
                    self.tray.replace_at(index, cut)
                    send()

            accept.clicked.connect(accepted)
        box.finished.connect(lambda _result: setattr(self, "fit_box", None))
        self.fit_box = box
        box.open()
