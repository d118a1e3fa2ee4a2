"""A reply's Markdown as blocks of text runs, each character tied to its offset in the source.

No Qt here. markdown-it-py parses the source (CommonMark plus tables and
strikethrough); this module walks its tokens and, for every rendered
character, finds the source character it came from by scanning forward
through the source in step with the rendered text (markup such as ``**`` or a
list bullet is skipped over because it never appears in the rendered text).
The view then gives each character the fate of the token span covering that
offset. ``FateIndex`` answers "which span covers offset N" and "where were
drafts rejected" for one message's spans.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from markdown_it import MarkdownIt
from markdown_it.token import Token

from specchat.core.chat.transcript import TokenSpan
from specchat.core.types import TokenKind

_MD = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])

LINE_BREAK = "\u2028"  # a line break inside a paragraph (Qt's QChar::LineSeparator)


@dataclass
class Run:
    """Rendered text in one inline style; ``offsets[i]`` is the source offset of ``text[i]``."""

    text: str
    offsets: list[int]
    bold: bool = False
    italic: bool = False
    strike: bool = False
    code: bool = False
    href: str = ""


@dataclass
class ListItem:
    """Where a paragraph opens a list item: which list (unique per parse), its kind and depth."""

    list_id: int
    ordered: bool
    start: int
    depth: int


@dataclass
class Leaf:
    """One rendered block: ``text`` (paragraph, heading, list item), ``code``, ``rule`` or ``table``."""

    kind: str
    runs: list[Run] = field(default_factory=list)
    heading: int = 0
    indent: int = 0  # list and quote nesting
    quote: bool = False
    item: ListItem | None = None
    lang: str = ""
    fenced: bool = False
    code: str = ""
    code_offsets: list[int] = field(default_factory=list)
    source: int = 0  # source offset where the leaf starts (a code block's id for copying)
    rows: list[list[list[Run]]] = field(default_factory=list)
    header_rows: int = 0


@dataclass
class TopBlock:
    """A top-level Markdown block; it owns the source from ``start`` to the next block's start.

    ``items`` holds where each item of a top-level list begins: a list can be drawn again from its last item.
    """

    start: int
    leaves: list[Leaf]
    items: list[int] = field(default_factory=list)


def same_length_source(text: str) -> str:
    """``text`` with what markdown-it would rewrite (CR, NUL) replaced one for one, so offsets hold."""
    return text.replace("\r", " ").replace("\0", "\ufffd")


class _Walker:
    """Walks markdown-it tokens in source order with one forward-moving source pointer."""

    def __init__(self, source: str, base: int) -> None:
        self.source = same_length_source(source)
        self.base = base
        self.lines = [0] + [i + 1 for i, ch in enumerate(self.source) if ch == "\n"]
        self.pos = 0
        self.lists: list[ListItem] = []
        self.quote = 0
        self.next_list_id = 0
        self.item_pending = False
        self.heading = 0

    def line(self, n: int) -> int:
        return self.lines[n] if n < len(self.lines) else len(self.source)

    def seek(self, n: int) -> None:
        self.pos = max(self.pos, self.line(n))

    def align(self, text: str, end: int) -> list[int]:
        """Source offsets of ``text``'s characters, scanning forward from the pointer up to ``end``."""
        src, offsets = self.source, []
        for ch in text:
            want = "\n" if ch == LINE_BREAK else ch
            hit = src.find(want, self.pos, end) if self.pos < end else -1
            if hit < 0:
                offsets.append(self.base + min(self.pos, max(end - 1, 0)))
            else:
                offsets.append(self.base + hit)
                self.pos = hit + 1
        return offsets

    def skip_marker(self, chars: str) -> None:
        """Step over leading spaces, then ``chars`` (a bullet, digits, ``#``), then spaces."""
        src, i = self.source, self.pos
        while i < len(src) and src[i] in " \t>":
            i += 1
        while i < len(src) and src[i] in chars:
            i += 1
        while i < len(src) and src[i] in " \t":
            i += 1
        self.pos = i

    def inline(self, token: Token) -> list[Run]:
        end = self.line(token.map[1]) if token.map else len(self.source)
        runs: list[Run] = []
        bold = italic = strike = 0
        hrefs: list[str] = []

        def add(text: str, code: bool = False) -> None:
            if text:
                runs.append(
                    Run(text, self.align(text, end), bold > 0, italic > 0, strike > 0, code, hrefs[-1] if hrefs else "")
                )

        for child in token.children or []:
            kind = child.type
            if kind in ("text", "html_inline", "text_special"):
                add(child.content)
            elif kind == "code_inline":
                add(child.content, code=True)
            elif kind in ("softbreak", "hardbreak"):  # kept as written: poems and addresses keep their lines
                add(LINE_BREAK)
            elif kind == "image":
                italic += 1
                add(child.content or "image")
                italic -= 1
            elif kind in ("strong_open", "strong_close"):
                bold += 1 if kind.endswith("open") else -1
            elif kind in ("em_open", "em_close"):
                italic += 1 if kind.endswith("open") else -1
            elif kind in ("s_open", "s_close"):
                strike += 1 if kind.endswith("open") else -1
            elif kind == "link_open":
                hrefs.append(str(child.attrs.get("href", "")))
            elif kind == "link_close" and hrefs:
                hrefs.pop()
        return runs

    def leaf(self, kind: str, start: int, **values: object) -> Leaf:
        item = None
        if kind == "text" and self.item_pending and self.lists:
            item = self.lists[-1]
            self.item_pending = False
        indent = len(self.lists) + self.quote
        return Leaf(kind, indent=indent, quote=self.quote > 0, item=item, source=self.base + start, **values)  # type: ignore[arg-type]


def parse_blocks(source: str, base: int = 0) -> list[TopBlock]:
    """Parse ``source`` (which starts at offset ``base`` of the whole message) into top-level blocks."""
    walker = _Walker(source, base)
    blocks: list[TopBlock] = []
    tokens = _MD.parse(walker.source)
    i = 0
    table: Leaf | None = None
    row: list[list[Run]] | None = None
    while i < len(tokens):
        token = tokens[i]
        kind = token.type
        if token.level == 0 and token.nesting >= 0 and token.map is not None:
            blocks.append(TopBlock(base + walker.line(token.map[0]), []))
        leaves = blocks[-1].leaves if blocks else []
        if kind in ("bullet_list_open", "ordered_list_open"):
            ordered = kind == "ordered_list_open"
            start = int(token.attrs.get("start", 1)) if ordered else 1
            walker.lists.append(ListItem(walker.next_list_id, ordered, start, len(walker.lists)))
            walker.next_list_id += 1
        elif kind in ("bullet_list_close", "ordered_list_close"):
            walker.lists.pop()
        elif kind == "list_item_open":
            walker.item_pending = True
            if token.map:
                walker.seek(token.map[0])
                if token.level == 1 and blocks:
                    blocks[-1].items.append(base + walker.line(token.map[0]))
            walker.skip_marker("-+*0123456789.)")
        elif kind == "blockquote_open":
            walker.quote += 1
        elif kind == "blockquote_close":
            walker.quote -= 1
        elif kind == "heading_open":
            walker.heading = int(token.tag[1:]) if token.tag[1:].isdigit() else 1
            if token.map:
                walker.seek(token.map[0])
            walker.skip_marker("#")
        elif kind == "heading_close":
            walker.heading = 0
        elif kind == "table_open":
            table = walker.leaf("table", walker.line(token.map[0]) if token.map else walker.pos)
            leaves.append(table)
        elif kind == "table_close":
            table = None
        elif kind == "thead_close" and table is not None:
            table.header_rows = len(table.rows)
        elif kind == "tr_open" and table is not None:
            row = []
            table.rows.append(row)
            if token.map:
                walker.seek(token.map[0])
        elif kind == "inline":
            if token.map:
                walker.seek(token.map[0])
            runs = walker.inline(token)
            if row is not None and table is not None:
                row.append(runs)
            else:
                start = walker.line(token.map[0]) if token.map else walker.pos
                leaves.append(walker.leaf("text", start, runs=runs, heading=walker.heading))
        elif kind == "tr_close":
            row = None
        elif kind in ("fence", "code_block") and token.map:
            walker.seek(token.map[0] + (1 if kind == "fence" else 0))
            end = walker.line(token.map[1])
            code = token.content.removesuffix("\n")
            lang = token.info.strip().split(" ")[0] if kind == "fence" else ""
            leaf = walker.leaf(
                "code",
                walker.line(token.map[0]),
                lang=lang,
                code=code,
                fenced=kind == "fence",
                code_offsets=walker.align(code, end),
            )
            walker.item_pending = False
            leaves.append(leaf)
        elif kind == "hr":
            leaves.append(walker.leaf("rule", walker.line(token.map[0]) if token.map else walker.pos))
        elif kind == "html_block" and token.map:
            walker.seek(token.map[0])
            text = token.content.rstrip("\n")
            end = walker.line(token.map[1])
            leaves.append(walker.leaf("text", walker.pos, runs=[Run(text, walker.align(text, end))]))
        i += 1
    return blocks  # an empty list item makes a block with no leaves: it still owns its source


def fence_code(source: str, offset: int) -> str | None:
    """The code of the code block that starts at ``offset`` of ``source`` (no fences), if there is one."""
    for block in parse_blocks(source):
        for leaf in block.leaves:
            if leaf.kind == "code" and leaf.source == offset:
                return leaf.code
    return None


@dataclass
class Rejection:
    """Drafts rejected in one round, sitting before committed offset ``offset``."""

    offset: int
    spans: list[TokenSpan]
    first_span: int  # index of the first rejected span in the message's spans

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.spans)


class FateIndex:
    """Which span covers a committed offset, and where rejections sit; extended as spans arrive."""

    def __init__(self, spans: list[TokenSpan] | None = None) -> None:
        self.starts: list[int] = []
        self.spans: list[TokenSpan] = []
        self.rejections: list[Rejection] = []
        self.length = 0
        self._taken = 0
        if spans:
            self.update(spans)

    def update(self, spans: list[TokenSpan]) -> None:
        """Take the spans after those already taken (``spans`` only ever grows)."""
        for i in range(self._taken, len(spans)):
            span = spans[i]
            if span.kind is TokenKind.REJECTED:
                last = self.rejections[-1] if self.rejections else None
                if (
                    last is not None
                    and last.offset == self.length
                    and last.spans[-1].round == span.round
                    and last.first_span + len(last.spans) == i
                ):
                    last.spans.append(span)
                else:
                    self.rejections.append(Rejection(self.length, [span], i))
            elif span.text:
                self.starts.append(self.length)
                self.spans.append(span)
                self.length += len(span.text)
        self._taken = len(spans)

    def rejections_from(self, offset: int) -> list[Rejection]:
        """Rejections at ``offset`` or later, in order."""
        i = bisect.bisect_left([r.offset for r in self.rejections], offset)
        return self.rejections[i:]


__all__ = ["LINE_BREAK", "FateIndex", "Leaf", "ListItem", "Rejection", "Run", "TopBlock", "fence_code", "parse_blocks"]
