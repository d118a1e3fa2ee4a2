"""The Qt binding must not drop references to None, True or False.

PySide6 6.12.0 on CPython 3.11 loses one reference to ``None`` on every call of
a Qt method that returns nothing, and one to ``True`` on every ``emit()``;
after a few thousand such calls (a long chat) CPython aborts with
"none_dealloc". On 3.12+ these objects are immortal and their counts are
fixed, so there the test can only check that nothing moves.
"""

from __future__ import annotations

import gc
import sys

import pytest
from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QTextCharFormat, QTextCursor, QTextDocument, QTextFormat

CALLS = 3000
CHUNK = 50  # iterations between checks: fail on a leak long before CPython would abort
LIMIT = 300  # lost references tolerated; a leaking binding loses ~7 per iteration of the format loop


class Pinger(QObject):
    ping = Signal(list)
    bare = Signal()


def _counts() -> tuple[int, int, int]:
    gc.collect()
    return sys.getrefcount(None), sys.getrefcount(True), sys.getrefcount(False)


def _drift(before: tuple[int, int, int], after: tuple[int, int, int]) -> dict[str, int]:
    return {name: a - b for name, b, a in zip(("None", "True", "False"), before, after, strict=True)}


def _check(before: tuple[int, int, int], done: int, what: str) -> None:
    """Fail as soon as the counts have moved by more than unrelated objects could move them."""
    drift = _drift(before, _counts())
    assert all(abs(d) < LIMIT for d in drift.values()), f"reference counts drifted after {done} {what}: {drift}"


def test_void_qt_calls_of_the_chat_view_keep_reference_counts(qtbot) -> None:
    doc = QTextDocument()
    cursor = QTextCursor(doc)
    colour = QColor("#1a7f37")
    before = _counts()
    for i in range(CALLS):
        fmt = QTextCharFormat()
        fmt.setToolTip("accepted draft · round 1")
        fmt.setProperty(QTextFormat.Property.UserProperty + 1, i)
        fmt.setFontUnderline(True)
        fmt.setFontStrikeOut(False)
        fmt.setFontItalic(False)
        fmt.setFontWeight(QFont.Weight.Bold)
        fmt.setForeground(QBrush(colour))
        if i % 100 == 0:
            cursor.insertText("x", fmt)
        if i % CHUNK == CHUNK - 1:
            _check(before, i + 1, "rounds of void calls")


@pytest.mark.parametrize("with_args", [True, False])
def test_emit_keeps_reference_counts(qtbot, with_args: bool) -> None:
    pinger = Pinger()
    got: list[object] = []
    pinger.ping.connect(got.append)
    pinger.bare.connect(lambda: got.append(None))
    before = _counts()
    for i in range(CALLS):
        if with_args:
            pinger.ping.emit([i])
        else:
            pinger.bare.emit()
        if i % CHUNK == CHUNK - 1:
            got.clear()
            _check(before, i + 1, "emits")
    assert i == CALLS - 1
