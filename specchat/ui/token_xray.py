"""The token X-ray: a small popup showing why one token was drafted, accepted or rejected.

Clicking a token in the chat view opens it (``ChatView.show_xray``). It shows
the token's round and draft position, who drafted it, the draft's q(x) and
the target's p(x), the acceptance probability min(1, p/q) at T > 0 (at T = 0:
whether the draft was the target's argmax), both top-5 lists, and for a
rejection the token the target chose instead. Everything comes from the
span's ``TokenDetail``, so a reply loaded from the store shows the same.
Escape or a click elsewhere closes it (it is a Qt popup).
"""

from __future__ import annotations

import html

from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QAction, QGuiApplication, QKeyEvent, QKeySequence
from PySide6.QtWidgets import QFrame, QLabel, QVBoxLayout, QWidget

from specchat.core.chat.transcript import TokenDetail, TokenSpan
from specchat.core.engine.verify import TOP_N
from specchat.core.types import TokenKind

from .token_styles import KIND_LABELS, drafted_by, kind_colour, shown_round

MAX_SHOWN_CHARS = 80  # of a token's text
_VISIBLE = {" ": "\u2423", "\n": "\u23ce", "\t": "\u21e5", "\r": "\u240d"}  # ␣ ⏎ ⇥ ␍


def readable(text: str) -> str:
    """A token's text with spaces, newlines and tabs made visible (∅ for a token with no text).

    At most ``MAX_SHOWN_CHARS`` characters are shown, then an ellipsis (a stored token can be any length).
    """
    if not text:
        return "\u2205"
    cut = text[:MAX_SHOWN_CHARS]
    return "".join(_VISIBLE.get(c, c) for c in cut) + ("\u2026" if len(text) > MAX_SHOWN_CHARS else "")


def _quoted(text: str) -> str:
    return f"\u201c{html.escape(readable(text), quote=False)}\u201d"


def where(span: TokenSpan, detail: TokenDetail, passes: int = 0) -> str:
    """The round (counted from 1, "of" the reply's target passes when known) and the draft position, in words."""
    number = shown_round(span.round)
    of = f" of {passes}" if passes >= number else ""
    if detail.position == 0:
        return f"round {number}{of} · the target's token after the drafts"
    return f"round {number}{of} · draft position {detail.position}"


def verdict(span: TokenSpan, detail: TokenDetail) -> str:
    """How the target judged the token (rich text): acceptance probability, argmax match, or why not judged."""
    if detail.position == 0:
        if detail.replaced is not None:
            return f"replaces the rejected draft {_quoted(detail.replaced)}"
        return "the bonus token: every draft of the round was accepted"
    if not detail.judged:
        return "not judged: an earlier draft of this round was rejected, so this one was dropped unseen"
    if detail.greedy:
        return "argmax matched" if span.kind is TokenKind.ACCEPTED else "argmax differed"
    p, q = span.target_prob, span.draft_prob
    if p is None or q is None or q <= 0.0:
        return "acceptance probability unknown"
    return f"acceptance probability min(1, p/q) = {min(1.0, p / q):.3f}"


def top_title(whose: str, entries: tuple[tuple[str, float], ...], symbol: str) -> str:
    """A top list's heading by how many entries it shows: "target's top 3 (p)", "draft's top token (q)"."""
    n = min(len(entries), TOP_N)
    return f"{whose}'s top {n} ({symbol})" if n > 1 else f"{whose}'s top token ({symbol})"


def top_table(title: str, entries: tuple[tuple[str, float], ...], mark: str) -> str:
    """One top list (at most ``TOP_N``) as an HTML table, ``mark`` (the token itself) in bold."""
    rows = (
        "".join(
            f"<tr><td>{'<b>' if text == mark else ''}{_quoted(text)}{'</b>' if text == mark else ''}</td>"
            f"<td align='right'>&nbsp;{p:.3f}</td></tr>"
            for text, p in entries[:TOP_N]
        )
        or "<tr><td>–</td></tr>"
    )
    return f"<table cellspacing='0' cellpadding='1'><tr><th align='left' colspan='2'>{title}</th></tr>{rows}</table>"


def _prob(p: float | None) -> str:
    return "n/a" if p is None else f"{p:.3f}"


class TokenXray(QFrame):
    """The X-ray popup for one token; ``show_span`` fills and opens it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Popup)
        self.setObjectName("token-xray")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose, False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 8, 10, 8)
        layout.setSpacing(4)
        self.heading = QLabel()
        self.where = QLabel()
        self.source = QLabel()
        self.probs = QLabel()
        self.verdict = QLabel()
        self.verdict.setWordWrap(True)
        self.correction = QLabel()
        self.tops = QLabel()
        for label in (self.heading, self.where, self.source, self.probs, self.verdict, self.correction, self.tops):
            label.setTextFormat(Qt.TextFormat.RichText)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            layout.addWidget(label)
        self.span: TokenSpan | None = None

    def show_span(self, span: TokenSpan, at: QPoint, passes: int = 0) -> bool:
        """Show ``span``'s X-ray near global position ``at``; False (nothing shown) for a span without detail.

        ``passes``: the reply's target passes (its rounds), for "round 3 of 40"; 0 when not known.
        """
        detail = span.detail
        if detail is None:
            return False
        self.span = span
        colour = kind_colour(span.kind, self.palette()).name()
        self.heading.setText(
            f"<b style='font-size: large'>{_quoted(span.text)}</b> &nbsp;"
            f"<span style='color: {colour}'>{KIND_LABELS[span.kind]}</span>"
        )
        self.where.setText(where(span, detail, passes))
        self.source.setText(html.escape(drafted_by(detail), quote=False))
        if detail.position == 0:
            self.probs.setText(f"p(x) = {_prob(span.target_prob)} (target)")
        else:
            self.probs.setText(f"q(x) = {_prob(span.draft_prob)} (draft) · p(x) = {_prob(span.target_prob)} (target)")
        self.verdict.setText(verdict(span, detail))
        self.correction.setVisible(detail.correction is not None)
        if detail.correction is not None:
            self.correction.setText(f"the target chose <b>{_quoted(detail.correction)}</b> instead")
        lists = [top_table(top_title("target", detail.target_top, "p"), detail.target_top, span.text)]
        if detail.position:
            lists.append(top_table(top_title("draft", detail.draft_top, "q"), detail.draft_top, span.text))
        cells = "<td width='20'></td>".join(f"<td valign='top'>{t}</td>" for t in lists)
        self.tops.setText(f"<table cellspacing='0' cellpadding='0'><tr>{cells}</tr></table>")
        self.adjustSize()
        self.move(self._placed(at))
        self.show()
        return True

    def _placed(self, at: QPoint) -> QPoint:
        """Just below and right of ``at``, kept on its screen."""
        pos = at + QPoint(12, 16)
        screen = QGuiApplication.screenAt(at) or QGuiApplication.primaryScreen()
        if screen is not None:
            area = screen.availableGeometry()
            size = self.sizeHint()
            pos.setX(max(area.left(), min(pos.x(), area.right() - size.width())))
            if pos.y() + size.height() > area.bottom():
                pos.setY(max(area.top(), at.y() - size.height() - 8))
        return pos

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Escape:
            self.close()
            event.accept()
            return
        action = self._window_action(event)
        if action is not None:  # a popup takes every key: the window's shortcuts (Ctrl+Q) would go unanswered
            self.close()
            action.trigger()
            event.accept()
            return
        super().keyPressEvent(event)

    def _window_action(self, event: QKeyEvent) -> QAction | None:
        """The enabled action of the window under this popup whose shortcut ``event`` is, if any."""
        parent = self.parentWidget()
        if parent is None or not event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier:
            return None
        pressed = QKeySequence(event.keyCombination())
        for action in parent.window().findChildren(QAction):
            if action.isEnabled() and any(
                key.matches(pressed) == QKeySequence.SequenceMatch.ExactMatch for key in action.shortcuts()
            ):
                return action
        return None
