"""The sidebar's day groups, dates, pins, duplicates and branches, on real widgets over real SQLite files."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QMenu

from specchat.core.chat.store import ConversationStore
from specchat.ui.sidebar import HEADER_ROLE, WHEN_ROLE, ConversationSidebar, elide_words
from support.fake_host import window_with
from support.qt_items import menu_of

NOW = dt.datetime(2026, 11, 12, 15, 0).timestamp()  # a Thursday afternoon
HOUR, DAY = 3600.0, 86400.0


def _stored(store: ConversationStore, title: str, updated: float, *, pinned: bool = False) -> int:
    cid = store.create_conversation(title)
    store.add_message(cid, "user", f"about {title}")
    store._db.execute("UPDATE conversations SET updated = ?, created = ? WHERE id = ?", (updated, updated - 60, cid))
    store.set_pinned(cid, pinned)
    return cid


def _fill(store: ConversationStore) -> None:
    _stored(store, "Old recipe", NOW - 40 * DAY)
    _stored(store, "Hi! What can you help me with today?", NOW - DAY - 2 * HOUR)
    _stored(store, "Hi! What can you help me with today?", NOW - DAY - 5 * HOUR)
    _stored(store, "Trip plan", NOW - 3 * DAY, pinned=True)
    _stored(store, "Tax question", NOW - 4 * DAY)
    _stored(store, "Morning notes", NOW - 1 * HOUR)


def test_conversations_are_grouped_by_day_with_their_dates(qtbot, store) -> None:
    _fill(store)
    sidebar = ConversationSidebar()
    qtbot.addWidget(sidebar)
    sidebar.resize(260, 500)
    sidebar.show()
    sidebar.set_conversations(store.conversations(), None, now=NOW)
    same = "Hi! What can you help me with today?"
    assert sidebar.headers() == [
        ("Pinned", ["Trip plan"]),
        ("Today", ["Morning notes"]),
        ("Yesterday", [same, same]),
        ("Previous 7 days", ["Tax question"]),
        ("Older", ["Old recipe"]),
    ]
    rows = [sidebar.list.item(i) for i in range(sidebar.list.count())]
    whens = [r.data(WHEN_ROLE) for r in rows]
    assert whens[0] == "Mon" and whens[1] == "14:00" and whens[4] == "Sun" and whens[5] == "3 Oct"
    assert whens[2] == "Yesterday 13:00" and whens[3] == "Yesterday 10:00"  # one title twice: told apart by time
    heights = [sidebar.list.visualItemRect(r).height() for r in rows]
    assert heights[2] > heights[3]  # the first of its group has its header above it
    assert [bool(r.data(HEADER_ROLE)) for r in rows] == [True, True, True, False, True, True]


def test_searching_keeps_the_headers_of_groups_with_matches_only(qtbot, settings, store) -> None:
    _fill(store)
    window, _ = window_with(qtbot, settings, store)
    window.show()
    window.sidebar.set_conversations(store.conversations(), None, now=NOW)
    qtbot.keyClicks(window.sidebar.search_field, "tax")
    assert window.sidebar.headers() == [("Previous 7 days", ["Tax question"])]
    window.sidebar.search_field.clear()
    assert [h for h, _ in window.sidebar.headers()] == ["Pinned", "Today", "Yesterday", "Previous 7 days", "Older"]


def test_a_long_title_is_cut_at_a_word_in_the_list(qtbot, settings, store) -> None:
    window, host = window_with(qtbot, settings, store)
    window.send("Describe the famous painting by experts in art history and what it means")
    title = store.conversations()[0].title
    assert title == "Describe the famous painting by experts in art\u2026"
    assert window.sidebar.list.item(0).text() == title
    metrics = QFontMetrics(window.sidebar.list.font())
    for width in (120, 200, 260):
        shown = elide_words(title, metrics, width)
        assert shown.endswith("\u2026") and metrics.horizontalAdvance(shown) <= width
        assert title.startswith(shown.removesuffix("\u2026") + " ")  # whole words only


def _menu_action(menu: QMenu, name: str):
    return next(a for a in menu.actions() if a.objectName() == name)


def test_pin_duplicate_and_branch_from_the_sidebar_persist(qtbot, settings, tmp_path: Path) -> None:
    path = tmp_path / "conversations.sqlite3"
    store = ConversationStore(path)
    first = _stored(store, "First", NOW - 3 * DAY)
    store.add_message(first, "assistant", "a reply")
    store.add_message(first, "user", "a follow-up")
    _stored(store, "Second", NOW - HOUR)
    window, _ = window_with(qtbot, settings, store)
    sidebar = window.sidebar
    row = next(sidebar.list.item(i) for i in range(sidebar.list.count()) if sidebar.list.item(i).text() == "First")

    _menu_action(sidebar.context_menu(row), "pin").trigger()
    assert store.conversation(first).pinned
    assert sidebar.headers()[0] == ("Pinned", ["First"])

    row = sidebar.list.item(0)
    _menu_action(sidebar.context_menu(row), "duplicate").trigger()
    copy = window.conversation_id
    assert copy not in (None, first) and store.conversation(copy).title == "First (copy)"
    assert [m.content for m in window.transcript.messages] == ["about First", "a reply", "a follow-up"]
    assert sidebar.current_id() == copy

    row = next(sidebar.list.item(i) for i in range(sidebar.list.count()) if sidebar.list.item(i).text() == "First")
    branch_menu = _menu_action(sidebar.context_menu(row), "branch").menu()
    branch_menu.aboutToShow.emit()
    entries = [a.text() for a in branch_menu.actions()]
    assert entries == ["1. You: about First", "2. Assistant: a reply", "3. You: a follow-up"]
    branch_menu.actions()[1].trigger()
    branched = window.conversation_id
    assert branched is not None
    assert store.conversation(branched).title == "First (branch)"
    assert [m.content for m in window.transcript.messages] == ["about First", "a reply"]
    assert window.windowTitle().startswith("First (branch)")
    window.close()
    store.close()

    reopened = ConversationStore(path)
    assert [(c.title, c.pinned) for c in reopened.conversations()][0] == ("First", True)
    assert len(reopened.conversations()) == 4
    reopened.close()


def test_the_conversation_menu_pins_and_branches_the_open_conversation(qtbot, settings, store) -> None:
    cid = _stored(store, "Open one", NOW)
    store.add_message(cid, "assistant", "yes")
    window, _ = window_with(qtbot, settings, store)
    window.chat.open_conversation(cid)
    pin = window.menu_actions.pin
    assert pin.isEnabled() and pin.text().replace("&", "") == "Pin this conversation"
    pin.trigger()
    assert store.conversation(cid).pinned and pin.text().replace("&", "") == "Unpin this conversation"
    pin.trigger()
    assert not store.conversation(cid).pinned
    branch = next(
        a
        for m in window.menuBar().actions()
        for a in menu_of(m).actions()
        if a.menu() is not None and a.text().replace("&", "").startswith("Branch into")
    )
    menu = menu_of(branch)
    menu.aboutToShow.emit()
    menu.actions()[0].trigger()
    assert [m.content for m in window.transcript.messages] == ["about Open one"]
    window.menu_actions.duplicate.trigger()
    assert store.conversation(window.conversation_id).title == "Open one (branch) (copy)"


def test_a_branch_of_a_message_that_is_gone_says_so_in_one_line(qtbot, settings, store) -> None:
    cid = _stored(store, "Short", NOW)
    window, _ = window_with(qtbot, settings, store)
    before = len(store.conversations())
    assert window.ops.branch(cid, 999_999) is None
    assert window.last_error.startswith("the conversation could not be branched:") and "\n" not in window.last_error
    assert len(store.conversations()) == before


def test_a_rows_tooltip_gives_its_whole_title_and_dates(qtbot, store) -> None:
    from PySide6.QtCore import QEvent
    from PySide6.QtGui import QHelpEvent
    from PySide6.QtWidgets import QApplication, QToolTip

    _stored(store, "A title long enough to be cut short in a narrow sidebar", NOW - DAY)
    sidebar = ConversationSidebar()
    qtbot.addWidget(sidebar)
    sidebar.resize(160, 300)
    sidebar.show()
    qtbot.waitExposed(sidebar)
    sidebar.set_conversations(store.conversations(), None, now=NOW)
    rect = sidebar.list.visualItemRect(sidebar.list.item(0))
    viewport = sidebar.list.viewport()
    at = rect.center()
    QApplication.sendEvent(viewport, QHelpEvent(QEvent.Type.ToolTip, at, viewport.mapToGlobal(at)))
    assert QToolTip.text() == (
        "A title long enough to be cut short in a narrow sidebar\n"
        "Last message Wed 11 Nov 2026, 15:00; started Wed 11 Nov 2026, 14:59"
    )
    QToolTip.hideText()


def test_after_midnight_today_becomes_yesterday(qtbot, store) -> None:
    cid = _stored(store, "Late chat", NOW - HOUR)
    sidebar = ConversationSidebar()
    qtbot.addWidget(sidebar)
    sidebar.set_conversations(store.conversations(), cid, now=NOW)
    assert sidebar.headers() == [("Today", ["Late chat"])]
    assert not sidebar.refresh_dates(NOW + HOUR)  # the same day: nothing to redo
    with qtbot.assertNotEmitted(sidebar.selected):
        assert sidebar.refresh_dates(NOW + DAY)
    assert sidebar.headers() == [("Yesterday", ["Late chat"])]
    assert sidebar.list.item(0).data(WHEN_ROLE) == "Yesterday" and sidebar.current_id() == cid
