"""The reading view: replies rendered as Markdown with the token fates on the rendered text.

A recorded reply (bold, a list, a fenced code block, rejections in prose and in
code) is streamed through the view the way the window does it; the document
is then read back block by block.
"""

from __future__ import annotations

import random

import pytest
from PySide6.QtCore import QEvent, QObject, QPoint, Qt, QUrl, Slot
from PySide6.QtGui import (
    QDesktopServices,
    QFont,
    QGuiApplication,
    QHelpEvent,
    QTextBlock,
    QTextCharFormat,
    QTextCursor,
    QTextFormat,
    QTextTable,
)
from PySide6.QtWidgets import QApplication, QToolTip

from specchat.core.chat.transcript import Message, TokenSpan, Transcript
from specchat.core.types import Finished, FinishReason, GenerationStats, TokenKind
from specchat.ui.chat_view import ChatView
from specchat.ui.code_marks import PROP_CODE_MARK, code_mark_count
from specchat.ui.markdown_blocks import parse_blocks
from specchat.ui.token_styles import PROP_CHROME, PROP_CODE, PROP_KIND, REJECTION_MARKER
from support.events import drafted, verified
from support.views import char_point, stream, streaming_view

# (accepted, rejected, target) per round: the content is
# "Here are **Carrots**:\n\n- one\n- two\n\n```python\nx = 1\nprint(x)\n```\nDone."
ROUNDS = [
    (("Here", " are"), (" some",), " **"),
    (("Carrots",), (), "**"),
    ((":\n\n", "- one"), ("\n- three",), "\n"),
    (("- two",), (), "\n\n"),
    (("```python\n", "x = 1"), (" + 2",), "\n"),
    (("print",), ("()",), "(x)\n```"),
    (("\nDone",), ("!",), "."),
]
CONTENT = "Here are **Carrots**:\n\n- one\n- two\n\n```python\nx = 1\nprint(x)\n```\nDone."

LONG_REPLY = """# Plan

Here is **the plan** with *emphasis*, ~~strike~~ and `inline code`.
A soft break line, and a [link](https://example.com "title").

1. First step
2. Second step
   - nested bullet
   - another

> A quote
> over two lines

```python
def add(a, b):
    return a + b
```

---

| col | val |
|-----|-----|
| x   | 1   |

    indented code

Trailing text.\\
After a hard break.
"""


def make_view(qtbot, verdicts: bool = False) -> ChatView:
    return streaming_view(qtbot, "Tell me about **vegetables**", verdicts=verdicts)


def play(view: ChatView, rounds=ROUNDS, finish: bool = True) -> None:
    for n, (acc, rej, corr) in enumerate(rounds):
        stream(view, [drafted(n, acc + rej), verified(n, acc, rej, corr)])
        view.flush()
    if finish:
        stream(view, [Finished(FinishReason.EOS, GenerationStats())])
        view.flush()


def chars(view: ChatView) -> list[tuple[str, QTextCharFormat | None]]:
    """(character, its format) for every character of the document, blocks joined by "\\n" (no format)."""
    out: list[tuple[str, QTextCharFormat | None]] = []
    block = view.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            out.extend((ch, frag.charFormat()) for ch in frag.text())
            it += 1
        out.append(("\n", None))
        block = block.next()
    return out


def kind_of(view: ChatView, text: str, nth: int = 0) -> list[str | None]:
    """The fate of each character of the ``nth`` occurrence of ``text`` in the document."""
    flat = chars(view)
    joined = "".join(c for c, _ in flat)
    at = -1
    for _ in range(nth + 1):
        at = joined.index(text, at + 1)
    formats = [flat[i][1] for i in range(at, at + len(text))]
    return [None if f is None else f.property(PROP_KIND) for f in formats]


def format_of(view: ChatView, text: str):
    flat = chars(view)
    at = "".join(c for c, _ in flat).index(text)
    return flat[at][1]


def block_of(view: ChatView, text: str):
    block = view.document().begin()
    while block.isValid():
        if text in block.text():
            return block
        block = block.next()
    raise AssertionError(f"no block holds {text!r}")


def test_markdown_renders_without_markup_and_with_fates(qtbot) -> None:
    view = make_view(qtbot)
    play(view)
    assert view.transcript.messages[-1].content == CONTENT
    text = view.toPlainText()
    assert "**" not in text.split("\n", 2)[2] and "```" not in text  # the user's own text stays as typed
    assert "Tell me about **vegetables**" in text

    # bold, with the fates of its tokens
    assert format_of(view, "Carrots").fontWeight() == QFont.Weight.Bold
    assert kind_of(view, "Carrots") == ["accepted"] * 7
    assert kind_of(view, "Here are") == ["accepted"] * 8
    assert format_of(view, "Here").background().color() != view.palette().base().color()  # a faint tint
    assert not format_of(view, "Here").fontUnderline()  # the strong styles are the verdict view's

    # a list of two items
    one, two = block_of(view, "one"), block_of(view, "two")
    assert one.textList() is not None and one.textList() == two.textList() and one.textList().count() == 2

    # the code block: a frame, monospace, the fates of its spans, no fences
    code = block_of(view, "x = 1")
    frame = view.document().rootFrame().childFrames()[0]
    assert frame.firstPosition() <= code.position() <= frame.lastPosition()
    assert frame.frameFormat().property(PROP_CODE) == CONTENT.index("```")
    assert frame.frameFormat().border() > 0 and frame.frameFormat().background().style() != Qt.BrushStyle.NoBrush
    mono = view._mono.families()
    assert all(f.fontFamilies() == mono for f in [format_of(view, "x = 1"), format_of(view, "print")])
    assert kind_of(view, "x = 1") == ["accepted"] * 5
    assert kind_of(view, "print") == ["accepted"] * 5
    assert kind_of(view, "(x)") == ["target"] * 3
    assert format_of(view, "print").foreground().color() != format_of(view, "(x)").foreground().color()  # colours
    assert kind_of(view, "Done" + REJECTION_MARKER + ".") == ["accepted"] * 4 + ["rejected", "target"]


def test_rejected_drafts_are_markers_in_reading_and_inline_in_verdicts(qtbot) -> None:
    view = make_view(qtbot)
    play(view)
    text = view.toPlainText()
    for guess in (" some", "three", " + 2", "()", "!"):
        assert guess not in text
    # a marker where each rejection happened in prose: inside a line, at the end of a list item, at the end
    marks = ("Here are" + REJECTION_MARKER + " Carrots", "one" + REJECTION_MARKER, "Done" + REJECTION_MARKER + ".")
    for where in marks:
        assert where in text, where
    marker = format_of(view, REJECTION_MARKER)
    assert marker.property(PROP_KIND) == "rejected" and marker.property(PROP_CHROME)
    assert marker.verticalAlignment() == marker.VerticalAlignment.AlignSuperScript
    assert "the draft guessed" in marker.toolTip() and "some" in marker.toolTip() and "round 1" in marker.toolTip()
    # inside code the text stays as written: the character after a rejection is underlined, its tooltip tells
    assert "\nx = 1\nprint(x)\n" in text
    after_code = format_of(view, "1\nprint")  # " + 2" was rejected after "x = 1": its last character is marked
    bracket = format_of(view, "(x)")  # "()" was rejected after "print"
    for mark, guess in ((after_code, "+ 2"), (bracket, "()")):
        assert mark.property(PROP_CODE_MARK) and mark.underlineStyle() == mark.UnderlineStyle.WaveUnderline
        assert guess in mark.toolTip() and "the draft guessed" in mark.toolTip()
    assert not format_of(view, "x = ").property(PROP_CODE_MARK) and not format_of(view, "x)").property(PROP_CODE_MARK)
    assert code_mark_count(view.textCursor()) == 2

    view.set_hide_rejected(True)
    assert REJECTION_MARKER not in view.toPlainText()
    view.set_hide_rejected(False)

    view.set_show_verdicts(True)  # raw text, every fate inline, rejected struck through
    text = view.toPlainText()
    assert "Here are some **Carrots**" in text and "```python" in text and "x = 1 + 2" in text
    assert REJECTION_MARKER not in text
    struck = format_of(view, " some")
    assert struck.fontStrikeOut() and struck.property(PROP_KIND) == "rejected"
    assert format_of(view, "Here").fontUnderline()
    view.set_show_verdicts(False)
    assert "**" not in view.toPlainText().split("\n", 2)[2]


def _hover(view: ChatView, pos: QPoint) -> str:
    event = QHelpEvent(QEvent.Type.ToolTip, pos, view.viewport().mapToGlobal(pos))
    QApplication.sendEvent(view.viewport(), event)
    return QToolTip.text()


def _point_of(view: ChatView, text: str) -> QPoint:
    """The viewport point over the middle of the first character of ``text``."""
    at = view.document().find(text)
    assert not at.isNull(), text
    return char_point(view, at.selectionStart())


def test_marker_tooltip_and_click_show_the_guess_and_tokens_keep_theirs(qtbot) -> None:
    view = make_view(qtbot)
    view.resize(500, 400)
    view.show()
    qtbot.waitExposed(view)
    play(view)
    view.jump_to_latest()
    assert "the draft guessed" in _hover(view, _point_of(view, "× Carrots")) and "some" in QToolTip.text()
    # in code, the character after the rejection tells it on hover
    assert "the draft guessed" in _hover(view, _point_of(view, "(x)")) and "()" in QToolTip.text()
    assert "accepted draft · round 2" in _hover(view, _point_of(view, "arrots"))  # the engine's round 1
    assert "target p=0.25" in QToolTip.text() and "draft p=0.75" in QToolTip.text()
    QToolTip.hideText()
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=_point_of(view, "× Carrots"))
    qtbot.waitUntil(lambda: "the draft guessed" in QToolTip.text())
    assert "some" in QToolTip.text()
    QToolTip.hideText()


def test_copy_message_code_block_and_selection_give_clean_text(qtbot) -> None:
    view = make_view(qtbot)
    view.resize(500, 400)
    view.show()
    qtbot.waitExposed(view)
    play(view)
    clipboard = QGuiApplication.clipboard()

    view.message_actions(1)[0].trigger()  # Copy message: the Markdown source, no rejected drafts
    assert clipboard.text() == CONTENT

    clipboard.clear()
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=_point_of(view, "Copy"))
    qtbot.waitUntil(lambda: clipboard.text() == "x = 1\nprint(x)")  # the code, without fences

    view.selectAll()
    clipboard.clear()
    view.setFocus()
    qtbot.keyClick(view, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)  # a selection: no markers, no labels
    copied = clipboard.text()
    assert REJECTION_MARKER not in copied and "Copy" not in copied and "python" not in copied
    assert "Here are Carrots:" in copied and "x = 1\nprint(x)" in copied and copied.endswith("Done.")

    clipboard.clear()
    menu = view.context_menu(_point_of(view, "Carrots"))  # the right-click menu's own Copy: the same clean text
    qtbot.addWidget(menu)
    next(a for a in menu.actions() if a.objectName() == "edit-copy").trigger()
    assert clipboard.text() == copied


def test_links_open_through_the_desktop(qtbot) -> None:
    class Catcher(QObject):
        def __init__(self) -> None:
            super().__init__()
            self.urls: list[str] = []

        @Slot(QUrl)
        def take(self, url: QUrl) -> None:
            self.urls.append(url.toString())

    catcher = Catcher()
    # PySide6's stub types the slot's name as bytes; the binding refuses bytes and takes a str.
    QDesktopServices.setUrlHandler("https", catcher, "take")  # type: ignore[arg-type]
    try:
        view = make_view(qtbot)
        view.resize(500, 300)
        view.show()
        qtbot.waitExposed(view)
        stream(view, [verified(0, ("See [the docs](https://example.com/x)",), (), " now.")])
        view.flush()
        assert "[" not in view.toPlainText() and "the docs now." in view.toPlainText()
        link = format_of(view, "the docs")
        assert link.isAnchor() and link.anchorHref() == "https://example.com/x"
        qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=_point_of(view, "docs"))
        qtbot.waitUntil(lambda: catcher.urls == ["https://example.com/x"])
    finally:
        QDesktopServices.unsetUrlHandler("https")


def test_headings_tables_quotes_and_rules(qtbot) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    view.show_transcript(Transcript([Message("user", "q"), Message("assistant", LONG_REPLY, finish_reason="eos")]))
    text = view.toPlainText()
    for raw in ("# ", "~~", "`", "| col", "|---", "> A"):
        assert raw not in text, raw
    heading = format_of(view, "Plan")
    assert heading.property(QTextFormat.Property.FontSizeAdjustment) > 0 and heading.fontWeight() == QFont.Weight.Bold
    assert format_of(view, "emphasis").fontItalic() and format_of(view, "strike").fontStrikeOut()
    assert format_of(view, "inline code").fontFamilies() == view._mono.families()
    tables = [f for f in view.document().rootFrame().childFrames() if isinstance(f, QTextTable)]
    assert len(tables) == 1 and tables[0].rows() == 2 and tables[0].columns() == 2
    assert format_of(view, "col").fontWeight() == QFont.Weight.Bold  # the header row
    numbered, nested = block_of(view, "First").textList().format(), block_of(view, "nested bullet").textList().format()
    assert nested.indent() > numbered.indent() and numbered.style() == numbered.Style.ListDecimal
    ruler = QTextFormat.Property.BlockTrailingHorizontalRulerWidth
    rules = [b for b in _blocks(view) if b.blockFormat().hasProperty(ruler)]
    assert len(rules) == 1
    assert "Trailing text.\u2028After a hard break." in block_of(view, "Trailing").text()
    assert "indented code" in text and format_of(view, "indented code").fontFamilies() == view._mono.families()


def _blocks(view: ChatView) -> list[QTextBlock]:
    out: list[QTextBlock] = []
    block = view.document().begin()
    while block.isValid():
        out.append(block)
        block = block.next()
    return out


def _random_rounds(text: str, seed: int) -> list[tuple[tuple[str, ...], tuple[str, ...], str]]:
    rng = random.Random(seed)
    rounds: list[tuple[tuple[str, ...], tuple[str, ...], str]] = []
    i = 0
    while i < len(text):
        n = rng.randint(1, 7)
        chunk, i = text[i : i + n], i + n
        cut = rng.randint(0, len(chunk))
        acc = (chunk[:cut],) if cut else ()
        rej = ("R" * rng.randint(1, 3),) if rng.random() < 0.3 else ()
        rounds.append((acc, rej, chunk[cut:]))
    return rounds


LISTS_AND_CODE = """Intro:

- a **b**
- c
  - d
  - e
- f

  more f
- ```py
  x = 1
  ```
* other list

3. three
4. four

```python
def f():
    \"\"\"A docstring
    over lines\"\"\"
    return 1  # done
```

After.
"""


def _look(view: ChatView, colours: bool) -> list[tuple[object, ...]]:
    """Each block's list (by order of appearance), item number and indent, then each character's look.

    While a code block streams, its lines are coloured one by one, so code colours count only at the end.
    """
    out: list[tuple[object, ...]] = []
    lists: dict[int, int] = {}
    block = view.document().begin()
    while block.isValid():
        listed = block.textList()
        out.append(
            (
                "block",
                lists.setdefault(listed.objectIndex(), len(lists)) if listed else None,
                listed.itemNumber(block) if listed else None,
                block.blockFormat().indent(),
            )
        )
        it = block.begin()
        while not it.atEnd():
            fmt = it.fragment().charFormat()
            code = fmt.property(PROP_CODE)
            styled = colours or code is None
            out.extend(
                (
                    ch,
                    fmt.property(PROP_KIND),
                    code,
                    fmt.background().color().name(),
                    fmt.fontWeight() if styled else 0,
                    fmt.foreground().color().name() if styled else "",
                )
                for ch in it.fragment().text()
            )
            it += 1
        block = block.next()
    return out


@pytest.mark.parametrize("text", [LONG_REPLY, LISTS_AND_CODE], ids=["blocks", "lists-and-code"])
@pytest.mark.parametrize("seed", range(3))
def test_a_streamed_reply_draws_as_a_full_redraw_would_at_every_step(qtbot, text: str, seed: int) -> None:
    view = make_view(qtbot)
    fresh = ChatView()
    qtbot.addWidget(fresh)
    for n, (acc, rej, corr) in enumerate(_random_rounds(text, seed)):
        stream(view, [drafted(n, acc + rej), verified(n, acc, rej, corr)])
        view.flush()
        fresh.show_transcript(view.transcript)
        content = view.transcript.messages[-1].content
        assert _look(view, False) == _look(fresh, False), f"after round {n}: {content[-40:]!r}"
    stream(view, [Finished(FinishReason.EOS, GenerationStats())])
    view.flush()
    fresh.show_transcript(view.transcript)
    assert view.transcript.messages[-1].content == text
    assert _look(view, True) == _look(fresh, True)  # code coloured as a whole once complete


def test_only_the_last_block_is_drawn_again_while_streaming(qtbot) -> None:
    view = make_view(qtbot)
    stream(view, [verified(0, ("First paragraph.\n\n",), (), "Second"), verified(1, (" grows",), (), "")])
    view.flush()
    mark = QTextFormat.Property.UserProperty + 99  # a mark that text drawn again would not carry
    cursor = QTextCursor(block_of(view, "First paragraph."))
    fmt = cursor.blockFormat()
    fmt.setProperty(mark, "first")
    cursor.setBlockFormat(fmt)
    marked = QTextCharFormat()
    marked.setProperty(mark, "second")
    view.document().find("Second grows").mergeCharFormat(marked)

    stream(view, [verified(2, (" and",), (), " grows")])
    view.flush()  # plain text appended to the last paragraph: only the new text is drawn
    assert block_of(view, "First paragraph.").blockFormat().property(mark) == "first"
    assert format_of(view, "Second grows").property(mark) == "second"
    assert format_of(view, " and grows").property(mark) is None

    stream(view, [verified(3, (" *fast",), (), "")])
    view.flush()
    assert view.toPlainText().endswith("Second grows and grows *fast")  # not emphasis yet
    assert format_of(view, "Second").property(mark) == "second"
    stream(view, [verified(4, ("*",), (), ".")])
    view.flush()  # emphasis closes on text already drawn: the paragraph is drawn again, the one before is not
    assert view.toPlainText().endswith("Second grows and grows fast.")
    assert format_of(view, "fast").fontItalic() and format_of(view, "Second").property(mark) is None
    assert block_of(view, "First paragraph.").blockFormat().property(mark) == "first"


def test_a_list_at_the_end_draws_only_its_last_item_again(qtbot) -> None:
    view = make_view(qtbot)
    stream(view, [verified(0, ("1. one\n", "2. two\n"), (), "3. th")])
    view.flush()
    mark = QTextFormat.Property.UserProperty + 99
    for text in ("one", "th"):
        fmt = QTextCharFormat()
        fmt.setProperty(mark, text)
        view.document().find(text).mergeCharFormat(fmt)
    stream(view, [verified(1, ("ree",), (), "\n4. four")])
    view.flush()
    assert format_of(view, "one").property(mark) == "one"
    assert format_of(view, "three").property(mark) is None
    items = [block_of(view, t) for t in ("one", "two", "three", "four")]
    assert all(b.textList() == items[0].textList() for b in items)  # still one list, numbered on
    assert [items[0].textList().itemText(b) for b in items] == ["1.", "2.", "3.", "4."]


def test_a_streaming_code_block_draws_only_its_last_line_again(qtbot) -> None:
    view = make_view(qtbot)
    stream(view, [verified(0, ("```python\n", "a = 1\n"), (), "b = 2\n"), verified(1, ("c =",), (), " 3")])
    view.flush()
    mark = QTextFormat.Property.UserProperty + 99  # a mark that characters drawn again would not carry
    for text in ("a = 1", "c = 3"):
        cursor = view.document().find(text)
        fmt = QTextCharFormat()
        fmt.setProperty(mark, text)
        cursor.mergeCharFormat(fmt)
    stream(view, [verified(2, (" +",), (), " 4\nd")])
    view.flush()
    assert format_of(view, "a = 1").property(mark) == "a = 1"  # whole lines stay
    assert format_of(view, "c = 3 + 4").property(mark) is None  # the last line was drawn again
    assert len(view.document().rootFrame().childFrames()) == 1 and view.toPlainText().endswith("c = 3 + 4\nd\n")


@pytest.mark.parametrize("verdicts", [False, True], ids=["reading", "verdicts"])
def test_a_conversation_shown_again_mid_reply_goes_on_streaming(qtbot, verdicts: bool) -> None:
    view = make_view(qtbot, verdicts)
    streaming = view.transcript
    stream(view, [verified(0, ("**Hel",), (), "lo")])
    view.flush()
    view.show_transcript(Transcript([Message("user", "another conversation")]))
    assert not view.streaming
    streaming.fold(verified(1, ("** wor",), (), "ld"))  # the reply goes on while another one is shown
    view.show_transcript(streaming)
    assert view.streaming
    stream(view, [verified(2, ("!",), (), ""), Finished(FinishReason.EOS, GenerationStats())])
    view.flush()
    assert not view.streaming
    fresh = ChatView()
    qtbot.addWidget(fresh)
    fresh.set_show_verdicts(verdicts)
    fresh.show_transcript(streaming)
    assert view.toPlainText() == fresh.toPlainText()
    assert view.toPlainText().endswith("**Hello** world!" if verdicts else "Hello world!")


def test_pending_ghost_sits_at_the_end_of_the_text_and_is_never_copied(qtbot) -> None:
    view = make_view(qtbot)
    stream(view, [verified(0, ("```py\nx",), (), " ="), drafted(1, (" 1",))])
    view.flush()
    assert view.toPlainText().endswith("x = 1\n") and kind_of(view, " 1")[0] == "pending"
    assert format_of(view, " 1").fontItalic() and format_of(view, " 1").property(PROP_CHROME)
    frame = view.document().rootFrame().childFrames()[0]
    ghost = view.document().find(" 1")
    assert frame.firstPosition() <= ghost.selectionStart() <= frame.lastPosition()  # inside the code box
    stream(view, [drafted(2, (" 2",))])
    view.flush()
    assert view.toPlainText().endswith("x = 2\n") and " 1" not in view.toPlainText()


def test_a_stopped_reply_ending_in_code_gets_its_note_below_the_box(qtbot) -> None:
    view = make_view(qtbot)
    stream(view, [verified(0, ("```py\nx = 1",), (), "\n```"), Finished(FinishReason.CANCELLED, GenerationStats())])
    view.flush()
    assert view.toPlainText().endswith("x = 1\n\n (stopped)")
    note = block_of(view, "(stopped)")
    frame = view.document().rootFrame().childFrames()[0]
    assert note.position() > frame.lastPosition()


def test_dark_palette_changes_the_tint_code_box_and_syntax_colours(qtbot) -> None:
    from PySide6.QtGui import QColor, QPalette

    view = make_view(qtbot)
    play(view)
    light = (
        format_of(view, "Here").background().color().name(),
        format_of(view, "def").foreground().color().name()
        if "def" in view.toPlainText()
        else format_of(view, "print").foreground().color().name(),
        view.document().rootFrame().childFrames()[0].frameFormat().background().color().name(),
    )
    dark = QPalette(view.palette())
    dark.setColor(QPalette.ColorRole.Base, QColor("#1e1e1e"))
    dark.setColor(QPalette.ColorRole.Text, QColor("#e6e6e6"))
    view.setPalette(dark)
    now = (
        format_of(view, "Here").background().color().name(),
        format_of(view, "print").foreground().color().name(),
        view.document().rootFrame().childFrames()[0].frameFormat().background().color().name(),
    )
    assert all(a != b for a, b in zip(light, now, strict=True)), (light, now)
    assert QColor(now[0]).lightness() < 128 and QColor(now[2]).lightness() < 128
    assert format_of(view, "Carrots").foreground().color().name() == "#e6e6e6"


def test_a_reply_without_token_fates_still_renders(qtbot) -> None:
    view = ChatView()
    qtbot.addWidget(view)
    spans = [TokenSpan(TokenKind.TARGET, "**Hi** there", 0, 0.5, None)]
    view.show_transcript(Transcript([Message("assistant", "*plain* reply"), Message("assistant", "", spans)]))
    assert "plain reply" in view.toPlainText() and "Hi there" in view.toPlainText()
    assert format_of(view, "plain").fontItalic() and format_of(view, "plain").property(PROP_KIND) is None
    assert kind_of(view, "Hi") == ["target"] * 2


def test_parse_keeps_source_offsets_of_rendered_characters() -> None:
    source = "Intro **bold** `x`\n\n- a\n- b\n\n```\ncode\n```\n"
    blocks = parse_blocks(source)
    assert [b.start for b in blocks] == [0, source.index("- a"), source.index("```")]
    runs = blocks[0].leaves[0].runs
    for run in runs:
        assert all(source[o] == ch for ch, o in zip(run.text, run.offsets, strict=True)), run
    assert [r.text for r in runs if r.bold] == ["bold"] and [r.text for r in runs if r.code] == ["x"]
    code = blocks[2].leaves[0]
    assert code.code == "code" and source[code.code_offsets[0] : code.code_offsets[-1] + 1] == "code"


def test_follow_the_stream_and_jump_to_latest(qtbot) -> None:
    view = make_view(qtbot)
    view.resize(360, 220)
    view.show()
    qtbot.waitExposed(view)
    bar = view.verticalScrollBar()
    for n in range(30):
        stream(view, [verified(n, (f"Line {n} of the reply",), (), "\n\n")])
        view.flush()
        QApplication.processEvents()
    assert bar.maximum() > 0 and bar.value() == bar.maximum()  # followed to the bottom
    assert view.following and view.jump_button.isHidden()

    bar.setValue(bar.maximum() // 3)  # the user scrolls up
    assert not view.following
    qtbot.waitUntil(view.jump_button.isVisible)
    held = bar.value()
    for n in range(30, 45):
        stream(view, [verified(n, (f"Line {n} of the reply",), (), "\n\n")])
        view.flush()
        QApplication.processEvents()
    assert bar.value() == held and bar.maximum() > held  # new text did not move the view
    button = view.jump_button.geometry()
    area = view.viewport().geometry()
    assert area.contains(button) and button.right() > area.center().x() and button.bottom() > area.center().y()

    qtbot.mouseClick(view.jump_button, Qt.MouseButton.LeftButton)
    assert bar.value() == bar.maximum() and view.following and view.jump_button.isHidden()
    stream(view, [verified(99, ("One more line",), (), ".")])
    view.flush()
    QApplication.processEvents()
    assert bar.value() == bar.maximum()

    bar.setValue(0)
    assert not view.following
    bar.setValue(bar.maximum())  # scrolling back down by hand resumes following as well
    assert view.following and view.jump_button.isHidden()
