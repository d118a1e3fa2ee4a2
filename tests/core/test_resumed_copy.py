"""A copy an edit broke off, resumed: the lookup proposal of a proofread or a rename after its changed word."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from specchat.core.cancel import CancelToken
from specchat.core.engine import lookup
from specchat.core.engine.composite import CompositeDrafter, tuning
from specchat.core.engine.composite import drafter as composite_drafter
from specchat.core.engine.depth import AdaptiveDepth
from specchat.core.engine.drafters import Draft, Drafter, DraftRequest, NgramDrafter, ngram
from specchat.core.engine.lookup import (
    INSERTED,
    REPLACED,
    Found,
    LookupText,
    find_break,
    find_proposals,
    guess_resumed,
    resume_copy,
)
from specchat.core.types import DrafterKind, DraftSource, SamplerParams

PASSAGE = list(range(100, 160))  # the text the reply copies, its tokens all distinct
FILLER = [7, 8, 9, 7, 8, 9, 7, 8]  # the prompt's words around it; the reply's edits use 7-9 as well


def resumed(seq: Sequence[int], texts: Sequence[LookupText] = ()) -> Found | None:
    array = np.asarray(seq, dtype=np.int64)
    broken = find_break(array, texts, look_back=16, aligned=8)
    return None if broken is None else resume_copy(array, 6, broken, reach=8)


def test_after_an_edit_the_copy_resumes_next_to_where_it_broke_off() -> None:
    prompt = [*FILLER, *PASSAGE, *FILLER, PASSAGE[21], 9]  # the word after the edit occurs later in the prompt too
    reply = [*PASSAGE[:20], 8]  # a corrected word in place of PASSAGE[20]
    assert resumed([*prompt, *reply]) is None  # only the edit so far: nothing of the passage has come back
    found = resumed([*prompt, *reply, PASSAGE[21]])  # the word after the edit is the passage's again
    assert found == Found(0, tuple(PASSAGE[22:28]))
    # One token matches far more often than an n-gram; the latest earlier match is not the copy's.
    one_token = find_proposals(np.asarray([*prompt, *reply, PASSAGE[21]]), 1, 6, max_length=32)
    assert one_token and one_token[0].tokens != tuple(PASSAGE[22:28])
    longer = resumed([*prompt, *reply, 9, 9, PASSAGE[23]])  # a longer edit that skipped two of the passage's words
    assert longer == Found(0, tuple(PASSAGE[24:30]))


def test_the_nearest_occurrence_to_the_break_wins_and_texts_are_searched() -> None:
    passage = [*PASSAGE[:16], PASSAGE[12], *PASSAGE[16:]]  # PASSAGE[12] twice, at 12 and at 16
    reply = [*passage[:10], 7, PASSAGE[12]]  # a word of two tokens in place of one, then the passage's 12th
    assert resumed([*FILLER, *passage, *reply]) == Found(0, tuple(passage[13:19]))  # not after the one at 16
    document = LookupText.of("report.txt", passage)
    assert resumed([*FILLER, *reply], [document]) == Found(0, tuple(passage[13:19]), "report.txt")


def test_a_prediction_s_copy_is_resumed_in_its_name_where_the_conversation_holds_it_too() -> None:
    """An editor sends the file in the prompt and as the prediction: the drafts are the prediction's, as a plain
    match of both is (their acceptance is what the usage reports as accepted prediction tokens)."""
    reply = [*PASSAGE[:20], 8, PASSAGE[21]]
    prediction = LookupText.of("prediction", PASSAGE, preferred=True)
    assert resumed([*FILLER, *PASSAGE, *FILLER, *reply], [prediction]) == Found(0, tuple(PASSAGE[22:28]), "prediction")
    attachment = LookupText.of("a.txt", PASSAGE)  # a text not preferred: the conversation's copy comes first
    assert resumed([*FILLER, *PASSAGE, *FILLER, *reply], [attachment]) == Found(0, tuple(PASSAGE[22:28]))


def test_a_copy_of_the_conversation_that_the_prediction_holds_too_is_credited_to_the_prediction() -> None:
    """A reply that opens a code fence and copies the file the prompt holds in one: the copy breaks off right after
    the fence, where the eight tokens before the break (the fence and the code's first words) are the
    conversation's, not the prediction's (the code alone). The resumed copy is the prediction's all the same, as
    OpenAI counts accepted prediction tokens by what of the prediction the completion holds."""
    fence = [3, 4, 5]
    prompt = [*FILLER, *fence, *PASSAGE, *FILLER]
    reply = [*fence, *PASSAGE[:5], 8, PASSAGE[6]]  # a corrected word in place of PASSAGE[5]
    prediction = LookupText.of("prediction", PASSAGE, preferred=True)
    seq = [*prompt, *reply]
    broken = find_break(np.asarray(seq), [prediction], look_back=16, aligned=8)
    assert broken is not None and broken.origin == ""  # the break is found in the conversation
    expected = tuple(PASSAGE[7:13])
    composite = CompositeDrafter(Repeats())
    composite.lookups([*prompt, *fence, *PASSAGE[:5]], 6, texts=[prediction])  # the copy is seen
    found = composite.lookups(seq, 6, texts=[prediction])
    assert Found(0, expected, "prediction") in found
    # Without a prediction, or with a text that is not preferred, the copy stays the conversation's.
    assert Found(0, expected) in composite.lookups(seq, 6, texts=[LookupText.of("a.txt", PASSAGE)])
    # Lookup alone, chosen by hand, credits it the same way.
    drafter = NgramDrafter()
    rng = np.random.default_rng(0)
    drafter.draft(DraftRequest([*prompt, *fence, *PASSAGE[:5]], 6, SamplerParams(), rng, CancelToken()))
    drafted = drafter.draft(DraftRequest(seq, 6, SamplerParams(), rng, CancelToken(), texts=[prediction]))
    assert tuple(drafted.tokens) == expected and set(drafted.origins) == {"prediction"}
    assert lookup.preferred_holder([prediction], PASSAGE[40:46]) == "prediction"
    assert lookup.preferred_holder([prediction], [PASSAGE[40], PASSAGE[42]]) == ""


def test_nothing_is_resumed_without_a_copy_or_far_from_it() -> None:
    chat = [int(t) for t in np.random.default_rng(1).integers(0, 40, 200)]
    assert resumed(chat) is None  # open chat: no recent run of 8 tokens seen before
    far = [*FILLER, *PASSAGE, *FILLER, *PASSAGE[:12], *[7, 8, 9] * 7, PASSAGE[13]]  # the edit longer than look_back
    assert resumed(far) is None
    jumped = [*FILLER, *PASSAGE, *FILLER, *PASSAGE[:12], 7, PASSAGE[40]]  # the next word is the passage's, far on
    assert resumed(jumped) is None


def guesses(seq: Sequence[int], texts: Sequence[LookupText] = ()) -> list[Found]:
    broken = find_break(np.asarray(seq, dtype=np.int64), texts, look_back=16, aligned=8)
    return [] if broken is None else guess_resumed(6, broken)


def test_before_the_copy_comes_back_its_resume_is_guessed_for_an_insertion_and_a_replacement() -> None:
    prompt = [*FILLER, *PASSAGE, *FILLER]
    one = [*prompt, *PASSAGE[:20], 8]  # one token the passage does not have, where PASSAGE[20] was
    assert guesses(one) == [Found(INSERTED, tuple(PASSAGE[20:26])), Found(REPLACED, tuple(PASSAGE[21:27]))]
    two = [*prompt, *PASSAGE[:20], 8, 9]  # an edit of two tokens: replaced, it stood for two of the passage's
    assert guesses(two) == [Found(INSERTED, tuple(PASSAGE[20:26])), Found(REPLACED, tuple(PASSAGE[22:28]))]
    document = LookupText.of("notes.txt", PASSAGE)
    assert guesses([*FILLER, *PASSAGE[:20], 8], [document])[0] == Found(INSERTED, tuple(PASSAGE[20:26]), "notes.txt")
    chat = [int(t) for t in np.random.default_rng(1).integers(0, 40, 200)]
    assert guesses(chat) == []  # no copy broke off: nothing to guess


class Repeats(Drafter):
    """A model drafter that is never asked: its rounds are priced out (see :func:`lookup_only`)."""

    kind = DrafterKind.DRAFT_MODEL
    source = DraftSource.MODEL

    def draft(self, request: DraftRequest) -> Draft:
        raise AssertionError("the model is priced out in these replies")


def proofread(drafter: Drafter, truth: list[int], prompt: int) -> int:
    """Target passes to write ``truth`` after its first ``prompt`` tokens: each round the drafts the target keeps,
    and one token of its own, as the engine's loop commits them."""
    adaptive = AdaptiveDepth()
    for _ in range(3):
        adaptive.observe(0, 0, None, 0.02)
    rng = np.random.default_rng(0)
    tokens = truth[:prompt]
    drafter.prefill(tokens[:-1])
    passes = 0
    while len(tokens) < len(truth):
        k = min(16, len(truth) - len(tokens))
        draft = drafter.draft(DraftRequest(tokens, k, SamplerParams(), rng, CancelToken(), costs=adaptive.costs))
        assert DraftSource.MODEL not in draft.sources
        kept = 0
        while kept < len(draft.tokens) and draft.tokens[kept] == truth[len(tokens) + kept]:
            kept += 1
        adaptive.observe(len(draft.tokens), kept, 0.0 if draft.tokens else None, 0.02 + 0.001 * len(draft.tokens))
        tokens = truth[: len(tokens) + kept + 1]
        passes += 1
    return passes


def lookup_only() -> CompositeDrafter:
    """A composite whose model is timed as far dearer than a target pass, so that lookups and plain rounds alone
    write the reply."""
    drafter = CompositeDrafter(Repeats())
    drafter.timings.fixed = drafter.timings.step = 50.0
    drafter.timings.catch_up = 10.0
    drafter.timings.read_token = 10.0
    return drafter


def test_the_composite_guesses_only_after_a_short_edit_of_a_copy() -> None:
    drafter = CompositeDrafter(Repeats())
    prompt = [*FILLER, *PASSAGE, *FILLER]
    copied = [*prompt, *PASSAGE[:20]]
    assert drafter.lookups(copied, 6)[0].match >= 8  # a copy: the search for its resume opens
    matches = {f.match for f in drafter.lookups([*copied, 250], 6)}  # a word the prompt does not have
    assert {INSERTED, REPLACED} <= matches
    long_edit = [*copied, 250, 251, 252, 253]
    assert not {INSERTED, REPLACED} & {f.match for f in drafter.lookups(long_edit, 6)}


def test_a_proofread_reply_takes_fewer_passes_with_its_copy_resumed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Six replies that copy a 120-token passage with a corrected word every 20 tokens: each correction breaks
    every n-gram, and the copy's next word occurs all over the passage."""
    words = [int(t) for t in np.random.default_rng(3).integers(200, 230, 120)]  # a small vocabulary: words repeat
    truth = [*FILLER, *words, *FILLER]
    prompt = len(truth)
    for start in range(0, 120, 20):
        truth += [*words[start : start + 19], 7]  # the 20th word corrected
    drafters = [lookup_only(), lookup_only()]
    passes = [proofread(drafter, truth, prompt) for drafter in drafters]
    monkeypatch.setattr(tuning, "RESUME_LOOK_BACK", 0)
    without = proofread(lookup_only(), truth, prompt)
    assert passes[0] == passes[1]  # deterministic
    assert passes[0] <= 0.8 * without, (passes[0], without)
    table = drafters[0].table  # a resumed copy's acceptance is its own: it was kept, one token's matches were not
    assert table.rate(DraftSource.LOOKUP, 0, 0) > 0.5 > table.rate(DraftSource.LOOKUP, 1, 0)
    # Each correction replaced a word: the guess past it was kept, the guess of an insertion was not.
    assert table.rate(DraftSource.LOOKUP, REPLACED, 0) > 0.5 > table.rate(DraftSource.LOOKUP, INSERTED, 0)
    monkeypatch.setattr(tuning, "RESUME_LOOK_BACK", 16)
    monkeypatch.setattr(composite_drafter, "guess_resumed", lambda *_: [])
    assert passes[0] < proofread(lookup_only(), truth, prompt)  # the guesses saved passes


def test_a_reply_that_inserts_punctuation_learns_that_its_copy_resumes_where_it_broke_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    words = [int(t) for t in np.random.default_rng(4).integers(200, 230, 120)]
    truth = [*FILLER, *words, *FILLER]
    prompt = len(truth)
    for start in range(0, 120, 15):
        truth += [*words[start : start + 15], 8]  # a full stop after every 15 words
    drafter = lookup_only()
    passes = proofread(drafter, truth, prompt)
    table = drafter.table
    assert table.rate(DraftSource.LOOKUP, INSERTED, 0) > 0.5 > table.rate(DraftSource.LOOKUP, REPLACED, 0)
    monkeypatch.setattr(composite_drafter, "guess_resumed", lambda *_: [])
    assert passes < proofread(lookup_only(), truth, prompt)


def test_lookup_chosen_by_hand_resumes_a_proofread_copy_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The n-gram drafter ("Lookup" in the picker) has no acceptance table to weigh guesses by: it resumes a copy
    once its next word comes, and searches only shortly after a copy, never in open chat."""
    words = [int(t) for t in np.random.default_rng(3).integers(200, 230, 120)]
    truth = [*FILLER, *words, *FILLER]
    prompt = len(truth)
    for start in range(0, 120, 20):
        truth += [*words[start : start + 19], 7]  # the 20th word corrected
    resuming = proofread(NgramDrafter(), truth, prompt)
    searches: list[int] = []

    def counted(*args: object, **kwargs: object) -> object:
        searches.append(1)
        return find_break(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ngram, "find_break", counted)
    chat = [int(t) for t in np.random.default_rng(1).integers(0, 40, 300)]
    proofread(NgramDrafter(), chat, 100)
    assert searches == []  # open chat: no copy, no search
    monkeypatch.setattr(lookup, "RESUME_LOOK_BACK", 0)
    assert resuming < proofread(NgramDrafter(), truth, prompt)
