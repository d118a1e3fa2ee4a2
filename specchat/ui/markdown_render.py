"""Draws a reply's Markdown into a QTextDocument, each character in the reading format of its token's fate.

``BodyWriter`` takes the blocks of ``markdown_blocks.parse_blocks`` and inserts
them through a QTextCursor: paragraphs and headings as blocks, lists as
QTextLists, tables as QTextTables, code blocks as framed boxes (monospace,
Pygments colours, a *Copy* link), rules as ruled blocks. A rejection becomes a
small superscript marker before the first character drawn from the source
after it. The writer returns a ``Tail``: where a streaming reply is drawn
again from on the next flush (its last top-level block, the last item of a
list that ends it, or the last line of a code block still streaming), so the
cost of a flush does not grow with the reply.
"""

from __future__ import annotations

import bisect
import re
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
    QTextFrame,
    QTextFrameFormat,
    QTextLength,
    QTextList,
    QTextListFormat,
    QTextTableFormat,
)

from specchat.core.chat.transcript import TokenSpan
from specchat.core.types import TokenKind

from .code_marks import code_mark, mark_before, marked
from .markdown_blocks import FateIndex, Leaf, ListItem, Rejection, Run, TopBlock
from .syntax import PLAIN, Look, highlight
from .token_styles import (
    PROP_CHROME,
    PROP_CODE,
    PROP_MESSAGE,
    REJECTION_MARKER,
    accepted_tint,
    annotate,
    blend,
    is_dark,
    marker_format,
)

RULER = QTextFormat.Property.BlockTrailingHorizontalRulerWidth
HEADING_SIZES = {1: 3, 2: 2, 3: 1}  # QTextFormat.FontSizeAdjustment steps; h4-h6 stay at body size, bold
MAX_UNBROKEN_SPANS = 256
"""Tokens of one word (no whitespace between them) drawn each in its own format; the rest of the word is drawn
plain. Qt lays out a word in time quadratic in its format changes: 100,000 tokens without a space took minutes."""
_BREAK = re.compile(r"\s")
_BULLETS = (QTextListFormat.Style.ListDisc, QTextListFormat.Style.ListCircle, QTextListFormat.Style.ListSquare)


def copy_href(message_index: int, source_offset: int) -> str:
    return f"specchat:copy/{message_index}/{source_offset}"


def rejection_href(message_index: int, first_spans: list[int]) -> str:
    return f"specchat:rejected/{message_index}/{'.'.join(str(i) for i in first_spans)}"


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


@dataclass
class CodeTail:
    """A code block still streaming at the end: its whole lines stay, its last line is drawn again."""

    source: int  # the code block's source offset
    fixed: str  # the code drawn that stays (whole lines)
    looks: list[Look]  # the look each drawn character of the code got
    frame_start: int  # document position of the code box


@dataclass
class Tail:
    """Where a streaming reply is drawn again from: a source offset and the document position of that text."""

    src: int
    doc: int
    join: QTextList | None = None  # the list whose items the tail's first list continues
    code: CodeTail | None = None
    text: TextTail | None = None


@dataclass
class TextTail:
    """A tail that is one paragraph (or heading, or list item's text): new text may only be appended."""

    runs: list[Run]  # as drawn
    shape: tuple[object, ...]  # what else decides its look (see ``_shape``)
    end: int  # document position just after its text (and the markers drawn after it)
    rejections: int  # how many rejections of the message were drawn


def _shape(leaf: Leaf) -> tuple[object, ...]:
    item = leaf.item
    return (leaf.kind, leaf.heading, leaf.indent, leaf.quote, None if item is None else (item.ordered, item.depth))


def _appended(drawn: list[Run], runs: list[Run]) -> list[Run] | None:
    """The runs that ``runs`` adds after ``drawn``, or None if it changes anything already drawn."""
    if not drawn or len(runs) < len(drawn):
        return None
    last = len(drawn) - 1
    if drawn[:last] != runs[:last]:
        return None
    old, new = drawn[last], runs[last]
    n = len(old.text)
    style = (new.bold, new.italic, new.strike, new.code, new.href)
    if (
        new.text[:n] != old.text
        or new.offsets[:n] != old.offsets
        or (old.bold, old.italic, old.strike, old.code, old.href) != style
    ):
        return None
    rest = [Run(new.text[n:], new.offsets[n:], *style)] if new.text[n:] else []
    return rest + runs[last + 1 :]


def _per_char(runs: list[tuple[str, Look]]) -> list[Look]:
    return [look for text, look in runs for _ in text]


def _runs_from(runs: list[tuple[str, Look]], start: int) -> list[tuple[str, Look]]:
    """``runs`` from character ``start`` on."""
    out, at = [], 0
    for text, look in runs:
        if at + len(text) > start:
            out.append((text[max(0, start - at) :], look))
        at += len(text)
    return out


def remove_range(cursor: QTextCursor, start: int, end: int | None = None) -> None:
    """Remove the text from ``start`` to ``end`` (the document's end by default), leaving the cursor there.

    The block at ``start`` keeps its own format and list: when it is empty, Qt would otherwise hand it
    those of the block after the removed separator.
    """
    cursor.setPosition(start)
    block = cursor.block()
    kept = block.blockFormat()
    if end is None:
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
    else:
        cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
    cursor.removeSelectedText()
    block = cursor.block()
    if block.blockFormat() != kept:
        listed = block.textList()
        if listed is not None and listed.objectIndex() != kept.objectIndex():
            listed.remove(block)
        cursor.setBlockFormat(kept)


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

    def __init__(
        self, palette: QPalette, mono: QFont, message_index: int, fates: FateIndex, markers: bool, body_start: int
    ) -> None:
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
        self._join: QTextList | None = None
        self._span_formats: dict[tuple[int, bool], QTextCharFormat] = {}
        self._colours: dict[str, QColor] = {}
        self._text_colour = palette.color(QPalette.ColorRole.Text)
        self._link = palette.color(QPalette.ColorRole.Link)
        self._quote = palette.color(QPalette.ColorRole.PlaceholderText)
        self._tint = accepted_tint(palette)
        self._tint_code = accepted_tint(palette, self.code_bg)
        self._last_frame: QTextFrame | None = None
        self._last_looks: list[Look] = []
        self._formats: dict[tuple[int, _Style], QTextCharFormat] = {}
        self._unbroken = 0  # spans drawn since the last whitespace
        self._held: list[Rejection] = []  # rejections inside code, marked on the next code character
        self._code_end: int | None = None  # where the last code block's text ends

    # -- blocks ------------------------------------------------------------------------

    def write(self, cursor: QTextCursor, blocks: list[TopBlock], start: int, join: QTextList | None = None) -> Tail:
        """Draw ``blocks`` (the message's source from offset ``start`` on) and say where to draw again from.

        ``join``: the list that the first top-level list drawn continues (the tail began at one of its items).
        """
        if self.markers:
            self._queue = deque(self.fates.rejections_from(start))
        tail = self._blocks(cursor, blocks, Tail(start, cursor.position(), join))
        if self._queue:  # rejections with no text at all yet
            self._markers_at_end(cursor, None, cursor.position())
        return tail

    def _blocks(self, cursor: QTextCursor, blocks: list[TopBlock], tail: Tail) -> Tail:
        join = self._join = tail.join
        for i, block in enumerate(blocks):
            tail = Tail(block.start, cursor.position(), join if i == 0 else None)
            owned_to = blocks[i + 1].start if i + 1 < len(blocks) else None
            items = set(block.items[1:])
            first = 0  # the first leaf the tail covers
            for k, leaf in enumerate(block.leaves):
                leaf_began = cursor.position()
                self._leaf(cursor, leaf)
                if leaf.source in items and leaf.item is not None and leaf.item.depth == 0:
                    tail = Tail(leaf.source, leaf_began, self._lists.get(leaf.item.list_id))
                    first = k
                leaf_to = block.leaves[k + 1].source if k + 1 < len(block.leaves) else owned_to
                self._markers_at_end(cursor, leaf_to, leaf_began)
            covered = block.leaves[first:]
            if len(covered) == 1 and covered[0].kind == "text" and self.text_end is not None:
                tail.text = TextTail(covered[0].runs, _shape(covered[0]), self.text_end, len(self.fates.rejections))
            if len(block.leaves) == 1 and self._last_frame is not None:
                tail.code = self._code_tail(block.leaves[0], self._last_frame, self._last_looks)
        return tail

    def write_tail(self, cursor: QTextCursor, blocks: list[TopBlock], tail: Tail, final: bool = False) -> Tail:
        """Draw ``blocks`` (parsed from ``tail.src``) in place of what ``tail`` covers, touching as little as can be.

        A paragraph that only gained text at its end gets just that text. A code block that was streaming
        keeps its whole lines and only its last line is drawn again, its new text coloured on its own; once
        it is complete (more blocks follow, or ``final``) it is coloured as a whole and drawn again from the
        first line whose colours that changes. Anything else is removed and drawn again.
        """
        only = blocks[0].leaves[0] if len(blocks) == 1 and len(blocks[0].leaves) == 1 else None
        if tail.text is not None and only is not None and _shape(only) == tail.text.shape:
            more = _appended(tail.text.runs, only.runs)
            drawn = self.fates.rejections[: tail.text.rejections]
            # a marker after the last character would have to merge with new ones or move: draw it all again
            if more is not None and (not drawn or drawn[-1].offset <= tail.text.runs[-1].offsets[-1]):
                return self._append_text(cursor, only, more, tail, tail.text)
        code = tail.code
        first = blocks[0].leaves[0] if blocks and len(blocks[0].leaves) == 1 else None
        if (
            code is not None
            and first is not None
            and first.kind == "code"
            and first.source == code.source
            and first.code.startswith(code.fixed)
        ):
            return self._resume_code(cursor, blocks, first, tail, code, final or len(blocks) > 1)
        remove_range(cursor, tail.doc)
        return self.write(cursor, blocks, tail.src, tail.join)

    def _resume_code(
        self, cursor: QTextCursor, blocks: list[TopBlock], leaf: Leaf, tail: Tail, code: CodeTail, complete: bool
    ) -> Tail:
        k, whole = len(code.fixed), None
        if complete:
            whole = highlight(leaf.code, leaf.lang, self.dark)
            looks = _per_char(whole)
            differs = next((i for i in range(k) if looks[i] != code.looks[i]), k)
            k = leaf.code.rfind("\n", 0, differs) + 1 if differs < k else k
        block = cursor.document().findBlock(code.frame_start + 1).next()  # the first code line
        for _ in range(leaf.code.count("\n", 0, k)):
            block = block.next()
        line = block.position()
        cursor.setPosition(line)
        box = cursor.currentFrame()
        remove_range(cursor, line, box.lastPosition())
        after = QTextCursor(cursor)
        remove_range(after, box.lastPosition() + 1)
        if self.markers:
            self._queue = deque(self.fates.rejections_from(leaf.code_offsets[k - 1] + 1 if k else leaf.source))
        looks_drawn = code.looks[:k] + self._code_text(cursor, leaf, k, whole)
        self._markers_at_end(cursor, blocks[1].start if len(blocks) > 1 else None, line)
        if len(blocks) == 1:
            return Tail(tail.src, tail.doc, None, self._code_tail(leaf, box, looks_drawn))
        rest = self._blocks(after, blocks[1:], Tail(blocks[1].start, after.position()))
        if self._queue:
            self._markers_at_end(after, None, after.position())
        return rest

    def _append_text(self, cursor: QTextCursor, leaf: Leaf, more: list[Run], tail: Tail, text: TextTail) -> Tail:
        """Draw what a paragraph at the end gained, after its text: nothing drawn before changes."""
        cursor.setPosition(text.end)
        self.text_end = text.end
        if self.markers:
            self._queue = deque(self.fates.rejections[text.rejections :])
        self._runs(cursor, more, _Style(heading=leaf.heading, quote=leaf.quote, bold=leaf.heading > 0))
        self._markers_at_end(cursor, None, tail.doc)
        grown = TextTail(leaf.runs, text.shape, self.text_end, len(self.fates.rejections))
        return Tail(tail.src, tail.doc, tail.join, None, grown)

    def _code_tail(self, leaf: Leaf, frame: QTextFrame, looks: list[Look]) -> CodeTail | None:
        k = leaf.code.rfind("\n") + 1
        if not leaf.fenced or leaf.indent or k == 0:
            return None
        return CodeTail(leaf.source, leaf.code[:k], looks, frame.firstPosition())

    def _leaf(self, cursor: QTextCursor, leaf: Leaf) -> None:
        self._last_frame = None
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
        if listed is None and item.list_id == 0 and self._join is not None:  # the list the parse began in
            listed = self._lists[item.list_id] = self._join
            self._join = None
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
        self._last_looks = self._code_text(cursor, leaf, 0)
        self._last_frame = frame
        _step_out(cursor, frame.lastPosition())

    def _code_text(
        self, cursor: QTextCursor, leaf: Leaf, start: int, whole: list[tuple[str, Look]] | None = None
    ) -> list[Look]:
        """Draw the code from character ``start`` on; the look of each character drawn.

        Its colours come from ``whole`` (the whole block lexed) or else from lexing that part on its own.
        """
        runs = highlight(leaf.code[start:], leaf.lang, self.dark) if whole is None else _runs_from(whole, start)
        at = start
        for text, look in runs:
            run = Run(text, leaf.code_offsets[at : at + len(text)])
            at += len(text)
            self._run(cursor, run, _Style(block_code=leaf.source, look=look))
        self.text_end = self._code_end = cursor.position()
        return _per_char(runs)

    def _table(self, cursor: QTextCursor, leaf: Leaf) -> None:
        rows = len(leaf.rows)
        cols = max((len(r) for r in leaf.rows), default=0)
        if not rows or not cols:
            return
        fmt = QTextTableFormat()
        fmt.setBorder(1)
        fmt.setBorderBrush(self.palette.color(QPalette.ColorRole.Mid))
        fmt.setBorderStyle(QTextFrameFormat.BorderStyle.BorderStyle_Solid)
        fmt.setBorderCollapse(True)
        fmt.setCellSpacing(0)
        fmt.setCellPadding(5)
        fmt.setHeaderRowCount(leaf.header_rows)
        fmt.setTopMargin(4)
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
            style = _Style(
                base.bold or run.bold,
                base.italic or run.italic,
                run.strike,
                run.code,
                run.href,
                base.heading,
                base.quote,
                base.block_code,
                base.look,
            )
            self._run(cursor, run, style)

    def _run(self, cursor: QTextCursor, run: Run, style: _Style) -> None:
        """Insert ``run`` in pieces that each come from one span, with rejection markers between them."""
        fates, text, offsets = self.fates, run.text, run.offsets
        i, n = 0, len(text)
        while i < n:
            here = offsets[i]
            if self._queue and self._queue[0].offset <= here:
                if style.block_code >= 0 or style.code:  # inside code: no mark between characters (code_marks.py)
                    self._hold_markers(here)
                else:
                    self._emit_markers(cursor, here)
            span_index, end = self._span_bounds(here)
            j = i + 1
            while j < n and offsets[j] < end and (not self._queue or offsets[j] < self._queue[0].offset):
                j += 1
            span = fates.spans[span_index] if span_index >= 0 else None
            piece = text[i:j]
            self._unbroken = 0 if _BREAK.search(piece) else self._unbroken + 1
            if self._unbroken > MAX_UNBROKEN_SPANS:  # the rest of this word in one format: see MAX_UNBROKEN_SPANS
                span_index, span = -1, None
            fmt = self._format(span_index, span, style)
            if self._held and piece[0] == "\n" and cursor.charFormat().property(PROP_CODE) == style.block_code:
                mark_before(cursor, cursor.position(), self._take_held())  # a line's end: its last character
            elif self._held:
                cursor.insertText(piece[0], marked(fmt, self._take_held()))
                piece = piece[1:]
            if piece:
                cursor.insertText(piece, fmt)
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
        fmt = QTextCharFormat(self._span_format(span_index, span, in_code))
        if in_code:
            fmt.setFontFamilies(self.mono_families)
            if style.code and not fmt.hasProperty(QTextFormat.Property.BackgroundBrush):
                fmt.setBackground(self.code_bg)
        if style.block_code >= 0:
            fmt.setProperty(PROP_CODE, style.block_code)
            if style.look.colour:
                fmt.setForeground(self._colour(style.look.colour))
        if style.bold or style.look.bold:
            fmt.setFontWeight(QFont.Weight.Bold)
        if style.italic or style.look.italic:
            fmt.setFontItalic(True)
        if style.strike:
            fmt.setFontStrikeOut(True)
        if style.heading:
            fmt.setProperty(QTextFormat.Property.FontSizeAdjustment, HEADING_SIZES.get(style.heading, 0))
        if style.quote:
            fmt.setForeground(self._quote)
        if style.href:
            fmt.setAnchor(True)
            fmt.setAnchorHref(style.href)
            fmt.setForeground(self._link)
            fmt.setFontUnderline(True)
            fmt.setToolTip(f"{style.href}\n{fmt.toolTip()}" if fmt.toolTip() else style.href)
        self._formats[key] = fmt
        return fmt

    def _span_format(self, span_index: int, span: TokenSpan | None, in_code: bool) -> QTextCharFormat:
        """The reading format of a span's text (or of text with no span), made once per span and context."""
        key = (span_index, in_code)
        fmt = self._span_formats.get(key)
        if fmt is None:
            fmt = QTextCharFormat()
            fmt.setForeground(self._text_colour)
            fmt.setProperty(PROP_MESSAGE, self.index)
            if span is not None:
                if span.kind is TokenKind.ACCEPTED:
                    fmt.setBackground(self._tint_code if in_code else self._tint)
                annotate(fmt, span, self.index)
            self._span_formats[key] = fmt
        return fmt

    def _colour(self, name: str) -> QColor:
        colour = self._colours.get(name)
        if colour is None:
            colour = self._colours[name] = QColor(name)
        return colour

    # -- rejection markers -------------------------------------------------------------

    def _emit_markers(self, cursor: QTextCursor, upto: int | None) -> None:
        """One marker for the rejections due here (several when markup between them is not drawn)."""
        due: list[Rejection] = []
        while self._queue and (upto is None or self._queue[0].offset <= upto):
            due.append(self._queue.popleft())
        if due:
            href = rejection_href(self.index, [r.first_span for r in due])
            cursor.insertText(REJECTION_MARKER, marker_format([r.spans for r in due], self.palette, self.index, href))

    def _hold_markers(self, upto: int | None) -> None:
        while self._queue and (upto is None or self._queue[0].offset <= upto):
            self._held.append(self._queue.popleft())

    def _take_held(self) -> QTextCharFormat:
        due, self._held = self._held, []
        return code_mark([r.spans for r in due], self.palette)

    def _markers_at_end(self, cursor: QTextCursor, owned_to: int | None, began: int) -> None:
        """Markers in the source a block owns but after its last character go at the end of its text.

        A block with no text of its own (a rule) takes them itself, so they are redrawn with it. After a code
        block's text they mark its last character instead (code_marks.py).
        """
        if not self._queue or (owned_to is not None and self._queue[0].offset >= owned_to):
            return
        end = self.text_end
        if end is not None and end == self._code_end and end > began:
            self._hold_markers(None if owned_to is None else owned_to - 1)
            mark_before(cursor, end, self._take_held())
            return
        at = QTextCursor(cursor)
        if self.text_end is not None and self.text_end > began:
            at.setPosition(self.text_end)
        elif at.position() == self.body_start:  # not on the header line
            new_block(at, QTextBlockFormat())
        self._emit_markers(at, None if owned_to is None else owned_to - 1)
        self.text_end = at.position()


__all__ = [
    "BodyWriter",
    "CodeTail",
    "Tail",
    "TextTail",
    "code_background",
    "copy_href",
    "new_block",
    "rejection_href",
    "remove_range",
]
