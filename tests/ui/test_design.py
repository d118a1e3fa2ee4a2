"""The window's design applied for real, offscreen: the type scale, the composer's rounded frame, icons on the main
buttons, the user's turn on a tinted card and the assistant's on the page, both themes, and the centred column of a
wide window."""

from __future__ import annotations

from collections import Counter

from PySide6.QtCore import QPoint, QRect
from PySide6.QtGui import QColor, QIcon, QImage, QPalette
from PySide6.QtWidgets import QApplication

from specchat.core.types import Finished, FinishReason, GenerationStats
from specchat.ui import design
from specchat.ui.chat_cards import PROP_CARD, card_rects
from specchat.ui.main_window import MainWindow
from support.events import verified
from support.fake_host import FakeHost, window_with


def _converse(qtbot, window: MainWindow, host: FakeHost) -> None:
    """A question and its reply, shown."""
    window.send("What is speculative decoding?")
    with qtbot.waitSignal(window.reply_finished):
        host.worker.events.emit(
            [
                verified(0, ("A small", " model"), ("x",), " guesses"),
                Finished(FinishReason.EOS, GenerationStats(rounds=1, drafted=3, accepted=2, generated=3)),
            ]
        )


def _blocks(window: MainWindow) -> list[tuple[str, object]]:
    out = []
    block = window.chat_view.document().begin()
    while block.isValid():
        out.append((block.text(), block.blockFormat().property(PROP_CARD)))
        block = block.next()
    return out


def _most_common(image: QImage, rect: QRect) -> QColor:
    counts = Counter(
        image.pixel(x, y) for x in range(rect.left(), rect.right() + 1) for y in range(rect.top(), rect.bottom() + 1)
    )
    return QColor.fromRgb(counts.most_common(1)[0][0])


def _icon_colour(icon: QIcon) -> QColor:
    """The most common opaque colour of an icon drawn at 24 pixels."""
    image = icon.pixmap(24, 24).toImage()
    counts = Counter(
        image.pixel(x, y)
        for x in range(image.width())
        for y in range(image.height())
        if image.pixelColor(x, y).alpha() == 255
    )
    assert counts, "the icon draws nothing"
    return QColor.fromRgb(counts.most_common(1)[0][0])


def _shown(qtbot, window: MainWindow, width: int = 1200, height: int = 760) -> None:
    window.resize(width, height)
    window.show()
    qtbot.waitExposed(window)
    qtbot.wait(50)


def test_the_type_scale_is_applied(qtbot, settings, store) -> None:
    window, _ = window_with(qtbot, settings, store)
    assert QApplication.font().pointSizeF() == design.BASE_PT
    qtbot.waitUntil(lambda: window.sidebar.new_button.font().pointSizeF() == design.BASE_PT)  # Qt posts it
    assert window.chat_view.font().pointSizeF() == design.READING_PT  # zoom 0
    assert window.composer.font().pointSizeF() == design.READING_PT
    assert window.page.legend.font().pointSizeF() == design.SMALL_PT
    assert window.page.context_meter.font().pointSizeF() == design.SMALL_PT
    window.look.set_zoom(2)  # the zoom still steps from the reading size
    assert window.chat_view.font().pointSizeF() == design.READING_PT + 2
    window.look.set_zoom(0)


def test_the_composer_is_a_rounded_frame_holding_the_box_and_its_buttons(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    _converse(qtbot, window, host)
    _shown(qtbot, window)
    page, frame = window.page, window.page.composer_frame
    assert frame.objectName() == design.COMPOSER_FRAME
    for part in (window.composer, page.send_button, page.stop_button, page.regenerate_button, page.attach_button):
        assert frame.isAncestorOf(part), part
    assert page.attachments.parentWidget() is frame
    # drawn rounded: the top edge's middle is the border colour, its corner the page's colour behind it
    window.activateWindow()
    window.chat_view.setFocus()
    qtbot.waitUntil(lambda: frame.property("focused") is False)
    top_left = frame.mapTo(page, QPoint(0, 0))
    palette = page.palette()

    def edge() -> tuple[str, str]:
        image = page.grab().toImage()
        middle = image.pixelColor(top_left.x() + frame.width() // 2, top_left.y())
        return middle.name(), image.pixelColor(top_left.x(), top_left.y()).name()

    assert edge() == (palette.color(QPalette.ColorRole.Mid).name(), palette.color(QPalette.ColorRole.Base).name())
    # the border takes the accent while the message box has the keyboard
    window.composer.setFocus()
    qtbot.waitUntil(lambda: frame.property("focused") is True)
    assert edge()[0] == palette.color(QPalette.ColorRole.Highlight).name()


def test_the_main_buttons_carry_icons_and_keep_their_text(qtbot, settings, store) -> None:
    window, _ = window_with(qtbot, settings, store)
    page, sidebar = window.page, window.sidebar
    named = {
        page.send_button: ("Send", "paper-plane-right-fill"),
        page.stop_button: ("Stop", "stop-fill"),
        page.regenerate_button: ("Regenerate", "arrow-clockwise"),
        sidebar.new_button: ("New conversation", "note-pencil"),
        sidebar.rename_button: ("Rename", "pencil-simple"),
        sidebar.delete_button: ("Delete\u2026", "trash"),
        window.stats.measure_button: ("Measure plain decoding", "timer"),
    }
    for button, (text, name) in named.items():
        assert button.text() == text and design.icon_name(button) == name
        assert not button.icon().isNull()
    assert design.icon_name(page.attach_button) == "paperclip" and not page.attach_button.icon().isNull()
    assert page.attach_button.toolTip().startswith("Attach files")
    assert page.send_button.objectName() == design.SEND_BUTTON


def test_user_and_assistant_turns_have_distinct_backgrounds(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    _converse(qtbot, window, host)
    _shown(qtbot, window)
    blocks = _blocks(window)
    # the user's turn, its role line and its text, is on card 0; the reply's blocks on none
    assert ("You", 0) in blocks and ("What is speculative decoding?", 0) in blocks
    assert all(card is None for text, card in blocks if "guesses" in text or text == "Assistant")
    view = window.chat_view
    cards = card_rects(view)
    assert [index for index, _ in cards] == [0]
    card = cards[0][1].toAlignedRect()
    image = view.viewport().grab().toImage()
    tint = design.card_colour(view.palette())
    base = view.palette().color(QPalette.ColorRole.Base)
    assert tint != base
    # the card's right part (no text there) is the tint; the same strip beside the reply is the page
    strip = QRect(card.right() - 30, card.top() + 8, 20, card.height() - 16)
    assert _most_common(image, strip).name() == tint.name()
    reply = view.cursorRect(view.document().find("guesses"))
    beside = QRect(card.right() - 30, reply.top(), 20, reply.height())
    assert _most_common(image, beside).name() == base.name()
    # the card is there in the verdict view too, and its text still belongs to message 0
    window.look.set_show_verdicts(True)
    assert [index for index, _ in card_rects(view)] == [0]
    inside = view.cursorRect(view.document().find("speculative")).center()
    assert view.message_index_at(inside) == 0
    window.look.set_show_verdicts(False)


def test_the_dark_theme_swaps_the_design_colours(qtbot, qapp, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    _converse(qtbot, window, host)
    _shown(qtbot, window)
    send = window.page.send_button
    try:
        window.look.set_theme("light")
        qtbot.waitUntil(lambda: window.palette().color(QPalette.ColorRole.Base).lightness() > 128)
        light_sheet, light_card = qapp.styleSheet(), design.card_colour(window.chat_view.palette())
        light_icon = _icon_colour(window.page.regenerate_button.icon())
        window.look.set_theme("dark")
        qtbot.waitUntil(lambda: window.palette().color(QPalette.ColorRole.Base).lightness() < 128)
        palette = window.chat_view.palette()
        dark_card = design.card_colour(palette)
        assert dark_card.lightness() < 80 and light_card.lightness() > 200
        sheet = qapp.styleSheet()
        assert sheet != light_sheet and palette.color(QPalette.ColorRole.Highlight).name() in sheet
        # the icons are drawn again in the dark theme's text colour
        dark_icon = _icon_colour(window.page.regenerate_button.icon())
        assert dark_icon.lightness() > 150 and light_icon.lightness() < 100
        # the card drawn on the page follows
        qtbot.wait(50)
        card = card_rects(window.chat_view)[0][1].toAlignedRect()
        image = window.chat_view.viewport().grab().toImage()
        strip = QRect(card.right() - 30, card.top() + 8, 20, card.height() - 16)
        assert _most_common(image, strip).name() == dark_card.name()
        # the send button: the accent, its text and icon in the highlighted text colour
        shot = send.grab().toImage()
        assert (
            _most_common(shot, shot.rect().adjusted(2, 2, -2, -2)).name()
            == palette.color(QPalette.ColorRole.Highlight).name()
        )
    finally:
        window.look.set_theme("system")


def test_a_wide_window_centres_the_conversation_and_the_composer(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    _converse(qtbot, window, host)
    _shown(qtbot, window, 1600, 1000)
    view, frame = window.chat_view, window.page.composer_frame
    assert view.viewport().width() <= design.COLUMN_MAX + view.verticalScrollBar().sizeHint().width()  # room for it
    margins = view.viewportMargins()
    assert margins.left() > 40 and margins.right() > 40
    assert frame.width() <= design.COLUMN_MAX
    frame_left = frame.mapTo(window.page, QPoint(0, 0)).x()
    assert abs(frame_left - (window.page.width() - frame.width() - frame_left)) <= 2  # centred
    # at 900 pixels the column takes the whole view
    _shown(qtbot, window, 900, 600)
    qtbot.waitUntil(lambda: view.viewportMargins().left() == 0)


def test_the_message_box_grows_with_its_text_from_two_lines_to_five(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    _converse(qtbot, window, host)
    _shown(qtbot, window, 900, 600)
    box = window.composer
    heights = {}
    for n in (1, 2, 3, 5, 8):
        box.setPlainText("\n".join(f"line {i}" for i in range(n)))
        qtbot.wait(20)
        heights[n] = box.height()
        assert box.verticalScrollBar().isVisible() == (n > 5), n  # every line shown until the sixth
    assert heights[1] == heights[2] < heights[3] < heights[5] == heights[8]
    assert window.chat_view.height() > 300  # the chat keeps the room at 900x600
    box.clear()
    qtbot.waitUntil(lambda: box.height() == heights[1])
