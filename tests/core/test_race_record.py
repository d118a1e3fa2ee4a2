"""A race's parts without a window: the round timeline a reply records, the race record, the plain run on the demo
pair, and how a first difference is found and told (tie or divergence)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from specchat.core.cancel import CancelToken
from specchat.core.chat.race import (
    TIE_RELATIVE_GAP,
    Fork,
    RaceRecord,
    RaceRequest,
    committed_pieces,
    first_difference,
    fork_context,
    race_refusal,
    run_race,
    summary,
)
from specchat.core.chat.session import ChatSession
from specchat.core.chat.store import ConversationStore, ReplyWriter
from specchat.core.chat.transcript import Message, ReplyFigures, TokenSpan, spans_of
from specchat.core.engine.depth import DepthControl
from specchat.core.types import (
    DrafterKind,
    Finished,
    FinishReason,
    GenerationParams,
    GenerationStats,
    SamplerParams,
    SpecchatError,
    TokenKind,
    Verified,
)
from support.events import verified

GREEDY = {"temperature": 0.0, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "repeat_penalty": 1.1, "repeat_last_n": 64}


def timed(event: Verified, elapsed: float) -> Verified:
    return dataclasses.replace(event, elapsed=elapsed)


def test_the_fold_records_each_rounds_time_tokens_and_characters() -> None:
    figures = ReplyFigures()
    figures.fold([timed(verified(0, ("Hel", "lo"), ("x",), " w"), 0.125)])
    figures.fold([timed(verified(1, (), (), "orld"), 0.5)])
    plain = dataclasses.replace(verified(2, (), (), ""), correction=None)  # ended inside the round: nothing committed
    figures.fold([timed(plain, 0.75)])
    assert figures.timeline == [(0.125, 3, 7), (0.5, 1, 4), (0.75, 0, 0)]
    assert figures.first_token_seconds > 0


def test_timeline_sampler_and_race_survive_the_stored_figures_and_old_rows_still_load(tmp_path: Path) -> None:
    figures = ReplyFigures(sampler=dict(GREEDY))
    figures.fold([timed(verified(0, ("a",), (), "b"), 0.01234567)])
    figures.race = {"v": 1, "text": "ab"}
    again = ReplyFigures.from_dict(json.loads(json.dumps(figures.as_dict())))
    assert again.timeline == [(0.0123, 2, 2)] and again.sampler == GREEDY and again.race == {"v": 1, "text": "ab"}
    old = ReplyFigures.from_dict({"rounds": 2, "generated": 5, "per_round": [[0, 4, 2]], "tokens_per_second": 9.0})
    assert old.timeline == [] and old.sampler is None and old.race is None and old.generated == 5
    assert "race" not in ReplyFigures().as_dict() and "sampler" not in ReplyFigures().as_dict()


def test_the_writer_stores_the_timeline_and_a_race_entry_keeps_the_other_figures(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    store = ConversationStore(path)
    cid = store.create_conversation()
    store.add_message(cid, "user", "hi")
    writer = ReplyWriter(store, cid, figures=ReplyFigures(sampler=dict(GREEDY)))
    for event in (timed(verified(0, ("Hel",), (), "lo"), 0.2), timed(verified(1, (), (), "!"), 0.3)):
        writer.figures.fold([event])
        writer.feed(event)
    writer.figures.fold([Finished(FinishReason.EOS, GenerationStats(generated=3, generate_seconds=0.3))])
    writer.feed(Finished(FinishReason.EOS, GenerationStats(generated=3, generate_seconds=0.3)))
    assert writer.message_id is not None
    before = store.messages(cid)[-1].stats
    store.set_stats_entry(writer.message_id, "race", {"v": 1, "text": "Hello!"})
    store.close()
    stats = ConversationStore(path).messages(cid)[-1].stats
    assert stats is not None and before is not None
    assert stats["race"] == {"v": 1, "text": "Hello!"}
    assert {k: v for k, v in stats.items() if k != "race"} == before
    assert stats["timeline"] == [[0.2, 2, 5], [0.3, 1, 1]] and stats["sampler"] == GREEDY


def test_first_difference_counts_tokens_and_a_reply_ending_early() -> None:
    assert first_difference(["a", "b"], ["a", "b"]) is None
    assert first_difference(["a", "b", "c"], ["a", "x", "c"]) == 1
    assert first_difference(["a", "b"], ["a", "b", "c"]) == 2
    assert first_difference([], ["a"]) == 0
    spans = [TokenSpan(TokenKind.ACCEPTED, "a"), TokenSpan(TokenKind.REJECTED, "z"), TokenSpan(TokenKind.TARGET, "b")]
    assert committed_pieces(spans) == ["a", "b"]


def test_a_fork_is_a_tie_only_within_float_noise_of_the_largest_logit() -> None:
    scale = 20.0
    tie = Fork(3, 5, " cat", " dog", ((" cat", 0.41), (" dog", 0.409)), gap=scale * TIE_RELATIVE_GAP / 2, scale=scale)
    real = dataclasses.replace(tie, gap=math.log(0.41 / 0.2))
    unknown = dataclasses.replace(tie, top=(), gap=None, scale=None)
    assert tie.tie and not real.tie and not unknown.tie
    assert "a float tie" in tie.describe() and "' cat' 0.410, ' dog' 0.409" in tie.describe()
    assert "a real divergence" in real.describe() and "token 3" in real.describe()
    assert "a difference" in unknown.describe()
    before, spec_after, plain_after = fork_context("Hello cat and more", "Hello dog and less", Fork(1, 5, "a", "b"))
    assert (before, spec_after, plain_after) == ("Hello", " cat and more", " dog and less")


def test_the_record_round_trips_and_damaged_ones_are_none() -> None:
    record = RaceRecord("Hello", [(0.1, 1, 3), (0.2, 1, 2)], 0.05, "eos", "t.gguf", 1.5e9,
                        Fork(1, 3, "lo", "p", (("lo", 0.5), ("p", 0.4)), 0.22, 12.0))
    again = RaceRecord.from_dict(json.loads(json.dumps(record.as_dict())))
    assert again == record and again is not None and again.finish_seconds == 0.2
    for damaged in (None, [], {"v": 2}, {**record.as_dict(), "timeline": [[1, 2]]}, {"v": 1}):
        assert RaceRecord.from_dict(damaged) is None


def test_the_summary_gives_both_times_and_the_ratio() -> None:
    assert summary(2.1, 3.4) == "speculative finished in 2.10 s, plain in 3.40 s: 1.62\u00d7 faster"
    assert summary(2.0, 1.0).endswith(": 0.50\u00d7, speculation was slower")


def reply(temperature: float | None = 0.0, *, finished: bool = True, reason: str | None = "eos",
          timeline: bool = True) -> Message:
    figures = ReplyFigures(generated=3, timeline=[(0.1, 3, 5)] if timeline else [],
                           sampler=None if temperature is None else {**GREEDY, "temperature": temperature})
    spans = [TokenSpan(TokenKind.ACCEPTED, "Hel"), TokenSpan(TokenKind.REJECTED, "x"),
             TokenSpan(TokenKind.TARGET, "lo")]
    return Message("assistant", spans=spans, finished=finished, finish_reason=reason, figures=figures, id=7)


def test_who_can_race() -> None:
    assert race_refusal(reply()) == ""
    assert race_refusal(reply(0.7)).startswith("races compare greedy replies (temperature 0)")
    assert race_refusal(reply(finished=False)) == "wait for the reply to finish"
    assert "not recorded" in race_refusal(reply(None)) and "not recorded" in race_refusal(reply(timeline=False))
    assert race_refusal(reply(reason="error")) == "the reply did not finish"
    assert race_refusal(Message("user", "hi")) == "races compare replies"
    stored = reply(0.7)
    assert stored.figures is not None
    stored.figures.race = RaceRecord("Hello", [(0.1, 3, 5)], 0.1, "eos").as_dict()
    assert race_refusal(stored) == ""  # a stored race replays whatever the reply's settings


def test_the_request_takes_the_replys_sampler_length_and_pieces() -> None:
    history = [{"role": "user", "content": "hi"}]
    request = RaceRequest.for_reply(reply(), history)
    assert request.sampler == SamplerParams(**{**GREEDY, "top_k": 40, "repeat_last_n": 64})
    assert (request.message_id, request.max_tokens, request.spec_pieces, request.history) == (7, 3, ("Hel", "lo"),
                                                                                          history)
    with pytest.raises(SpecchatError, match="greedy"):
        RaceRequest.for_reply(reply(0.7), history)


# -- on the demo pair -------------------------------------------------------------------

PROMPT = "List the days of the week, one per line."


@pytest.mark.slow
def test_plain_run_on_the_demo_pair_matches_a_greedy_reply_and_finds_a_planted_difference(demo_engine) -> None:
    sampler = SamplerParams(repeat_penalty=1.1)
    session = ChatSession(demo_engine)
    params = GenerationParams(sampler=sampler, max_tokens=32)
    events = list(session.reply(PROMPT, params, drafter=DrafterKind.DRAFT_MODEL, depth=DepthControl(4)))
    rounds = [e for e in events if isinstance(e, Verified)]
    figures = ReplyFigures()
    figures.fold(events)
    # The engine stamps each verdict from the first round's start: increasing, and within the reply's own time.
    times = [t for t, _, _ in figures.timeline]
    assert times == sorted(times) and times[0] > 0
    final = events[-1]
    assert isinstance(final, Finished) and times[-1] <= final.stats.generate_seconds
    assert sum(n for _, n, _ in figures.timeline) == final.stats.generated
    spec_pieces = [s.text for v in rounds for s in spans_of(v) if s.kind is not TokenKind.REJECTED]
    history = [{"role": "user", "content": PROMPT}]
    request = RaceRequest(1, history, sampler, final.stats.generated, tuple(spec_pieces))

    record = run_race(demo_engine, request, CancelToken())
    assert record is not None and record.fork is None
    assert record.text == "".join(spec_pieces) and record.target == demo_engine.target_name
    assert [n for _, n, _ in record.timeline] == [1] * final.stats.generated  # one token a round at depth 0
    assert sum(c for _, _, c in record.timeline) == len(record.text)
    assert record.finish_seconds > 0 and record.first_token_seconds > 0

    planted = list(spec_pieces)
    planted[3] = "\u2603"  # a token the target would never choose there
    forked = run_race(demo_engine, dataclasses.replace(request, spec_pieces=tuple(planted)), CancelToken())
    assert forked is not None and forked.fork is not None
    fork = forked.fork
    assert (fork.index, fork.plain_piece, fork.spec_piece) == (3, spec_pieces[3], "\u2603")
    assert fork.offset == len("".join(spec_pieces[:3]))
    assert fork.top and fork.top[0][0] == spec_pieces[3]  # greedy: plain chose the target's likeliest
    assert fork.gap is None and fork.scale is not None and fork.scale > 0 and not fork.tie

    if len(fork.top) > 1:  # the target's second choice there: told by the logit gap against the largest logit
        second = list(spec_pieces)
        second[3] = fork.top[1][0]
        other = run_race(demo_engine, dataclasses.replace(request, spec_pieces=tuple(second)), CancelToken())
        assert other is not None and other.fork is not None and other.fork.gap is not None
        assert other.fork.gap == pytest.approx(math.log(fork.top[0][1] / fork.top[1][1]))
        assert other.fork.tie == (other.fork.gap < TIE_RELATIVE_GAP * (other.fork.scale or 0.0))

    cancelled = CancelToken()
    cancelled.cancel()
    assert run_race(demo_engine, request, cancelled) is None
