"""When a conversation happened, as the sidebar says it: "14:32", "Yesterday", "Mon", "3 Nov", and its day group."""

from __future__ import annotations

import datetime as dt

PINNED, TODAY, YESTERDAY, WEEK, OLDER = "Pinned", "Today", "Yesterday", "Previous 7 days", "Older"
GROUPS = (PINNED, TODAY, YESTERDAY, WEEK, OLDER)  # in the order the sidebar shows them


def _days_ago(timestamp: float, now: float) -> int:
    """Calendar days between ``timestamp`` and ``now`` in local time (0: the same day; negative: a future one)."""
    return (dt.date.fromtimestamp(now) - dt.date.fromtimestamp(timestamp)).days


def day_group(timestamp: float, now: float) -> str:
    """Today, Yesterday, Previous 7 days or Older (a clock set back counts as today)."""
    days = _days_ago(timestamp, now)
    if days <= 0:
        return TODAY
    if days == 1:
        return YESTERDAY
    return WEEK if days <= 7 else OLDER


def short_when(timestamp: float, now: float, *, with_time: bool = False) -> str:
    """ "14:32" today, "Yesterday", "Mon" within the week, "3 Nov" this year, "3 Nov 2025" before.

    ``with_time`` adds the time to a day ("Yesterday 14:32"): two conversations of one title are told apart.
    """
    when = dt.datetime.fromtimestamp(timestamp)
    clock = f"{when:%H:%M}"
    days = _days_ago(timestamp, now)
    if days <= 0:
        return clock
    if days == 1:
        day = "Yesterday"
    elif days < 7:
        day = f"{when:%a}"
    elif when.year == dt.date.fromtimestamp(now).year:
        day = f"{when.day} {when:%b}"
    else:
        day = f"{when.day} {when:%b} {when.year}"
    return f"{day} {clock}" if with_time else day


def full_when(timestamp: float) -> str:
    """The date and time in full, for a tooltip: "Mon 3 Nov 2025, 14:32"."""
    when = dt.datetime.fromtimestamp(timestamp)
    return f"{when:%a} {when.day} {when:%b} {when.year}, {when:%H:%M}"
