"""Conversation search in the real window's sidebar: typing filters by titles and text, Esc clears."""

from __future__ import annotations

from PySide6.QtCore import Qt

from support.fake_host import window_with


def _shown(window) -> list[str]:
    rows = [window.sidebar.list.item(i) for i in range(window.sidebar.list.count())]
    return [item.text() for item in rows if not item.isHidden()]


def test_typing_filters_the_sidebar_by_title_and_text_and_esc_clears(qtbot, settings, store) -> None:
    for title, text in [
        ("Lisbon trip", "where to eat pastel de nata"),
        ("Sorting", "sort a list in python"),
        ("Bread", "a sourdough starter for the bakery"),
    ]:
        cid = store.create_conversation(title)
        store.add_message(cid, "user", text)
    window, _ = window_with(qtbot, settings, store)
    window.refresh_conversations()
    window.show()
    sidebar = window.sidebar
    assert _shown(window) == ["Bread", "Sorting", "Lisbon trip"]

    qtbot.keyClicks(sidebar.search_field, "lisb")  # a title, by its start
    assert _shown(window) == ["Lisbon trip"]
    sidebar.search_field.clear()
    qtbot.keyClicks(sidebar.search_field, "python")  # message text
    assert _shown(window) == ["Sorting"]
    shown = next(sidebar.list.item(i) for i in range(sidebar.list.count()) if not sidebar.list.item(i).isHidden())
    assert "python" in shown.toolTip()  # the snippet
    sidebar.search_field.clear()
    qtbot.keyClicks(sidebar.search_field, 'NEAR("(*')  # hostile text filters to nothing and raises nothing
    assert _shown(window) == []

    sidebar.search_field.setFocus()
    qtbot.keyClick(sidebar.search_field, Qt.Key.Key_Escape)  # before the window's Esc shortcut
    assert sidebar.search_field.text() == ""
    assert _shown(window) == ["Bread", "Sorting", "Lisbon trip"]
    assert all(not sidebar.list.item(i).toolTip() for i in range(sidebar.list.count()))

    qtbot.keyClicks(sidebar.search_field, "bakery")  # a conversation stored while searching shows when it matches
    cid = store.create_conversation("Cakes")
    store.add_message(cid, "user", "which bakery")
    window.refresh_conversations()
    assert _shown(window) == ["Cakes", "Bread"]
