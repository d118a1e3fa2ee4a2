"""Draws a reply's Markdown into a QTextDocument, each character in the reading format of its token's fate.

``BodyWriter`` takes the blocks of ``markdown_blocks.parse_blocks`` and inserts
them through a QTextCursor: paragraphs and headings as blocks, lists as
QTextLists, tables as QTextTables, code blocks as framed boxes (monospace,
Pygments colours, a *Copy* link), rules as ruled blocks. A rejection becomes a
small superscript marker before the first character drawn from the source
after it. The writer returns where the last top-level block began, so a
streaming reply can be redrawn from there on each flush.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import (
    QColor,
    QFont,
    QPalette,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextFormat,
    QTextFrameFormat,
    QTextLength,
    QTextList,
    QTextListFormat,
    QTextTableFormat,
)

from specchat.core.chat.transcript import TokenSpan

from .markdown_blocks import FateIndex, Leaf, ListItem, Rejection, Run, TopBlock
from .syntax import PLAIN, Look, highlight
from .token_styles import (
    PROP_CHROME,
    PROP_CODE,
    PROP_MESSAGE,
    REJECTION_MARKER,
    blend,
    is_dark,
    marker_format,
    reading_format,
)

RULER = QTextFormat.Property.BlockTrailingHorizontalRulerWidth
HEADING_SIZES = {1: 3, 2: 2, 3: 1}  # QTextFormat.FontSizeAdjustment steps; h4-h6 stay at body size, bold
_BULLETS = (QTextListFormat.Style.ListDisc, QTextListFormat.Style.ListCircle, QTextListFormat.Style.ListSquare)


def copy_href(message_index: int, source_offset: int) -> str:
    return f"specchat:copy/{message_index}/{source_offset}"


def rejection_href(message_index: int, first_span: int) -> str:
    return f"specchat:rejected/{message_index}/{first_span}"


def code_background(palette: QPalette) -> QColor:
    """The code box's background: the base colour nudged toward the text colour."""
    base, text = palette.color(QPalette.ColorRole.Base), palette.color(QPalette.ColorRole.Text)
    return blend(base, text, 0.09 if is_dark(palette) else 0.045)


@dataclass(frozen=True)
class _Style:
    """Everything besides the span that decides a character's format."""

    bold: bool = False
    italic: bool = False
    strike: bool = False
    code: bool = False  # inline code
    href: str = ""
    heading: int = 0
    quote: bool = False
    block_code: int = -1  # source offset of the code block the character is in, or -1
    look: Look = PLAIN


def new_block(cursor: QTextCursor, fmt: QTextBlockFormat) -> None:
    """Start a block with ``fmt`` after the cursor's block."""
    cursor.insertBlock(fmt, QTextCharFormat())


def _step_out(cursor: QTextCursor, last_position: int) -> None:
    """Move past a frame or table into the block Qt keeps after it, and give that block no height."""
    cursor.setPosition(last_position + 1)
    fmt = QTextBlockFormat()
    fmt.setLineHeight(0, QTextBlockFormat.LineHeightTypes.FixedHeight.value)
    cursor.setBlockFormat(fmt)


class BodyWriter:
    """Writes one message's Markdown blocks; the fates come from ``fates`` (rejections shown when ``markers``)."""

    def __init__(self, palette: QPalette, mono: QFont, message_index: int, fates: FateIndex, markers: bool,
                 body_start: int) -> None:
        self.palette = palette
        self.body_start = body_start  # where the message's body begins (the end of its header line)
        self.mono_families = mono.families()
        self.index = message_index
        self.fates = fates
        self.markers = markers
        self.code_bg = code_background(palette)
        self.dark = is_dark(palette)
        self.text_end: int | None = None  # position just after the last character drawn
        self._queue: deque[Rejection] = deque()
        self._lists: dict[int, QTextList] = {}
        self._formats: dict[tuple[int, _Style], QTextCharFormat] = {}

    # -- blocks ------------------------------------------------------------------------

    def write(self, cursor: QTextCursor, blocks: list[TopBlock], start: int) -> int:
        """Draw ``blocks`` (the message's source from offset ``start`` on); the position where the last one began."""
        if self.markers:
            self._queue = deque(self.fates.rejections_from(start))
        began = cursor.position()
        for i, block in enumerate(blocks):
            began = cursor.position()
            owned_to = blocks[i + 1].start if i + 1 < len(blocks) else None
            for k, leaf in enumerate(block.leaves):
                leaf_began = cursor.position()
                self._leaf(cursor, leaf)
                leaf_to = block.leaves[k + 1].source if k + 1 < len(block.leaves) else owned_to
                self._markers_at_end(cursor, leaf_to, leaf_began)
        if self._queue:  # rejections with no text at all yet
            self._markers_at_end(cursor, None, cursor.position())
        return began

    def _leaf(self, cursor: QTextCursor, leaf: Leaf) -> None:
        if leaf.kind == "code":
            self._code(cursor, leaf)
        elif leaf.kind == "table":
            self._table(cursor, leaf)
        elif leaf.kind == "rule":
            fmt = QTextBlockFormat()
            fmt.setProperty(RULER, QTextLength(QTextLength.Type.PercentageLength, 100))
            new_block(cursor, fmt)
        else:
            self._text(cursor, leaf)

    def _text(self, cursor: QTextCursor, leaf: Leaf) -> None:
        fmt = QTextBlockFormat()
        fmt.setBottomMargin(2 if leaf.item is not None else 6)
        if leaf.heading:
            fmt.setTopMargin(8)
            fmt.setBottomMargin(4)
            fmt.setHeadingLevel(leaf.heading)
        if leaf.item is None:
            fmt.setIndent(leaf.indent)
        new_block(cursor, fmt)
        if leaf.item is not None:
            self._add_to_list(cursor, leaf.item, leaf.indent)
        base = _Style(heading=leaf.heading, quote=leaf.quote, bold=leaf.heading > 0)
        self._runs(cursor, leaf.runs, base)

    def _add_to_list(self, cursor: QTextCursor, item: ListItem, indent: int) -> None:
        listed = self._lists.get(item.list_id)
        if listed is not None:
            listed.add(cursor.block())
            return
        fmt = QTextListFormat()
        fmt.setIndent(indent)
        fmt.setStyle(QTextListFormat.Style.ListDecimal if item.ordered else _BULLETS[item.depth % len(_BULLETS)])
        if item.ordered:
            fmt.setStart(item.start)
        self._lists[item.list_id] = cursor.createList(fmt)

    def _code(self, cursor: QTextCursor, leaf: Leaf) -> None:
        frame_fmt = QTextFrameFormat()
        frame_fmt.setBackground(self.code_bg)
        frame_fmt.setBorder(1)
        frame_fmt.setBorderBrush(self.palette.color(QPalette.ColorRole.Mid))
        frame_fmt.setBorderStyle(QTextFrameFormat.BorderStyle.BorderStyle_Solid)
        frame_fmt.setPadding(6)
        frame_fmt.setTopMargin(2)
        frame_fmt.setBottomMargin(8)
        frame_fmt.setLeftMargin(leaf.indent * 20)
        frame_fmt.setProperty(PROP_CODE, leaf.source)
        frame = cursor.insertFrame(frame_fmt)
        head = QTextBlockFormat()
        head.setAlignment(Qt.AlignmentFlag.AlignRight)
        cursor.setBlockFormat(head)
        chrome = QTextCharFormat()
        chrome.setProperty(PROP_CHROME, True)
        chrome.setProperty(PROP_MESSAGE, self.index)
        chrome.setProperty(PROP_CODE, leaf.source)
        chrome.setProperty(QTextFormat.Property.FontSizeAdjustment, -1)
        if leaf.lang:
            label = QTextCharFormat(chrome)
            label.setForeground(self.palette.color(QPalette.ColorRole.PlaceholderText))
            cursor.insertText(f"{leaf.lang}   ", label)
        link = QTextCharFormat(chrome)
        link.setForeground(self.palette.color(QPalette.ColorRole.Link))
        link.setFontWeight(QFont.Weight.DemiBold)
        link.setAnchor(True)
        link.setAnchorHref(copy_href(self.index, leaf.source))
        link.setToolTip("Copy the code")
        cursor.insertText("Copy", link)
        cursor.insertBlock(QTextBlockFormat())
        at = 0
        for text, look in highlight(leaf.code, leaf.lang, self.dark):
            run = Run(text, leaf.code_offsets[at:at + len(text)])
            at += len(text)
            self._run(cursor, run, _Style(block_code=leaf.source, look=look))
        self.text_end = cursor.position()
        _step_out(cursor, frame.lastPosition())

    def _table(self, cursor: QTextCursor, leaf: Leaf) -> None:
        rows = len(leaf.rows)
        cols = max((len(r) for r in leaf.rows), default=0)
        if not rows or not cols:
            return
        fmt = QTextTableFormat()
        fmt.setBorder(1)
        fmt.setBorderBrush(self.palette.color(QPalette.ColorRole.Mid))
        fmt.setBorderCollapse(True)
        fmt.setCellSpacing(0)
        fmt.setCellPadding(4)
        fmt.setHeaderRowCount(leaf.header_rows)
        fmt.setBottomMargin(8)
        fmt.setLeftMargin(leaf.indent * 20)
        table = cursor.insertTable(rows, cols, fmt)
        for r, row in enumerate(leaf.rows):
            for c, runs in enumerate(row):
                cell = table.cellAt(r, c).firstCursorPosition()
                self._runs(cell, runs, _Style(bold=r < leaf.header_rows))
                self.text_end = cell.position()
        _step_out(cursor, table.lastPosition())

    # -- characters --------------------------------------------------------------------

    def _runs(self, cursor: QTextCursor, runs: list[Run], base: _Style) -> None:
        for run in runs:
            style = _Style(base.bold or run.bold, base.italic or run.italic, run.strike, run.code, run.href,
                           base.heading, base.quote, base.block_code, base.look)
            self._run(cursor, run, style)

    def _run(self, cursor: QTextCursor, run: Run, style: _Style) -> None:
        """Insert ``run`` in pieces that each come from one span, with rejection markers between them."""
        fates, text, offsets = self.fates, run.text, run.offsets
        i, n = 0, len(text)
        while i < n:
            here = offsets[i]
            if self._queue and self._queue[0].offset <= here:
                self._emit_markers(cursor, here)
            span_index, end = self._span_bounds(here)
            j = i + 1
            while j < n and offsets[j] < end and (not self._queue or offsets[j] < self._queue[0].offset):
                j += 1
            span = fates.spans[span_index] if span_index >= 0 else None
            cursor.insertText(text[i:j], self._format(span_index, span, style))
            i = j
        if n:
            self.text_end = cursor.position()

    def _span_bounds(self, offset: int) -> tuple[int, int]:
        """The index of the span covering ``offset`` (-1 for none) and the offset where that span ends."""
        starts = self.fates.starts
        k = bisect.bisect_right(starts, offset) - 1
        if offset >= self.fates.length:
            return -1, 1 << 62
        if k < 0:
            return -1, starts[0] if starts else 1 << 62
        return k, starts[k + 1] if k + 1 < len(starts) else self.fates.length

    def _format(self, span_index: int, span: TokenSpan | None, style: _Style) -> QTextCharFormat:
        key = (span_index, style)
        fmt = self._formats.get(key)
        if fmt is not None:
            return fmt
        in_code = style.code or style.block_code >= 0
        fmt = reading_format(span, self.palette, self.index, self.code_bg if in_code else None)
        if in_code:
            fmt.setFontFamilies(self.mono_families)
            if style.code and not fmt.hasProperty(QTextFormat.Property.BackgroundBrush):
                fmt.setBackground(self.code_bg)
        if style.block_code >= 0:
            fmt.setProperty(PROP_CODE, style.block_code)
            if style.look.colour:
                fmt.setForeground(QColor(style.look.colour))
        if style.bold or style.look.bold:
            fmt.setFontWeight(QFont.Weight.Bold)
        if style.italic or style.look.italic:
            fmt.setFontItalic(True)
        if style.strike:
            fmt.setFontStrikeOut(True)
        if style.heading:
            fmt.setProperty(QTextFormat.Property.FontSizeAdjustment, HEADING_SIZES.get(style.heading, 0))
        if style.quote:
            fmt.setForeground(self.palette.color(QPalette.ColorRole.PlaceholderText))
        if style.href:
            fmt.setAnchor(True)
            fmt.setAnchorHref(style.href)
            fmt.setForeground(self.palette.color(QPalette.ColorRole.Link))
            fmt.setFontUnderline(True)
            fmt.setToolTip(f"{style.href}\n{fmt.toolTip()}" if fmt.toolTip() else style.href)
        self._formats[key] = fmt
        return fmt

    # -- rejection markers -------------------------------------------------------------

    def _emit_markers(self, cursor: QTextCursor, upto: int | None) -> None:
        while self._queue and (upto is None or self._queue[0].offset <= upto):
            rejection = self._queue.popleft()
            fmt = marker_format(rejection.spans, self.palette, self.index,
                                rejection_href(self.index, rejection.first_span))
            cursor.insertText(REJECTION_MARKER, fmt)

    def _markers_at_end(self, cursor: QTextCursor, owned_to: int | None, began: int) -> None:
        """Markers in the source a block owns but after its last character go at the end of its text.

        A block with no text of its own (a rule) takes them itself, so they are redrawn with it.
        """
        if not self._queue or (owned_to is not None and self._queue[0].offset >= owned_to):
            return
        at = QTextCursor(cursor)
        if self.text_end is not None and self.text_end > began:
            at.setPosition(self.text_end)
        elif at.position() == self.body_start:  # not on the header line
            new_block(at, QTextBlockFormat())
        self._emit_markers(at, None if owned_to is None else owned_to - 1)
        self.text_end = at.position()


__all__ = ["BodyWriter", "code_background", "copy_href", "new_block", "rejection_href"]
