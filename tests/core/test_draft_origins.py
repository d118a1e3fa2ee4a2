"""Where a lookup draft came from ("report.pdf" or the conversation): kept in each token's X-ray detail (stored and
read back, older details too) and counted per text in a reply's figures."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from specchat.core.chat.store import ConversationStore, ReplyWriter
from specchat.core.chat.transcript import ReplyFigures, TokenDetail, spans_of
from specchat.core.engine.lookup import INSERTED, REPLACED
from specchat.core.types import DraftSource, Finished, FinishReason, GenerationStats, Verified
from support.xray import xray_round


def _with_origins(accepted: int, rejected: int, origins: tuple[str, ...]) -> Verified:
    r = xray_round(accepted, rejected)
    return dataclasses.replace(r, sources=(DraftSource.LOOKUP,) * len(origins), origins=origins)


def test_each_drafted_tokens_detail_names_its_text() -> None:
    spans = spans_of(_with_origins(2, 1, ("report.pdf", "report.pdf", "")))
    assert [s.detail.origin for s in spans if s.detail is not None] == ["report.pdf", "report.pdf", "", ""]
    (without,) = [s for s in spans_of(xray_round(1, 0)) if s.detail is not None and s.detail.position == 1]
    assert without.detail is not None and without.detail.origin == ""  # a round made without origins


def test_an_origin_is_packed_read_back_and_an_older_pack_reads_as_the_conversation() -> None:
    detail = TokenDetail(1, DraftSource.LOOKUP, 5, True, (("a", 0.5),), (("a", 1.0),), origin="notes.md")
    packed = detail.pack()
    assert packed[-1] == "notes.md" and TokenDetail.unpack(packed) == detail
    plain = dataclasses.replace(detail, origin="")
    assert len(plain.pack()) == 6  # the defaults' tail left out, as before
    older = [1, "lookup", 5, 1, ["a", 0.5], ["a", 1.0], 1, None, None]  # written before origins
    assert TokenDetail.unpack(older) == plain
    assert TokenDetail.unpack([*older, 7]) is None  # an origin that is not text: the detail does not read back
    assert detail.as_dict()["origin"] == "notes.md"


def test_a_replys_figures_count_lookup_per_text_and_keep_them(tmp_path: Path) -> None:
    figures = ReplyFigures()
    figures.fold([_with_origins(2, 1, ("report.pdf", "report.pdf", "report.pdf"))])
    figures.fold([_with_origins(1, 1, ("", ""))])
    assert figures.by_origin == {"report.pdf": [3, 2], "": [2, 1]}
    stored = figures.as_dict()
    assert stored["by_origin"] == {"": [2, 1], "report.pdf": [3, 2]}
    assert ReplyFigures.from_dict(stored).by_origin == figures.by_origin
    problems: list[str] = []
    bad = ReplyFigures.from_dict({**stored, "by_origin": {"x.md": [1, 5], "y.md": "lots"}}, problems)
    assert bad.by_origin == {} and "by_origin" in problems

    store = ConversationStore(tmp_path / "c.sqlite3")
    cid = store.create_conversation()
    store.add_message(cid, "user", "quote it")
    writer = ReplyWriter(store, cid)
    writer.feed(_with_origins(2, 0, ("report.pdf", "report.pdf")))
    writer.feed(Finished(FinishReason.EOS, GenerationStats()))
    store.close()
    reply = ConversationStore(tmp_path / "c.sqlite3").messages(cid)[-1]
    assert [s.detail.origin for s in reply.spans if s.detail is not None][:2] == ["report.pdf", "report.pdf"]
    assert reply.stats is not None and reply.stats["by_origin"] == {"report.pdf": [2, 2]}


def test_a_guess_of_where_a_copy_resumes_is_stored_and_read_back_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Such a draft's match length is negative (lookup.INSERTED, lookup.REPLACED): the store's check on reading
    takes those two and no other negative number."""
    guessed = dataclasses.replace(_with_origins(2, 1, ("", "", "")), match_lengths=(REPLACED, REPLACED, INSERTED))
    store = ConversationStore(tmp_path / "c.sqlite3")
    cid = store.create_conversation()
    store.add_message(cid, "user", "proofread it")
    writer = ReplyWriter(store, cid)
    writer.feed(guessed)
    writer.feed(Finished(FinishReason.EOS, GenerationStats()))
    store.close()
    with caplog.at_level(logging.WARNING):
        reply = ConversationStore(tmp_path / "c.sqlite3").messages(cid)[-1]
    assert "read back" not in caplog.text
    assert [s.detail.match_length for s in reply.spans if s.detail is not None][:3] == [REPLACED, REPLACED, INSERTED]
    detail = TokenDetail(1, DraftSource.LOOKUP, INSERTED, True, (("a", 0.5),), (("a", 1.0),))
    assert TokenDetail.unpack(detail.pack()) == detail
    assert TokenDetail.unpack([1, "lookup", -3, 1, ["a", 0.5], ["a", 1.0]]) is None
