"""Lookup in texts outside the context (attachments, a prediction): where a draft came from, the longest match
winning, and each text weighed by its own acceptance (deterministic, no model)."""

from __future__ import annotations

import numpy as np

from specchat.core.cancel import CancelToken
from specchat.core.engine.composite import AcceptanceTable, CompositeDrafter, Costs, choose, match_key
from specchat.core.engine.drafters import DraftModelDrafter, DraftRequest, NgramDrafter
from specchat.core.engine.lookup import Found, LookupText, find_proposals, lookup_with_texts
from specchat.core.runtime.sources import PREDICTION_ANCHOR, lookup_texts
from specchat.core.types import PREDICTION_NAME, DraftSource, SamplerParams, TextSource
from support.draft_contexts import SureContext

LOOKUP, MODEL = DraftSource.LOOKUP, DraftSource.MODEL
PRED = PREDICTION_NAME


def request(tokens: list[int], k: int = 8, texts: tuple[LookupText, ...] = ()) -> DraftRequest:
    return DraftRequest(tokens, k, SamplerParams(), np.random.default_rng(0), CancelToken(), texts=texts)


def test_a_text_s_longer_match_wins_and_names_its_text() -> None:
    seq = np.asarray([1, 2, 3, 9, 2, 3], dtype=np.int64)  # the conversation: "2 3" followed by 9
    doc = LookupText.of("report.txt", [7, 1, 2, 3, 40, 41, 42])  # the text: "1 2 3" followed by 40
    found = find_proposals(seq, 2, 3, [doc], max_length=32)
    assert found == [Found(2, (9, 2, 3), ""), Found(2, (40, 41, 42), "report.txt")]  # equal: the conversation first
    longer = np.asarray([5, 2, 3, 9, 1, 2, 3], dtype=np.int64)
    found = find_proposals(longer, 2, 3, [doc], max_length=32)
    assert found[0] == Found(3, (40, 41, 42), "report.txt")  # "1 2 3" runs further back in the text
    assert lookup_with_texts(longer, 3, 3, 1, [doc]) == ([40, 41, 42], 3, "report.txt")
    assert lookup_with_texts(longer, 3, 3, 1, []) == ([9, 1, 2], 2, "")  # without texts: as before


def test_a_prediction_is_preferred_over_the_conversation_on_an_equal_match() -> None:
    """A client sends the file the reply will copy, and the file is in the prompt too: the copy is credited to the
    prediction, a document's equal match to the conversation."""
    seq = np.asarray([1, 2, 3, 9, 8, 1, 2, 3], dtype=np.int64)
    doc = LookupText.of("doc", [5, 1, 2, 3, 9, 8])
    prediction = LookupText.of(PRED, [5, 1, 2, 3, 9, 8], preferred=True)
    # the conversation proposes the prediction's tokens too: that draft is named after the prediction
    assert [f.origin for f in find_proposals(seq, 3, 2, [doc, prediction], max_length=32)] == [PRED, PRED, "doc"]
    assert lookup_with_texts(seq, 2, 3, 1, [doc, prediction]) == ([9, 8], 3, PRED)


def test_the_conversation_s_longer_match_into_an_attachment_is_named_after_it() -> None:
    """The window puts an attachment in the prompt too, after a line of its own: the conversation's match runs a
    token further back (into that line), yet the draft is the attachment's copy ("lookup in story.txt")."""
    seq = np.asarray([7, 1, 2, 3, 9, 8, 4, 7, 1, 2, 3], dtype=np.int64)  # 7: the line before the text, twice
    story = LookupText.of("story.txt", [1, 2, 3, 9, 8, 4], preferred=True)
    found = find_proposals(seq, 3, 2, [story], max_length=32)
    assert found == [Found(4, (9, 8), "story.txt"), Found(3, (9, 8), "story.txt")]
    other = LookupText.of("other.txt", [1, 2, 3, 6, 6], preferred=True)  # another continuation: stays apart
    assert [f.origin for f in find_proposals(seq, 3, 2, [other], max_length=32)] == ["", "other.txt"]


def test_one_token_is_not_searched_in_a_text() -> None:
    """One token matches almost anywhere in a long text: a text is searched from two."""
    seq = np.asarray([1, 2, 3], dtype=np.int64)
    doc = LookupText.of("doc", [3, 50, 51])
    assert lookup_with_texts(seq, 2, 3, 1, [doc]) == ([], 0, "")
    assert find_proposals(seq, 1, 2, [doc], max_length=32) == [Found(1, (50, 51), "doc")]  # asked for: it is there


def test_the_ngram_drafter_names_the_text_of_each_draft() -> None:
    doc = LookupText.of("notes.md", [4, 5, 6, 7, 8])
    draft = NgramDrafter().draft(request([1, 4, 5], 3, (doc,)))
    assert draft.tokens == [6, 7, 8]
    assert draft.origins == ["notes.md"] * 3 and draft.sources == [LOOKUP] * 3
    plain = NgramDrafter().draft(request([4, 5, 1, 4, 5], 3))
    assert plain.tokens == [1, 4, 5] and plain.origins == [""] * 3


def test_a_prediction_starts_after_the_prompt_s_last_tokens() -> None:
    """The reply's first round has nothing of its own to match: a prediction is put after the prompt's tail."""
    prompt = list(range(100, 140))
    sources = [
        TextSource(PRED, "abc", "prediction"),
        TextSource("a.txt", "xy", "attachment"),
        TextSource("e", "", "attachment"),
    ]
    texts = lookup_texts(sources, prompt, lambda text: [ord(c) for c in text])
    assert [t.name for t in texts] == [PRED, "a.txt"]  # an empty text is left out
    assert list(texts[0].tokens) == [*prompt[-PREDICTION_ANCHOR:], 97, 98, 99]
    assert texts[0].preferred and texts[1].preferred  # an attachment the window also puts in the prompt: its copy
    assert list(texts[1].tokens) == [120, 121]
    draft = NgramDrafter().draft(request(prompt, 3, tuple(texts)))
    assert draft.tokens == [97, 98, 99] and draft.origins == [PRED] * 3


def test_the_composite_lists_each_text_s_proposal_with_its_origin() -> None:
    drafter = CompositeDrafter(DraftModelDrafter(SureContext(n_ctx=4096)))
    doc = LookupText.of("report.pdf", [1, 2, 3, 4, 60, 61, 62])
    tokens = [9, 5, 2, 3, 4, 70, 71, 1, 2, 3, 4]
    found = drafter.lookups(tokens, 3, texts=[doc])
    assert found[0] == Found(4, (60, 61, 62), "report.pdf")  # "1 2 3 4" is in the text only
    assert Found(3, (70, 71, 1), "") in found
    assert all(f.origin == "" for f in drafter.lookups(tokens, 3))  # no texts: the conversation's alone


def test_each_text_is_weighed_by_its_own_acceptance() -> None:
    """A prediction that keeps missing is priced out while the conversation's lookups keep theirs, and the
    other way round."""
    table = AcceptanceTable({LOOKUP: 0.6, MODEL: 0.6})
    span = tuple(range(100, 116))
    other = tuple(range(200, 216))
    priced = costs()
    for _ in range(6):
        table.record_span(LOOKUP, match_key(8), 0, 8, 0, origin=PRED)  # the prediction: missed at once
        table.record_span(LOOKUP, match_key(8), 0, 8, 8)  # the conversation: kept whole
    best = choose([Found(8, span, PRED), Found(8, other, "")], 16, table, priced, None)
    assert best.origin == "" and best.lookup[0] == 200
    assert table.rate(LOOKUP, 8, 0, PRED) < 0.3 < 0.8 < table.rate(LOOKUP, 8, 0)
    flipped = AcceptanceTable({LOOKUP: 0.6, MODEL: 0.6})
    for _ in range(6):
        flipped.record_span(LOOKUP, match_key(8), 0, 8, 8, origin=PRED)
        flipped.record_span(LOOKUP, match_key(8), 0, 8, 0)
    best = choose([Found(8, span, PRED), Found(8, other, "")], 16, flipped, priced, None)
    assert best.origin == PRED and best.lookup[0] == 100
    assert choose([(8, span)], 16, flipped, priced, None).origin == ""  # a bare (match, tokens) pair: the conversation


def test_an_unrelated_prediction_stops_being_drafted_within_a_few_rounds() -> None:
    """The reply keeps reaching an n-gram the prediction holds, and never goes on as it does: the composite drafts
    from it in the first rounds only."""
    drafter = CompositeDrafter(DraftModelDrafter(SureContext(n_ctx=4096)))
    drafter.timings.fixed = drafter.timings.step = 0.3  # the model's costs are measured...
    for _ in range(30):
        drafter.table.record_span(MODEL, 0, 0, 4, 0)  # ...and it keeps missing: lookup or plain rounds
    prediction = LookupText.of(PRED, [7, 8, *range(500, 540)])
    tokens = list(range(300, 340))
    drafter.prefill(tokens[:-1])
    from_prediction: list[int] = []
    for i in range(40):
        tokens += [1000 + i, 7, 8]  # what the target committed: never what either lookup proposed
        draft = drafter.draft(request(tokens, 16, (prediction,)))
        if PRED in draft.origins:
            from_prediction.append(i)
        assert len(draft.origins) == len(draft.tokens)
        assert all((o == PRED) <= (s is LOOKUP) for o, s in zip(draft.origins, draft.sources, strict=True))
    assert from_prediction and from_prediction[0] < 4, from_prediction
    assert len([i for i in from_prediction if i >= 8]) <= 1, from_prediction  # at most a periodic retry


def costs() -> Costs:
    return Costs(
        model_fixed=0.01,
        model_step=0.01,
        catch_up_token=0.005,
        verify=tuple(0.05 + 0.005 * (i - 1) for i in range(18)),
        overhead_plain=0.001,
        overhead_drafted=0.001,
    )
