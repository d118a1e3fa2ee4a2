"""The race of a greedy reply against plain decoding: running it, storing it, and replaying both streams.

``RaceController`` asks the engine host for the race (core/chat/race.py: a
speculative and a plain run, interleaved in blocks) and stores its record
with the reply; ``RacePanel`` shows the speculative stream on the left and
the plain one on the right, each revealed round by round at its recorded time
(``RaceReplay``: one single-shot timer aimed at the next recorded round, so
the pace is the recorded one, not a simulation), with both finish times, the
ratio, whether the texts are the same, and a warning where the machine's
speed moved.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QCloseEvent, QPalette, QTextCharFormat, QTextCursor, QTextFormat
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

from specchat.core.cancel import CancelToken
from specchat.core.chat.race import RaceRequest
from specchat.core.chat.race_record import RaceRecord, Timeline, fork_context, summary
from specchat.core.chat.store import ConversationStore
from specchat.core.chat.transcript import Message, TokenSpan, Transcript
from specchat.core.engine.registry import drafter_entry
from specchat.core.types import SpecchatError, TextSource, TokenKind

from .token_styles import blend, kind_colour, reading_format

log = logging.getLogger(__name__)

SPEEDS = (("0.5\u00d7", 0.5), ("1\u00d7", 1.0), ("2\u00d7", 2.0))
SPECULATIVE, PLAIN = 0, 1
PROP_DIFFERENCE = QTextFormat.Property.UserProperty + 20  # marks the first differing token in a pane
MAX_TIMER_MS = 1 << 30  # a QTimer takes a 32-bit count of milliseconds


class RaceReplay(QObject):
    """Replays recorded timelines in real time (times ``speed``): each round shows when its recorded time comes."""

    progressed = Signal(int, int, int, float)  # side, characters shown, tokens shown, the round's recorded seconds
    finished = Signal()

    def __init__(
        self, timelines: Sequence[Timeline], clock: Callable[[], float] = time.monotonic, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self.clock = clock
        self.speed = 1.0
        # (seconds, side, characters so far, tokens so far), in the order they are due
        self.schedule: list[tuple[float, int, int, int]] = []
        for side, timeline in enumerate(timelines):
            chars = tokens = 0
            for seconds, n_tokens, n_chars in timeline:
                chars, tokens = chars + n_chars, tokens + n_tokens
                self.schedule.append((seconds, side, chars, tokens))
        self.schedule.sort(key=lambda e: (e[0], e[1]))
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.timeout.connect(self.tick)
        self._origin = 0.0
        self._next = 0

    @property
    def running(self) -> bool:
        return self.timer.isActive()

    @property
    def shown(self) -> int:
        """How many scheduled rounds have been shown."""
        return self._next

    def elapsed(self) -> float:
        """Recorded seconds reached so far."""
        return (self.clock() - self._origin) * self.speed

    def start(self, speed: float | None = None) -> None:
        """Play from the beginning."""
        if speed is not None:
            self.speed = speed
        self._origin = self.clock()
        self._next = 0
        self.tick()

    def stop(self) -> None:
        self.timer.stop()

    def tick(self) -> None:
        """Show every round whose time has come, then aim the timer at the next one."""
        self.timer.stop()
        now = self.elapsed()
        while self._next < len(self.schedule) and self.schedule[self._next][0] <= now:
            seconds, side, chars, tokens = self.schedule[self._next]
            self._next += 1
            self.progressed.emit(side, chars, tokens, seconds)
        if self._next < len(self.schedule):
            wait = (self.schedule[self._next][0] - now) / self.speed
            # Never early (a float's last bit is no ms); a wait past a QTimer's range is aimed at in steps.
            self.timer.start(max(0, math.ceil(min(wait * 1000, MAX_TIMER_MS) - 1e-6)))
        else:
            self.finished.emit()


class RacePane(QWidget):
    """One stream: its title, its text revealed up to a character count, and its clock."""

    def __init__(self, title: str, segments: list[tuple[str, QTextCharFormat]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.segments = segments
        self.title = QLabel(f"<b>{title}</b>")
        self.text = QTextEdit()
        self.text.setReadOnly(True)
        self.status = QLabel("")
        self.track = QProgressBar()  # how far along its text the stream is: the race at a glance
        self.track.setRange(0, max(1, self.total))
        self.track.setValue(0)
        self.track.setTextVisible(False)
        self.track.setMaximumHeight(8)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.title)
        layout.addWidget(self.track)
        layout.addWidget(self.text, 1)
        layout.addWidget(self.status)
        self._shown = 0

    @property
    def total(self) -> int:
        return sum(len(text) for text, _ in self.segments)

    def clear(self) -> None:
        self.text.clear()
        self.status.clear()
        self.track.setValue(0)
        self._shown = 0

    def reveal(self, chars: int) -> None:
        """Show the text up to ``chars`` characters."""
        chars = min(chars, self.total)
        if chars <= self._shown:
            return
        cursor = self.text.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        start = 0
        for text, fmt in self.segments:
            end = start + len(text)
            a, b = max(start, self._shown), min(end, chars)
            if a < b:
                cursor.insertText(text[a - start : b - start], fmt)
            start = end
            if start >= chars:
                break
        self._shown = chars
        self.track.setValue(chars)
        self.text.setTextCursor(cursor)
        self.text.ensureCursorVisible()

    @property
    def shown_text(self) -> str:
        return self.text.toPlainText()


def marked(segments: list[tuple[str, QTextCharFormat]], start: int, end: int) -> list[tuple[str, QTextCharFormat]]:
    """``segments`` with the characters from ``start`` to ``end`` (at least one) on the rejection colour."""
    end = max(end, start + 1)
    out: list[tuple[str, QTextCharFormat]] = []
    at = 0
    for text, fmt in segments:
        cuts = sorted({0, len(text), *(x - at for x in (start, end) if at < x < at + len(text))})
        for a, b in zip(cuts, cuts[1:], strict=False):
            part = QTextCharFormat(fmt)
            if start < at + b and at + a < end:
                palette = QApplication.palette()
                part.setBackground(
                    blend(palette.color(QPalette.ColorRole.Base), kind_colour(TokenKind.REJECTED, palette), 0.3)
                )
                part.setProperty(PROP_DIFFERENCE, True)
            out.append((text[a:b], part))
        at += len(text)
    return out


def fated_segments(text: str, fates: list[tuple[int, str]], palette: QPalette) -> list[tuple[str, QTextCharFormat]]:
    """``text`` in runs coloured by who wrote them (accepted drafts, the target's own), as in the chat."""
    if sum(n for n, _ in fates) != len(text):
        return [(text, reading_format(None, palette, 0))]
    out: list[tuple[str, QTextCharFormat]] = []
    at = 0
    for n, kind in fates:
        piece = text[at : at + n]
        span = TokenSpan(TokenKind.ACCEPTED if kind == "a" else TokenKind.TARGET, piece)
        out.append((piece, reading_format(span, palette, 0)))
        at += n
    return out


def drafting_label(record: RaceRecord) -> str:
    """How the speculative run drafted: the drafter's label and its depth."""
    try:
        name = drafter_entry(record.drafter).label_for()
    except SpecchatError:
        name = record.drafter or "the default drafter"
    return f"{name}, depth {'auto' if record.depth is None else record.depth}"


class RacePanel(QDialog):
    """Both streams side by side, replayed at their recorded timings, with the finish times and the ratio."""

    def __init__(
        self,
        message: Message,
        record: RaceRecord,
        clock: Callable[[], float] = time.monotonic,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Race: speculative against plain decoding")
        self.resize(900, 560)
        self.message, self.record = message, record
        spec, plain = record.spec, record.plain
        self.spec_timeline: Timeline = list(spec.timeline)
        palette = self.palette()
        spec_segments = fated_segments(spec.text, spec.fates, palette)
        plain_segments = [(plain.text, reading_format(None, palette, 0))]
        if record.fork is not None:  # the first differing token stands out on both sides
            fork = record.fork
            spec_segments = marked(spec_segments, fork.offset, fork.offset + len(fork.spec_piece))
            plain_segments = marked(plain_segments, fork.offset, fork.offset + len(fork.plain_piece))
        self.spec = RacePane(f"Speculative ({drafting_label(record)})", spec_segments)
        self.plain = RacePane(f"Plain decoding ({record.target or 'the target'} alone)", plain_segments)
        self.spec_seconds = spec.finish_seconds
        self.summary = QLabel(summary(self.spec_seconds, plain.finish_seconds).capitalize())
        self.summary.setStyleSheet("QLabel { font-weight: bold; }")
        self.drift = QLabel(record.drift)  # the machine's speed moved: the figure is not to be trusted
        self.drift.setWordWrap(True)
        self.drift.setStyleSheet("QLabel { font-weight: bold; color: #c0392b; }")
        self.drift.setVisible(bool(record.drift))
        self.identity = QLabel(self._identity_text())
        self.identity.setWordWrap(True)
        self.identity.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        recorded = time.strftime("%Y-%m-%d %H:%M", time.localtime(record.recorded_at))
        turns = len(record.blocks)
        self.note = QLabel(
            f"Both runs decoded {recorded} on this machine, taking turns in {turns} blocks so that a "
            f"change in the machine's speed hits both alike; times count each run's own rounds "
            f"(reading the prompt left out). First token after {spec.first_token_seconds:.2f} s "
            f"and {plain.first_token_seconds:.2f} s."
        )
        self.note.setWordWrap(True)
        self.race_again = QPushButton("Race again")
        self.race_again.setToolTip("Decode both runs again and replace this race")
        self.clock_label = QLabel("0.00 s")
        self.replay_button = QPushButton("Replay")
        self.speed = QComboBox()
        for label, value in SPEEDS:
            self.speed.addItem(label, value)
        self.speed.setCurrentIndex(1)
        self.speed.setToolTip("Replay speed")
        close = QPushButton("Close")
        close.clicked.connect(self.close)

        panes = QHBoxLayout()
        panes.addWidget(self.spec, 1)
        panes.addWidget(self.plain, 1)
        controls = QHBoxLayout()
        controls.addWidget(self.replay_button)
        controls.addWidget(self.speed)
        controls.addWidget(self.clock_label)
        controls.addStretch(1)
        controls.addWidget(self.race_again)
        controls.addWidget(close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.summary)
        layout.addWidget(self.drift)
        layout.addLayout(panes, 1)
        layout.addWidget(self.identity)
        layout.addWidget(self.note)
        layout.addLayout(controls)

        self.replay = RaceReplay([self.spec_timeline, plain.timeline], clock, self)
        self.replay.progressed.connect(self._on_progress)
        self.replay.finished.connect(self._on_finished)
        self.replay_button.clicked.connect(self.start)

    def _identity_text(self) -> str:
        record = self.record
        spec_text, plain_text = record.spec.text, record.plain.text
        fork = record.fork
        if fork is None and spec_text == plain_text:
            line = "Identical text: greedy decoding wrote the same reply with and without speculation."
        elif fork is None:  # pieces agree but the texts do not (should not happen): say so plainly
            line = "The texts differ, though every token's text agrees."
        else:
            before, spec_after, plain_after = fork_context(spec_text, plain_text, fork)
            line = (
                f"{fork.describe()[0].upper()}{fork.describe()[1:]}.\n"
                f"Shared: {before!r}\nSpeculative goes on: {spec_after!r}\nPlain goes on: {plain_after!r}"
            )
        if record.reply_fork is not None:
            line += (
                f"\nThe speculative run left the stored reply at token {record.reply_fork} "
                "(the reply in the conversation is unchanged)."
            )
        return line

    def start(self) -> None:
        """Replay both streams from the start at the chosen speed."""
        self.spec.clear()
        self.plain.clear()
        self.clock_label.setText("0.00 s")
        self.replay.start(float(self.speed.currentData()))

    def _on_progress(self, side: int, chars: int, tokens: int, seconds: float) -> None:
        pane = self.spec if side == SPECULATIVE else self.plain
        pane.reveal(chars)
        done = (self.spec_seconds if side == SPECULATIVE else self.record.plain.finish_seconds) <= seconds
        pane.status.setText(f"{'finished in ' if done else ''}{seconds:.2f} s \u00b7 {tokens} tokens")
        self.clock_label.setText(f"{seconds:.2f} s")

    def _on_finished(self) -> None:
        self.clock_label.setText(f"{max(self.spec_seconds, self.record.plain.finish_seconds):.2f} s")

    def closeEvent(self, event: QCloseEvent) -> None:
        self.replay.stop()
        super().closeEvent(event)


class RaceHost(Protocol):
    """What a race needs of the engine host (``worker.WindowRuntimeHost``, or the tests' fake)."""

    @property
    def worker(self) -> QObject: ...

    def race(self, request: RaceRequest) -> CancelToken: ...


class RaceController(QObject):
    """Runs a race on the engine thread (one at a time), stores its record, and says when one is ready to show."""

    started = Signal(int)  # the running race's tokens per run
    progressed = Signal(object)  # RaceProgress of the running race
    ended = Signal()  # the run ended, with a record or not
    cancelled = Signal()  # ended by cancel(): nothing stored
    ready = Signal(object, object)  # Message, RaceRecord: show it
    notice = Signal(str)

    def __init__(
        self,
        store: ConversationStore,
        host: RaceHost,
        transcript: Callable[[], Transcript],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.store = store
        self.host = host
        self.transcript = transcript
        self._running: tuple[RaceRequest, Message] | None = None
        self._token: CancelToken | None = None
        worker = host.worker
        worker.raced.connect(self._on_raced)  # type: ignore[attr-defined]
        worker.race_failed.connect(self._on_failed)  # type: ignore[attr-defined]
        worker.race_progress.connect(self._on_progress)  # type: ignore[attr-defined]

    @property
    def running(self) -> bool:
        return self._running is not None

    def race(
        self,
        message: Message,
        history: list[dict[str, str]],
        *,
        again: bool = False,
        baseline_rate: float = 0.0,
        sources: Sequence[TextSource] = (),
    ) -> bool:
        """Show ``message``'s stored race (unless ``again``), or run one; False if refused (a notice says why).
        ``sources``: the conversation's files, which the speculative run drafts from as the reply did.

        ``baseline_rate``: the pair's measured plain rate, which the race's is checked against where the reply
        has no probe of its own.
        """
        record = RaceRecord.from_dict(message.figures.race if message.figures else None)
        if record is not None and not again:
            self.ready.emit(message, record)
            return True
        if self._running is not None:
            self.notice.emit("a race is already running")
            return False
        try:
            request = RaceRequest.for_reply(message, history, baseline_rate, sources)
        except SpecchatError as exc:
            self.notice.emit(str(exc))
            return False
        self._running = (request, message)
        self._token = self.host.race(request)
        self.started.emit(request.max_tokens)
        return True

    def cancel(self) -> None:
        """Stop the running race (within one round); nothing is stored and the conversation stays as it was."""
        if self._token is not None:
            self._token.cancel()

    def _on_progress(self, request: RaceRequest, progress: object) -> None:
        if self._running is not None and self._running[0] is request:
            self.progressed.emit(progress)

    def _on_raced(self, request: RaceRequest, record: RaceRecord) -> None:
        message = self._take(request)
        if message is None:
            return
        data = record.as_dict()
        try:
            self.store.set_stats_entry(request.message_id, "race", data)
        except sqlite3.Error as exc:
            self.notice.emit(f"the race could not be saved: {exc}")
        shown = [m for m in self.transcript().messages if m.id == request.message_id]
        for m in {id(m): m for m in [message, *shown]}.values():  # the conversation may have been reloaded
            if m.figures is not None:
                m.figures.race = data
        self.ended.emit()
        self.ready.emit(shown[0] if shown else message, record)

    def _on_failed(self, request: RaceRequest, text: str) -> None:
        token = self._token
        if self._take(request) is None:
            return
        self.ended.emit()
        if token is not None and token.cancelled:
            self.cancelled.emit()
        else:
            self.notice.emit(text)

    def _take(self, request: RaceRequest) -> Message | None:
        """The running race's message if ``request`` is its request (and it is then over)."""
        if self._running is None or self._running[0] is not request:
            return None
        message = self._running[1]
        self._running, self._token = None, None
        return message
