"""A race's parts without a window: the round timeline a reply records, the race record, the interleaved race on
the demo pair (its block schedule, the drift flag, cancelling), and how a first difference is found and told."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from specchat.core.cancel import CancelToken
from specchat.core.chat.race import RaceProgress, RaceRequest, RaceSide, fork_of, race_refusal, run_race
from specchat.core.chat.race_record import (
    DRIFT_FACTOR,
    PLAIN,
    SPECULATIVE,
    Block,
    Fork,
    RaceRecord,
    RaceRun,
    committed_pieces,
    drift_note,
    first_difference,
    fork_context,
    summary,
)
from specchat.core.chat.store import ConversationStore, ReplyWriter
from specchat.core.chat.transcript import Message, ReplyFigures, TokenSpan, spans_of
from specchat.core.engine.depth import DepthControl
from specchat.core.engine.verify import TIE_RELATIVE_GAP
from specchat.core.runtime.conversation import Conversation
from specchat.core.types import (
    DrafterKind,
    Finished,
    FinishReason,
    GenerationParams,
    GenerationStats,
    SamplerParams,
    SpecchatError,
    TextSource,
    TokenKind,
    Verified,
)
from support.events import verified

GREEDY: dict[str, Any] = {
    "temperature": 0.0,
    "top_k": 40,
    "top_p": 0.95,
    "min_p": 0.05,
    "repeat_penalty": 1.1,
    "repeat_last_n": 64,
}


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
    real = dataclasses.replace(tie, gap=math.log(0.41 / 0.02))  # 0.15 of the largest logit
    unknown = dataclasses.replace(tie, top=(), gap=None, scale=None)
    assert tie.tie and not real.tie and not unknown.tie
    assert "a float tie" in tie.describe() and "' cat' 0.410, ' dog' 0.409" in tie.describe()
    assert "a real divergence" in real.describe() and "token 3" in real.describe()
    assert "a difference" in unknown.describe()
    before, spec_after, plain_after = fork_context("Hello cat and more", "Hello dog and less", Fork(1, 5, "a", "b"))
    assert (before, spec_after, plain_after) == ("Hello", " cat and more", " dog and less")


def record(fork: Fork | None = None) -> RaceRecord:
    spec = RaceRun("Hello", [(0.05, 2, 5)], 0.04, "eos", [(3, "a"), (2, "t")])
    plain = RaceRun("Hello", [(0.1, 1, 3), (0.2, 1, 2)], 0.05, "eos")
    return RaceRecord(
        spec,
        plain,
        [Block(SPECULATIVE, 2, 0.05), Block(PLAIN, 2, 0.2)],
        "draft",
        None,
        "t.gguf",
        1.5e9,
        fork,
        None,
        12.5,
        "",
    )


def test_the_record_round_trips_and_damaged_or_older_ones_are_none() -> None:
    stored = record(Fork(1, 3, "lo", "p", (("lo", 0.5), ("p", 0.4)), 0.22, 12.0))
    again = RaceRecord.from_dict(json.loads(json.dumps(stored.as_dict())))
    assert again == stored and again is not None and again.plain.finish_seconds == 0.2
    assert again.ratio == pytest.approx(4.0) and again.plain.tokens_per_second == pytest.approx(10.0)
    data = stored.as_dict()
    older = {"v": 1, "text": "x", "timeline": [[0.5, 1, 1]], "first_token_seconds": 0.1, "finish_reason": "eos"}
    damaged: object
    for damaged in (
        None,
        [],
        {"v": 3},
        {"v": 2},
        older,
        {**data, "spec": {**data["spec"], "timeline": [[1, 2]]}},
        {**data, "blocks": [["sideways", 1, 0.1]]},
        {**data, "expected_rate": float("nan")},
        {**data, "spec": {**data["spec"], "fates": [[2, "x"]]}},
    ):
        assert RaceRecord.from_dict(damaged) is None


def test_drift_is_flagged_only_beyond_the_noise_either_way() -> None:
    assert drift_note(24.0, 24.0 * DRIFT_FACTOR * 0.99) == "" and drift_note(24.0, 24.0 / DRIFT_FACTOR * 1.01) == ""
    slow = drift_note(24.0, 3.5)
    assert slow.startswith("The machine's speed changed") and "3.5 tokens/s" in slow and "24.0 tokens/s" in slow
    assert drift_note(3.5, 24.0).startswith("The machine's speed changed")
    assert drift_note(0.0, 3.5) == "" and drift_note(24.0, 0.0) == ""  # nothing to compare with


def test_the_summary_gives_both_times_and_the_ratio() -> None:
    assert summary(2.1, 3.4) == "speculative finished in 2.10 s, plain in 3.40 s: 1.62\u00d7 faster"
    assert summary(2.0, 1.0).endswith(": 0.50\u00d7, speculation was slower")


def reply(
    temperature: float | None = 0.0,
    *,
    finished: bool = True,
    reason: str | None = "eos",
    timeline: bool = True,
    drafting: dict[str, Any] | None = None,
    probe: float = 0.0,
) -> Message:
    figures = ReplyFigures(
        generated=3,
        timeline=[(0.1, 3, 5)] if timeline else [],
        sampler=None if temperature is None else {**GREEDY, "temperature": temperature},
        drafting=drafting,
    )
    if probe:
        figures.final = GenerationStats(
            generated=3, generate_seconds=0.1, plain_tokens_per_second=probe, plain_tokens=16
        )
    spans = [
        TokenSpan(TokenKind.ACCEPTED, "Hel"),
        TokenSpan(TokenKind.REJECTED, "x"),
        TokenSpan(TokenKind.TARGET, "lo"),
    ]
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
    stored.figures.race = record().as_dict()
    assert race_refusal(stored) == ""  # a stored race replays whatever the reply's settings


def test_the_request_takes_the_replys_sampler_length_and_pieces() -> None:
    history = [{"role": "user", "content": "hi"}]
    request = RaceRequest.for_reply(reply(), history)
    assert request.sampler == SamplerParams(**{**GREEDY, "top_k": 40, "repeat_last_n": 64})
    assert (request.message_id, request.max_tokens, request.spec_pieces, request.history) == (
        7,
        3,
        ("Hel", "lo"),
        history,
    )
    assert (request.drafter, request.depth, request.expected_rate) == (None, None, 0.0)  # not recorded: defaults
    with pytest.raises(SpecchatError, match="greedy"):
        RaceRequest.for_reply(reply(0.7), history)


def test_the_request_drafts_as_the_reply_did_and_expects_its_probes_plain_rate_else_the_baseline() -> None:
    history = [{"role": "user", "content": "hi"}]
    request = RaceRequest.for_reply(reply(drafting={"drafter": "ngram", "depth": 3}, probe=21.5), history, 30.0)
    assert (request.drafter, request.depth, request.expected_rate) == ("ngram", 3, 21.5)
    auto = RaceRequest.for_reply(reply(drafting={"drafter": "draft", "depth": None}), history, 30.0)
    assert (auto.drafter, auto.depth, auto.expected_rate) == ("draft", None, 30.0)
    odd = RaceRequest.for_reply(reply(drafting={"drafter": 5, "depth": 99}), history)
    assert (odd.drafter, odd.depth) == (None, None)  # a stored value out of range is not used


# -- on the demo pair -------------------------------------------------------------------

PROMPT = "List the days of the week, one per line."


def greedy_reply(runtime, sampler: SamplerParams, max_tokens: int, depth: int | None = 4) -> tuple[list[str], int]:
    """A greedy reply on the demo pair drafted by the draft model: its committed pieces and token count."""
    session = Conversation(runtime)
    params = GenerationParams(sampler=sampler, max_tokens=max_tokens)
    events = list(session.reply(PROMPT, params, drafter=DrafterKind.DRAFT_MODEL, depth=DepthControl(depth)))
    final = events[-1]
    assert isinstance(final, Finished)
    rounds = [e for e in events if isinstance(e, Verified)]
    return [s.text for v in rounds for s in spans_of(v) if s.kind is not TokenKind.REJECTED], final.stats.generated


@pytest.mark.slow
def test_the_race_interleaves_both_runs_in_blocks_and_its_ratio_comes_from_them(demo_runtime) -> None:
    sampler = SamplerParams(repeat_penalty=1.1)
    pieces, generated = greedy_reply(demo_runtime, sampler, 40)
    history = [{"role": "user", "content": PROMPT}]
    request = RaceRequest(1, history, sampler, generated, tuple(pieces), DrafterKind.DRAFT_MODEL.value, 4)
    told: list[RaceProgress] = []
    record = run_race(demo_runtime, request, CancelToken(), told.append, block_tokens=8)
    assert record is not None and record.fork is None and record.reply_fork is None
    assert record.spec.text == record.plain.text == "".join(pieces)
    assert (record.drafter, record.depth, record.target) == ("draft", 4, demo_runtime.target_name)
    # Blocks in turns: S P, P S, S P, ...: each pair holds one block of each run over the same tokens.
    sides = [b.side for b in record.blocks]
    expected = [side for i in range(len(sides) // 2) for side in ((SPECULATIVE, PLAIN), (PLAIN, SPECULATIVE))[i % 2]]
    assert sides == expected and len(sides) >= 4
    for i in range(0, len(sides), 2):
        assert record.blocks[i].tokens == record.blocks[i + 1].tokens <= 8
    for run, side in ((record.spec, SPECULATIVE), (record.plain, PLAIN)):
        mine = [b for b in record.blocks if b.side == side]
        assert sum(b.tokens for b in mine) == run.tokens == generated
        assert run.finish_seconds == pytest.approx(sum(b.seconds for b in mine), abs=1e-3)  # only its own blocks
        times = [t for t, _, _ in run.timeline]
        assert times == sorted(times) and sum(c for _, _, c in run.timeline) == len(run.text)
    assert [n for _, n, _ in record.plain.timeline] == [1] * generated  # one token a round at depth 0
    assert record.ratio == pytest.approx(record.plain.finish_seconds / record.spec.finish_seconds)
    assert sum(n for n, _ in record.spec.fates) == len(record.spec.text) and record.plain.fates == []
    assert {kind for _, kind in record.spec.fates} <= {"a", "t"}
    # Progress came after every block, the last with both runs done.
    assert len(told) >= len(record.blocks) and told[-1].spec_tokens == told[-1].plain_tokens == generated
    assert told[-1].block == len(record.blocks) and told[-1].total == generated
    assert record.expected_rate == 0.0 and record.drift == ""  # nothing measured before: nothing to flag


@pytest.mark.slow
def test_a_race_far_from_the_stored_baseline_is_flagged_and_stored_with_the_flag(demo_runtime, tmp_path: Path) -> None:
    sampler = SamplerParams(repeat_penalty=1.1)
    pieces, generated = greedy_reply(demo_runtime, sampler, 16)
    request = RaceRequest(
        1, [{"role": "user", "content": PROMPT}], sampler, generated, tuple(pieces), "draft", 4, expected_rate=1e6
    )  # a baseline no machine reaches: a machine since slowed down
    drifted = run_race(demo_runtime, request, CancelToken())
    assert drifted is not None and drifted.expected_rate == 1e6
    assert drifted.drift.startswith("The machine's speed changed")
    assert f"{drifted.plain.tokens_per_second:.1f} tokens/s in this race" in drifted.drift
    again = RaceRecord.from_dict(json.loads(json.dumps(drifted.as_dict())))
    assert again is not None and again.drift == drifted.drift
    # Close to the race's own plain rate: within the noise, no flag.
    rate = drifted.plain.tokens_per_second
    close = run_race(demo_runtime, dataclasses.replace(request, expected_rate=rate), CancelToken())
    assert close is not None and close.expected_rate == rate
    assert close.drift == drift_note(rate, close.plain.tokens_per_second)
    assert drift_note(rate, rate) == "" and drift_note(rate * 1.1, rate) == ""


@pytest.mark.slow
def test_a_cancelled_race_gives_nothing(demo_runtime) -> None:
    sampler = SamplerParams(repeat_penalty=1.1)
    pieces, generated = greedy_reply(demo_runtime, sampler, 24)
    request = RaceRequest(1, [{"role": "user", "content": PROMPT}], sampler, generated, tuple(pieces), "draft", 4)
    cancel = CancelToken()
    told: list[RaceProgress] = []

    def stop_after_the_first_block(progress: RaceProgress) -> None:
        told.append(progress)
        if progress.block >= 1 and progress.plain_tokens + progress.spec_tokens >= 8:
            cancel.cancel()

    assert run_race(demo_runtime, request, cancel, stop_after_the_first_block, block_tokens=8) is None
    assert told and told[-1].spec_tokens + told[-1].plain_tokens < 2 * generated  # it stopped before the end
    stopped = CancelToken()
    stopped.cancel()
    assert run_race(demo_runtime, request, stopped) is None


def request_params(request: RaceRequest) -> GenerationParams:
    return GenerationParams(sampler=request.sampler, max_tokens=request.max_tokens, seed=0)


@pytest.mark.slow
def test_the_race_on_the_demo_pair_matches_a_greedy_reply_and_tells_a_planted_difference(demo_runtime) -> None:
    sampler = SamplerParams(repeat_penalty=1.1)
    session = Conversation(demo_runtime)
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
    request = RaceRequest(1, history, sampler, final.stats.generated, tuple(spec_pieces), "draft", 4)
    record = run_race(demo_runtime, request, CancelToken())
    assert record is not None and record.fork is None
    assert record.plain.text == "".join(spec_pieces) and record.target == demo_runtime.target_name
    assert record.plain.finish_seconds > 0 and record.plain.first_token_seconds > 0

    # A stored reply the speculative run did not write again: told apart from the race's own difference.
    planted = list(spec_pieces)
    planted[3] = "\u2603"  # a token the target would never choose there
    forked = run_race(demo_runtime, dataclasses.replace(request, spec_pieces=tuple(planted)), CancelToken())
    assert forked is not None and forked.reply_fork == 3 and forked.fork is None

    # The fork's rule on the plain run's own view: a planted token, then the target's second choice.
    prompt = demo_runtime.prompt(history).tokens
    plain = RaceSide(PLAIN, DrafterKind.NONE.value, 0)
    plain.block(demo_runtime, prompt, request_params(request), request.max_tokens, CancelToken(), lambda: None)
    assert plain.pieces == spec_pieces and fork_of(demo_runtime, prompt, plain, spec_pieces) is None
    fork = fork_of(demo_runtime, prompt, plain, planted)
    assert fork is not None
    assert (fork.index, fork.plain_piece, fork.spec_piece) == (3, spec_pieces[3], "\u2603")
    assert fork.offset == len("".join(spec_pieces[:3]))
    assert fork.top and fork.top[0][0] == spec_pieces[3]  # greedy: plain chose the target's likeliest
    assert fork.gap is None and fork.scale is not None and fork.scale > 0 and not fork.tie

    if len(fork.top) > 1:  # the target's second choice there: told by the logit gap against the largest logit
        second = list(spec_pieces)
        second[3] = fork.top[1][0]
        other = fork_of(demo_runtime, prompt, plain, second)
        assert other is not None and other.gap is not None
        assert other.gap == pytest.approx(math.log(fork.top[0][1] / fork.top[1][1]))
        assert other.tie == (other.gap < TIE_RELATIVE_GAP * (other.scale or 0.0))

    cancelled = CancelToken()
    cancelled.cancel()
    assert run_race(demo_runtime, request, cancelled) is None


@pytest.mark.slow
def test_the_speculative_run_drafts_from_the_replys_files_as_the_reply_did(demo_runtime) -> None:
    sampler = SamplerParams(repeat_penalty=1.1)
    pieces, generated = greedy_reply(demo_runtime, sampler, 32)
    history = [{"role": "user", "content": PROMPT}]
    # A file holding the reply itself (as a document a reply copies): lookup drafts it by name, not from the prompt.
    files = (TextSource("reply.txt", "".join(pieces), "attachment"),)
    bare = RaceRequest(1, history, sampler, generated, tuple(pieces), DrafterKind.NGRAM.value, 8)
    kept: dict[bool, int] = {}
    for with_files in (False, True):
        request = dataclasses.replace(bare, sources=files if with_files else ())
        record = run_race(demo_runtime, request, CancelToken(), block_tokens=8)
        assert record is not None and record.spec.text == record.plain.text == "".join(pieces)
        kept[with_files] = sum(n for n, kind in record.spec.fates if kind == "a")
    assert kept[True] > kept[False]  # characters of accepted drafts
