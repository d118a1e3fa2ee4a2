"""Titles cut at a word boundary, clean export names, and the sidebar's dates and day groups."""

from __future__ import annotations

import datetime as dt

from specchat.core.chat.dates import OLDER, TODAY, WEEK, YESTERDAY, day_group, full_when, short_when
from specchat.core.chat.titles import cut_at_word, export_filename, title_for

LONG = "Describe the famous painting by experts in art history and its meaning"


def test_a_long_first_message_is_cut_at_a_word_with_an_ellipsis() -> None:
    title = title_for(LONG, 48)
    assert title == "Describe the famous painting by experts in art\u2026"
    assert len(title) <= 48 and "painting by e\u2026" not in title
    assert title_for("Short question?\nsecond line", 48) == "Short question?"
    assert title_for("   \n  spaced   out  words ", 48) == "spaced out words"
    assert title_for("x" * 80, 10) == "x" * 9 + "\u2026"  # one long word: no boundary to cut at
    assert cut_at_word("one two three", 8) == "one two\u2026"
    assert cut_at_word("exactly eight", 13) == "exactly eight"


def test_the_export_name_is_clean_and_ends_at_a_word() -> None:
    assert export_filename("Describe the famous painting by e", "md") == "Describe the famous painting by e.md"
    assert export_filename("Describe the famous painting by experts\u2026", "json") == (
        "Describe the famous painting by experts.json"
    )
    assert export_filename('a/b: "c"? <d>|*', "md") == "a b c d.md"
    assert export_filename("../..", "md") == "conversation.md"
    assert export_filename(LONG, "md", limit=30) == "Describe the famous painting.md"
    assert export_filename("Größe und Café", "md") == "Größe und Café.md"


def _at(days_back: int, hour: int, minute: int = 0) -> float:
    now = dt.datetime(2026, 11, 12, 15, 0)  # a Thursday
    return (now - dt.timedelta(days=days_back)).replace(hour=hour, minute=minute).timestamp()


NOW = _at(0, 15)


def test_relative_dates_and_their_groups() -> None:
    assert (short_when(_at(0, 14, 32), NOW), day_group(_at(0, 14, 32), NOW)) == ("14:32", TODAY)
    assert (short_when(_at(1, 23, 59), NOW), day_group(_at(1, 23, 59), NOW)) == ("Yesterday", YESTERDAY)
    assert (short_when(_at(3, 9), NOW), day_group(_at(3, 9), NOW)) == ("Mon", WEEK)
    assert (short_when(_at(7, 9), NOW), day_group(_at(7, 9), NOW)) == ("5 Nov", WEEK)
    assert (short_when(_at(9, 9), NOW), day_group(_at(9, 9), NOW)) == ("3 Nov", OLDER)
    assert short_when(_at(400, 9), NOW) == "8 Oct 2025"
    assert day_group(NOW + 86_400 * 3, NOW) == TODAY  # a clock set back: not "in the future"
    assert short_when(_at(1, 8, 5), NOW, with_time=True) == "Yesterday 08:05"
    assert short_when(_at(0, 8, 5), NOW, with_time=True) == "08:05"
    assert full_when(_at(3, 9, 7)) == "Mon 9 Nov 2026, 09:07"
