"""Rows of the conversation database to records and back: messages, spans with their X-ray detail, figures.

Reading is forgiving: SQLite lets any column hold any type, so each value is
checked, and what does not read back is left out and named in ``problems`` (the
store logs those once).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from specchat.core.jsonfile import UnreadableFileError, parse_json
from specchat.core.types import TokenKind

from .attachments import Attachment
from .store_schema import StoreError
from .transcript import ReplyFigures, TokenDetail, TokenSpan

SpanRow = tuple[object, ...]  # message_id, seq, kind, text, round, target_prob, draft_prob, detail


@dataclass
class StoredMessage:
    id: int
    role: str
    content: str
    spans: list[TokenSpan] = field(default_factory=list)
    stats: dict[str, Any] | None = None
    finish_reason: str | None = None
    version: int = 1  # which of the versions at this place in the conversation (1-based)
    versions: int = 1  # how many there are (regenerated replies, edited messages)
    attachments: list[Attachment] = field(default_factory=list)  # files attached to a user message


@dataclass(frozen=True)
class ConversationInfo:
    id: int
    title: str
    created: float
    updated: float
    system_prompt: str = ""
    pinned: bool = False  # listed at the top, under "Pinned"


def _detail_json(span: TokenSpan) -> str | None:
    return None if span.detail is None else json.dumps(span.detail.pack(), ensure_ascii=False, separators=(",", ":"))


def _detail_of(text: object) -> TokenDetail | None:
    """A span's stored detail, or None when it has none or it does not read back."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return TokenDetail.unpack(parse_json(text, "detail"))
    except UnreadableFileError:
        return None


def text_of(value: object) -> str:
    """A text column's value as text (SQLite lets any column hold a number or a blob)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def _probability(value: object) -> float | None:
    """A stored probability: a number from 0 to 1, else None."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0
    return float(value) if ok else None  # type: ignore[arg-type]


_KINDS = {kind.value: kind for kind in TokenKind}


def span_rows(message_id: int, start: int, spans: Iterable[TokenSpan]) -> list[SpanRow]:
    """The ``spans`` table's rows for ``spans``, numbered on from ``start``."""
    return [
        (message_id, start + i, s.kind.value, s.text, s.round, s.target_prob, s.draft_prob, _detail_json(s))
        for i, s in enumerate(spans)
    ]


def spans_of_rows(rows: Iterable[sqlite3.Row | tuple[Any, ...]], problems: list[str]) -> list[TokenSpan]:
    """Spans from rows of (kind, text, round, target_prob, draft_prob, detail), checked; none when one has an
    unknown kind (the text then shows without colours)."""
    spans: list[TokenSpan] = []
    bad = dict.fromkeys(("round", "target_prob", "draft_prob", "detail"), 0)
    for kind_value, text, round_, target_p, draft_p, detail_text in rows:
        kind = _KINDS.get(kind_value) if isinstance(kind_value, str) else None
        if kind is None:
            problems.append(f"a token of unknown kind {kind_value!r:.40}: its tokens are shown without colours")
            return []
        target_prob, draft_prob, detail = _probability(target_p), _probability(draft_p), _detail_of(detail_text)
        if type(round_) is not int:
            bad["round"] += 1
            round_ = -1
        bad["target_prob"] += target_prob is None and target_p is not None
        bad["draft_prob"] += draft_prob is None and draft_p is not None
        bad["detail"] += detail is None and detail_text is not None
        spans.append(TokenSpan(kind, text_of(text), round_, target_prob, draft_prob, detail))
    problems += [
        f"{n} token{'s' if n > 1 else ''} with an unreadable {name} (left out)" for name, n in bad.items() if n
    ]
    return spans


def stats_of(text: object, problems: list[str]) -> dict[str, Any] | None:
    """A message's stored figures without the values that do not read back; None when there are none."""
    if text is None or text == "":
        return None
    try:
        stats = parse_json(text_of(text), "the figures column")
    except UnreadableFileError as exc:
        problems.append(f"{exc} (left out)")
        return None
    if not isinstance(stats, dict):
        problems.append("the figures column is not an object (left out)")
        return None
    skipped: list[str] = []
    ReplyFigures.from_dict(stats, skipped)
    if skipped:
        problems.append(f"figures {', '.join(skipped)} of the wrong type or out of range (left out)")
    return {key: value for key, value in stats.items() if key not in skipped}


def attachment_rows(message_id: int, attachments: Iterable[Attachment]) -> list[tuple[object, ...]]:
    """The ``attachments`` table's rows for a message's ``attachments``, in order."""
    return [(message_id, i, a.name, a.size, a.text, a.tokens, a.note) for i, a in enumerate(attachments)]


def attachments_of_rows(rows: Iterable[sqlite3.Row | tuple[Any, ...]], problems: list[str]) -> list[Attachment]:
    """Attachments from rows of (name, size, text, tokens, note), checked; a number that does not read back is
    left out (a size of 0, a count of None) and named in ``problems``."""
    out: list[Attachment] = []
    for name, size, text, tokens, note in rows:
        if type(size) is not int or size < 0:
            problems.append(f"attachment {text_of(name)!r:.60}: an unreadable size (shown as 0)")
            size = 0
        if tokens is not None and (type(tokens) is not int or tokens < 0):
            problems.append(f"attachment {text_of(name)!r:.60}: an unreadable token count (left out)")
            tokens = None
        out.append(Attachment(text_of(name), size, text_of(text), tokens, text_of(note)))
    return out


def inserted_id(cur: sqlite3.Cursor) -> int:
    """The id SQLite gave the row that ``cur``'s INSERT just added."""
    if cur.lastrowid is None:  # only when the statement was no INSERT
        raise StoreError("the database did not say which row it added")
    return cur.lastrowid
