"""The token X-ray's data: the engine's top lists, the spans' details, and acceptance by draft position."""

from __future__ import annotations

import numpy as np
import pytest

from specchat.core.chat.transcript import ReplyFigures, TokenDetail, spans_of
from specchat.core.engine.depth import DepthControl
from specchat.core.engine.positions import PositionCounts, counts_of, position_acceptance
from specchat.core.engine.sampling import Distribution
from specchat.core.engine.verify import top
from specchat.core.runtime.conversation import Conversation
from specchat.core.runtime.runtime import Runtime
from specchat.core.types import DrafterKind, DraftSource, GenerationParams, SamplerParams, TokenKind, Verified
from support.xray import xray_round

PROMPT = "Write a short list of three fruits and say one thing about each."


def _rounds(runtime: Runtime, params: GenerationParams, drafter: DrafterKind, depth: int) -> list[Verified]:
    events = Conversation(runtime).reply(PROMPT, params, drafter=drafter, depth=DepthControl(depth))
    return [e for e in events if isinstance(e, Verified)]


def test_top_is_the_likeliest_first_with_ties_by_id() -> None:
    dist = Distribution(np.array([2, 5, 7, 9, 11, 13], dtype=np.int64), np.array([0.1, 0.3, 0.1, 0.05, 0.4, 0.05]))
    assert top(dist) == ((11, 0.4), (5, 0.3), (2, 0.1), (7, 0.1), (9, 0.05))
    assert top(dist, 2) == ((11, 0.4), (5, 0.3))
    assert top(Distribution.one_hot(42)) == ((42, 1.0),)


def test_greedy_rounds_carry_both_top_lists_consistent_with_the_verdict(demo_runtime: Runtime) -> None:
    rounds = _rounds(demo_runtime, GenerationParams(max_tokens=48), DrafterKind.DRAFT_MODEL, 4)
    drafted = [v for v in rounds if v.sources]
    assert drafted and any(v.rejected for v in drafted) and any(v.accepted for v in drafted)
    piece = demo_runtime.target.piece
    for v in rounds:
        n = len(v.sources)
        judged = n - len(v.rejected)
        assert v.greedy
        assert len(v.draft_top) == n and len(v.target_top) == n + 1
        drafts = [*v.accepted, *v.rejected]
        for i, entries in enumerate(v.target_top):
            assert 1 <= len(entries) <= 5
            assert [p for _, p, _ in entries] == sorted((p for _, p, _ in entries), reverse=True)
            assert all(text == piece(t).decode("utf-8", errors="backslashreplace") for t, _, text in entries)
            if i < len(drafts) and drafts[i] in {t for t, _, _ in entries}:
                assert dict((t, p) for t, p, _ in entries)[drafts[i]] == pytest.approx(v.target_probs[i])
        for i, x in enumerate(v.accepted):  # at temperature 0 an accepted draft is the target's argmax
            assert v.target_top[i][0][0] == x
        if v.correction is not None:
            assert v.target_top[judged][0][0] == v.correction
        for i, x in enumerate(drafts):  # the draft model drafted its own argmax: the head of its list
            assert v.draft_top[i][0][0] == x
            assert v.draft_top[i][0][1] == pytest.approx(v.draft_probs[i])


def test_sampled_rounds_show_q_as_the_draft_sampled_it(demo_runtime: Runtime) -> None:
    params = GenerationParams(sampler=SamplerParams(temperature=0.9), max_tokens=32, seed=7)
    rounds = _rounds(demo_runtime, params, DrafterKind.DRAFT_MODEL, 3)
    checked = 0
    for v in rounds:
        assert not v.greedy
        for x, q, entries in zip([*v.accepted, *v.rejected], v.draft_probs, v.draft_top, strict=False):
            listed = {t: p for t, p, _ in entries}
            if x in listed:
                assert listed[x] == pytest.approx(q)
                checked += 1
    assert checked > 0


def test_a_lookup_draft_lists_its_token_alone_at_one(demo_runtime: Runtime) -> None:
    prompt_params = GenerationParams(max_tokens=40)
    events = Conversation(demo_runtime).reply(
        "Repeat exactly: the cat sat on the mat, the cat sat on the mat, the cat",
        prompt_params,
        drafter=DrafterKind.NGRAM,
        depth=DepthControl(4),
    )
    rounds = [e for e in events if isinstance(e, Verified) and e.sources]
    assert rounds
    for v in rounds:
        for x, entries in zip([*v.accepted, *v.rejected], v.draft_top, strict=True):
            assert [(t, p) for t, p, _ in entries] == [(x, 1.0)]


def test_spans_carry_position_source_alternatives_and_the_correction() -> None:
    spans = spans_of(xray_round(accepted=1, rejected=2, correction=51))
    kinds = [s.kind for s in spans]
    assert kinds == [TokenKind.ACCEPTED, TokenKind.REJECTED, TokenKind.REJECTED, TokenKind.TARGET]
    details = [s.detail for s in spans]
    assert all(d is not None for d in details)
    first, rejected, unjudged, own = (d for d in details if d is not None)
    assert (first.position, first.source, first.match_length) == (1, DraftSource.LOOKUP, 4)
    assert first.target_top == (("t0", 0.6), ("d0", 0.3)) and first.draft_top == (("d0", 0.8),)
    assert (rejected.position, rejected.source, rejected.judged, rejected.correction) == (
        2,
        DraftSource.MODEL,
        True,
        "t1",
    )
    assert (unjudged.position, unjudged.judged, unjudged.correction) == (3, False, None)
    assert (own.position, own.source, own.replaced, own.target_top[0]) == (0, None, "d1", ("t1", 0.6))


def test_a_bonus_token_replaces_nothing_and_old_events_have_no_detail() -> None:
    spans = spans_of(xray_round(accepted=2, rejected=0, correction=52))
    own = spans[-1].detail
    assert own is not None and own.replaced is None and own.target_top[0] == ("t2", 0.6)
    bare = Verified(0, 1, (5,), (), 6, ("a",), (), "b", (0.9,), (0.8,))
    assert [s.detail for s in spans_of(bare)] == [None, None]


def test_a_detail_packs_to_compact_json_and_back() -> None:
    detail = TokenDetail(
        2, DraftSource.LOOKUP, 5, True, (("a b", 0.123456), ("\n", 0.2)), (("x", 1.0),), True, "y", None
    )
    packed = detail.pack()
    assert packed == [2, "lookup", 5, 1, ["a b", 0.123, "\n", 0.2], ["x", 1.0], 1, "y"]  # the default tail left out
    back = TokenDetail.unpack(packed)
    assert back == TokenDetail(
        2, DraftSource.LOOKUP, 5, True, (("a b", 0.123), ("\n", 0.2)), (("x", 1.0),), True, "y", None
    )
    plain = TokenDetail(1, DraftSource.MODEL, 0, False, (("a", 0.5),), (("a", 0.75),))
    assert len(plain.pack()) == 6 and TokenDetail.unpack(plain.pack()) == plain
    for junk in (None, [], [1, 2], "text", [0, "nobody", 0, 0, [], [], 1, None, None], [0] * 10):
        assert TokenDetail.unpack(junk) is None


def test_position_acceptance_is_conditional_on_reaching_the_position() -> None:
    # (drafted, accepted): position 1 is reached by every round and accepted by 3 of 4; position 2 only
    # by the rounds that kept position 1 and drafted a second token (2 of them, 1 kept it); position 3
    # once. The drafts after a rejection are not counted: the target never judged them.
    counts = counts_of([(3, 0), (3, 2), (1, 1), (4, 1)])
    assert counts.as_list() == [[4, 3], [2, 1], [1, 0]]
    assert position_acceptance(counts) == [(0.75, 4), (0.5, 2), (0.0, 1)]
    other = counts_of([(2, 2)])
    assert position_acceptance([counts, other]) == [(0.8, 5), (2 / 3, 3), (0.0, 1)]
    assert position_acceptance([]) == []
    assert PositionCounts.from_list([[3, 9]]).as_list() == [[3, 3]]  # never more accepted than reached
    assert PositionCounts.from_list([[1, "x"]]).as_list() == [] and PositionCounts.from_list(None).as_list() == []


def test_reply_figures_fold_and_store_the_position_counts() -> None:
    figures = ReplyFigures()
    figures.fold([xray_round(1, 2), xray_round(2, 0, correction=None), xray_round(0, 0)])
    assert figures.positions.as_list() == [[2, 2], [2, 1]]
    again = ReplyFigures.from_dict(figures.as_dict())
    assert again.positions.as_list() == [[2, 2], [2, 1]]
    assert ReplyFigures.from_dict({"generated": 3}).positions.as_list() == []  # stored before the X-ray


def test_top_matches_a_full_sort_on_large_tied_and_small_distributions() -> None:
    rng = np.random.default_rng(1)
    for trial in range(120):
        size = int(rng.integers(1, 60_000)) if trial % 3 else int(rng.integers(1, 50))
        probs = rng.random(size) ** int(rng.integers(1, 8))
        if trial % 5 == 0:
            probs = np.round(probs, 1) + 1e-9  # many ties
        if trial % 7 == 0:
            probs = np.ones(size)  # all tied
        probs /= probs.sum()
        ids = np.sort(rng.choice(1_000_000, size, replace=False)).astype(np.int64)
        order = np.lexsort((ids, -probs))[:5]
        assert top(Distribution(ids, probs)) == tuple((int(ids[i]), float(probs[i])) for i in order), trial
